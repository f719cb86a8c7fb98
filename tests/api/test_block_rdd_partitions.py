"""A receiver stream's batch on real Spark and Kafka: the blocks' items come in block
order whatever the partition limit, in at most that many partitions."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from driver.block_rdd import block_rdd
from receiver.block import Block
from receiver.block_info import ReceivedBlockInfo
from receiver.items import encode_item
from wal import KafkaWriteAheadLog

pytestmark = pytest.mark.spark


def test_partition_limit_changes_boundaries_not_items(
        sc: Any, bootstrap: str, unique_name: Callable[[str], str]) -> None:
    wal = KafkaWriteAheadLog(bootstrap, unique_name("blockrdd"))
    try:
        blocks = []
        for i in range(10):
            items = [f"block {i} line {j}" for j in range(i + 1)]
            handle = wal.write(Block(0, f"b{i}", [encode_item(x) for x in items]).encode(),
                               int(time.time() * 1000))
            blocks.append(ReceivedBlockInfo(0, f"b{i}", len(items), handle))
    finally:
        wal.close()
    expected = [f"block {i} line {j}" for i in range(10) for j in range(i + 1)]

    per_block = block_rdd(sc, blocks, bootstrap, max_partitions=0).glom().collect()
    assert per_block == [[f"block {i} line {j}" for j in range(i + 1)] for i in range(10)]

    three = block_rdd(sc, blocks, bootstrap, max_partitions=3).glom().collect()
    assert len(three) == 3 and all(three)
    assert [x for part in three for x in part] == expected

    # The default is Spark's default parallelism: 1 in this module's context.
    assert sc.defaultParallelism == 1
    assert block_rdd(sc, blocks, bootstrap).glom().collect() == [expected]
    assert block_rdd(sc, [], bootstrap).collect() == []
