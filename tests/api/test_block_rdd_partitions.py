"""A receiver stream's batch on real Spark and Kafka: the blocks' items come in block
order whatever the partition limit, in at most that many partitions of equal counts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from walstream.driver.dstream.block_rdd import block_rdd, union_rdds
from walstream.receiver.block import Block
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.items import encode_item
from walstream.wal import KafkaWriteAheadLog

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
    # 55 items in three equal runs: one cut falls inside block 5, which two tasks read
    assert [len(part) for part in three] == [18, 18, 19]

    # The default is Spark's default parallelism: 1 in this module's context.
    assert sc.defaultParallelism == 1
    assert block_rdd(sc, blocks, bootstrap).glom().collect() == [expected]
    assert block_rdd(sc, [], bootstrap).collect() == []


def test_a_union_of_block_rdds_is_one_block_rdd_in_union_order(
        sc: Any, bootstrap: str, unique_name: Callable[[str], str]) -> None:
    wal = KafkaWriteAheadLog(bootstrap, unique_name("blockunion"))
    streams: list[list[ReceivedBlockInfo]] = [[], [], []]
    try:
        for s, n in ((0, 4), (2, 5)):  # stream 1 has no block this batch
            for i in range(n):
                handle = wal.write(Block(s, f"s{s}b{i}", [encode_item(f"{s}.{i}")]).encode(),
                                   int(time.time() * 1000))
                streams[s].append(ReceivedBlockInfo(s, f"s{s}b{i}", 1, handle))
    finally:
        wal.close()
    expected = [f"0.{i}" for i in range(4)] + [f"2.{i}" for i in range(5)]

    rdds = [block_rdd(sc, blocks, bootstrap, max_partitions=2) for blocks in streams]
    merged = union_rdds(rdds)
    assert merged.getNumPartitions() == 2  # the limit holds for the union
    assert merged.collect() == expected == sc.union(rdds).collect()

    # A cached block RDD is read from its cache: then a plain union.
    rdds[0].cache()
    plain = union_rdds(rdds)
    assert plain.getNumPartitions() == 4
    assert plain.collect() == expected
    rdds[0].unpersist()

    # Read differently (another limit): a plain union too.
    other = block_rdd(sc, streams[2], bootstrap, max_partitions=5)
    assert union_rdds([rdds[1], other]).getNumPartitions() == 5
