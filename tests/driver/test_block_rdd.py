"""How a batch's blocks become partitions: in order, at most the limit, balanced by
records; the conf key's values."""

from __future__ import annotations

import itertools

import pytest

from driver.block_rdd import (
    CONF_MAX_PARTITIONS,
    auto_max_partitions,
    group_blocks,
    max_partitions_from_conf,
)
from driver.engine_config import EngineConfig
from receiver.block_info import ReceivedBlockInfo
from wal.handle import RecordHandle
from walstream.errors import ConfigError


def _blocks(sizes: list[int]) -> list[ReceivedBlockInfo]:
    return [ReceivedBlockInfo(0, f"b{i}", n, RecordHandle("wal", 0, i))
            for i, n in enumerate(sizes)]


@pytest.mark.parametrize("sizes", [[5], [1, 1], [3, 1, 4, 1, 5, 9, 2, 6], [0, 0, 0, 7],
                                   [100, 1, 1, 1, 1, 1, 1], [1] * 100, [20] * 37])
@pytest.mark.parametrize("limit", [1, 2, 3, 7, 12, 200])
def test_runs_keep_order_and_cover_every_block_once(sizes: list[int], limit: int) -> None:
    blocks = _blocks(sizes)
    groups = group_blocks(blocks, limit)
    assert list(itertools.chain.from_iterable(groups)) == blocks
    assert all(groups), "no run is empty"
    assert len(groups) == min(limit, len(blocks))


def test_zero_keeps_one_partition_per_block() -> None:
    blocks = _blocks([4, 4, 4])
    assert group_blocks(blocks, 0) == [[b] for b in blocks]


def test_runs_balance_records_not_block_counts() -> None:
    # Ten small blocks then one of the size of them all: two runs split there.
    groups = group_blocks(_blocks([10] * 10 + [100]), 2)
    assert [sum(b.num_records for b in g) for g in groups] == [100, 100]
    even = group_blocks(_blocks([20] * 100), 3)
    assert sorted(len(g) for g in even) == [33, 33, 34]


def test_conf_values() -> None:
    assert max_partitions_from_conf({}) is None
    assert max_partitions_from_conf({CONF_MAX_PARTITIONS: " Auto "}) is None
    assert max_partitions_from_conf({CONF_MAX_PARTITIONS: "0"}) == 0
    assert max_partitions_from_conf({CONF_MAX_PARTITIONS: "12"}) == 12
    for bad in ("-1", "many", "1.5"):
        with pytest.raises(ConfigError, match=CONF_MAX_PARTITIONS.replace(".", r"\.")):
            max_partitions_from_conf({CONF_MAX_PARTITIONS: bad})


def test_engine_config_reads_the_key() -> None:
    def cfg(conf: dict[str, str]) -> EngineConfig:
        return EngineConfig.from_spark_conf(conf, app_id="a", batch_interval_ms=1000,
                                            bootstrap_servers="b:9092")

    assert cfg({}).block_rdd_max_partitions is None
    assert cfg({CONF_MAX_PARTITIONS: "0"}).block_rdd_max_partitions == 0
    with pytest.raises(ConfigError):
        cfg({CONF_MAX_PARTITIONS: "x"})


class _Sc:
    def __init__(self, master: str, parallelism: int) -> None:
        self.master, self.defaultParallelism = master, parallelism


def test_auto_limit_is_the_default_parallelism_within_the_slots_receivers_leave() -> None:
    assert auto_max_partitions(_Sc("local[12]", 3), 10) == 2  # two slots beside ten receivers
    assert auto_max_partitions(_Sc("local[3]", 3), 1) == 2
    assert auto_max_partitions(_Sc("local[8]", 3), 1) == 3
    assert auto_max_partitions(_Sc("local[2]", 4), 2) == 4  # no slot left: not below Spark's
    assert auto_max_partitions(_Sc("spark://h:7077", 16), 4) == 12
