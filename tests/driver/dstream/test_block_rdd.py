"""How a batch's blocks become partitions: in order, at most the limit, balanced by
records; the conf key's values."""

from __future__ import annotations

import itertools

import pytest

from walstream.driver.dstream.block_rdd import (
    CONF_MAX_PARTITIONS,
    auto_max_partitions,
    group_blocks,
    max_partitions_from_conf,
    slice_blocks,
)
from walstream.driver.engine_config import EngineConfig
from walstream.errors import ConfigError
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.wal.handle import RecordHandle


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


def _items_of(runs: list[list[tuple[ReceivedBlockInfo, int, int | None]]]
              ) -> list[list[tuple[str, int]]]:
    """Each run's items as (block id, index), by the block's stated count."""
    return [[(b.block_id, i) for b, lo, hi in run
             for i in range(lo, b.num_records if hi is None else hi)] for run in runs]


@pytest.mark.parametrize("sizes", [[5], [1, 1], [3, 1, 4, 1, 5, 9, 2, 6], [0, 0, 0, 7],
                                   [100, 1, 1, 1, 1, 1, 1], [1] * 100, [20] * 37,
                                   [300, 300, 300, 300, 300], [100, 10], [0, 0], [2, 0, 0, 1]])
@pytest.mark.parametrize("limit", [1, 2, 3, 7, 12, 200])
def test_slices_cover_every_item_once_in_order_in_balanced_runs(
        sizes: list[int], limit: int) -> None:
    blocks = _blocks(sizes)
    runs = slice_blocks(blocks, limit)
    items = _items_of(runs)
    every = [(b.block_id, i) for b in blocks for i in range(b.num_records)]
    assert list(itertools.chain.from_iterable(items)) == every
    # every block appears, in order (a cut block twice in a row), and its parts
    # are contiguous, from its first item to its end
    seen = [b for b, _, _ in itertools.chain.from_iterable(runs)]
    assert [b for b, _ in itertools.groupby(seen)] == blocks
    for b in blocks:
        parts = [(lo, hi) for run in runs for bb, lo, hi in run if bb is b]
        assert parts[0][0] == 0 and parts[-1][1] is None
        assert all(x[1] == y[0] for x, y in itertools.pairwise(parts))
    assert all(runs), "no run is empty"
    assert len(runs) <= min(limit, len(blocks))
    total = sum(sizes)
    if total >= min(limit, len(blocks)) > 1:
        sizes_of_runs = [len(r) for r in items]
        assert len(runs) == min(limit, len(blocks))
        assert max(sizes_of_runs) - min(sizes_of_runs) <= 1, sizes_of_runs


def test_five_blocks_on_two_slots_are_two_and_a_half_each() -> None:
    runs = slice_blocks(_blocks([300] * 5), 2)
    assert [[(b.block_id, lo, hi) for b, lo, hi in run] for run in runs] == [
        [("b0", 0, None), ("b1", 0, None), ("b2", 0, 150)],
        [("b2", 150, None), ("b3", 0, None), ("b4", 0, None)]]


def test_slices_with_zero_keep_one_whole_block_per_run() -> None:
    blocks = _blocks([4, 9, 1])
    assert slice_blocks(blocks, 0) == [[(b, 0, None)] for b in blocks]


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
