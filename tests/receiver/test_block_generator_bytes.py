"""BlockGenerator's byte cap: a block is cut when its bytes reach max_block_bytes, so a
burst of large records can never make a block over the WAL's record limit."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.receiver.generator_doubles import RecordingListener, make
from walstream.errors import ConfigError
from walstream.receiver.block_generator import BlockGenerator, BlockGeneratorConfig
from walstream.testing import WAIT_S, wait_until


def test_a_block_is_cut_when_its_bytes_reach_max_block_bytes(
    generators: list[BlockGenerator],
) -> None:
    listener = RecordingListener()
    # The interval and the record cap are far away: only bytes can cut these blocks.
    g = make(generators, listener, block_interval_ms=60_000, max_block_records=100_000,
             max_block_bytes=1000)
    items = [bytes([i]) * 300 for i in range(10)]
    for item in items:
        g.add_data(item)
    wait_until(lambda: len(listener.pushed) >= 3, what="blocks cut by bytes")
    g.stop(timeout_s=WAIT_S)
    sizes = [sum(len(r) for r in recs) for _, recs in listener.pushed]
    assert all(s <= 1000 for s in sizes), sizes
    assert listener.pushed_records() == items


def test_a_single_item_larger_than_max_block_bytes_goes_alone(
    generators: list[BlockGenerator],
) -> None:
    listener = RecordingListener()
    g = make(generators, listener, block_interval_ms=60_000, max_block_bytes=100)
    g.add_data(b"a" * 10)
    g.add_data(b"b" * 500)  # over the cap on its own: cut what is buffered, then it alone
    g.add_data(b"c" * 10)
    g.stop(timeout_s=WAIT_S)
    assert [[len(r) for r in recs] for _, recs in listener.pushed] == [[10], [500], [10]]


@pytest.mark.parametrize("bad", [0, -1, 2**40])
def test_max_block_bytes_is_validated(bad: int) -> None:
    with pytest.raises(ConfigError, match="max_block_bytes"):
        BlockGeneratorConfig(max_block_bytes=bad)


def test_the_default_max_block_bytes_is_below_the_wal_record_limit() -> None:
    from walstream.wal.config import KafkaWalConfig

    assert BlockGeneratorConfig().max_block_bytes < KafkaWalConfig().max_record_bytes


def test_stop_returns_when_the_last_block_fails_after_the_end_marker(
    make_sup: Any, wal: Any,
) -> None:
    """The pusher may take the end marker and then fail finishing the block in
    flight; it must not wait for another end marker that never comes."""
    sup, _ = make_sup(gen={"block_interval_ms": 60_000})
    sup.start()
    sup.push_single("x", ("src", 0, 0))
    wal.close()  # the last block's store fails during stop
    started = time.monotonic()
    sup.stop("done", None)
    assert time.monotonic() - started < WAIT_S
    assert sup.generator.failed is not None
