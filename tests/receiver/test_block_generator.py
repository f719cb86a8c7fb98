"""BlockGenerator: the points of Spark's BlockGeneratorSuite, plus bounded memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.receiver.generator_doubles import (
    RecordingListener,
    held_until,
    make,
    run_in_thread,
)
from walstream.errors import ConfigError
from walstream.receiver.block_generator import BlockGenerator, BlockGeneratorConfig
from walstream.receiver.errors import BlockGeneratorStoppedError, BlockGeneratorTimeoutError
from walstream.testing import WAIT_S, wait_until

pytestmark = pytest.mark.timeout(30)


# -- config ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"block_interval_ms": 0},
        {"queue_size": 0},
        {"rate_limit": -1},
        {"max_block_records": 0},
        {"put_timeout_s": -0.1},
    ],
)
def test_config_rejects_out_of_range_values(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        BlockGeneratorConfig(**bad)


# -- blocks are cut on time ------------------------------------------------------------


def test_blocks_are_cut_every_block_interval(generators: list[BlockGenerator]) -> None:
    listener = RecordingListener()
    g = make(generators, listener, block_interval_ms=100)
    t0 = time.monotonic()
    i = 0
    while time.monotonic() - t0 < 1.0:
        g.add_data(i)
        i += 1
        time.sleep(0.001)
    g.stop(timeout_s=WAIT_S)
    n = len(listener.pushed)
    # ~10 cuts in 1 s plus the last one at stop; never one block, never one per item.
    assert 6 <= n <= 15, f"{n} blocks for {i} items over 1 s with a 100 ms interval"
    assert g.blocks_generated == n
    assert listener.pushed_records() == list(range(i))


def test_a_long_interval_keeps_items_in_one_block(generators: list[BlockGenerator]) -> None:
    listener = RecordingListener()
    g = make(generators, listener, block_interval_ms=60_000)
    for i in range(50):
        g.add_data(i)
    time.sleep(0.2)
    assert listener.pushed == [], "a block was cut before its interval elapsed"
    g.stop(timeout_s=WAIT_S)
    assert [recs for _, recs in listener.pushed] == [list(range(50))]


def test_a_full_buffer_is_cut_before_the_interval(generators: list[BlockGenerator]) -> None:
    listener = RecordingListener()
    g = make(generators, listener, block_interval_ms=60_000, max_block_records=10)
    for i in range(35):
        g.add_data(i)
    g.stop(timeout_s=WAIT_S)
    sizes = [len(recs) for _, recs in listener.pushed]
    assert all(s <= 10 for s in sizes), sizes
    assert sum(sizes) == 35
    assert listener.pushed_records() == list(range(35))


# -- every item exactly once, in order -------------------------------------------------


def test_every_item_lands_in_exactly_one_block_in_order(
    generators: list[BlockGenerator],
) -> None:
    listener = RecordingListener()
    g = make(generators, listener, block_interval_ms=5, max_block_records=37)
    n = 20_000
    for i in range(n):
        g.add_data(i)
    g.stop(timeout_s=WAIT_S)
    assert len(listener.pushed) > 1
    assert listener.pushed_records() == list(range(n))
    ids = [bid for bid, _ in listener.pushed]
    assert len(set(ids)) == len(ids)
    assert all(bid.startswith("input-3-") for bid in ids)
    assert g.records_added == n


def test_items_from_several_threads_each_land_once(generators: list[BlockGenerator]) -> None:
    listener = RecordingListener()
    g = make(generators, listener, block_interval_ms=5, max_block_records=50)

    def producer(k: int) -> Callable[[], None]:
        def produce() -> None:
            for i in range(2000):
                g.add_data((k, i))

        return produce

    threads = [run_in_thread(producer(k)) for k in range(4)]
    for t, errs in threads:
        t.join(WAIT_S)
        assert not t.is_alive() and errs == []
    g.stop(timeout_s=WAIT_S)
    recs = listener.pushed_records()
    assert sorted(recs) == sorted((k, i) for k in range(4) for i in range(2000))
    for k in range(4):  # each producer's items stay in its order
        assert [i for kk, i in recs if kk == k] == list(range(2000))


def test_add_multiple_data_keeps_a_group_in_one_block(generators: list[BlockGenerator]) -> None:
    listener = RecordingListener()
    g = make(generators, listener, block_interval_ms=2, max_block_records=10)
    groups = [[f"g{k}-{i}" for i in range(7)] for k in range(40)]
    for k, grp in enumerate(groups):
        g.add_multiple_data(grp, metadata=k)
    g.stop(timeout_s=WAIT_S)
    assert listener.pushed_records() == [x for grp in groups for x in grp]
    for _, recs in listener.pushed:
        assert len(recs) % 7 == 0, "a group was split across blocks"
    assert listener.added == [(grp, k) for k, grp in enumerate(groups)]


# -- listener hooks --------------------------------------------------------------------


def test_listener_hooks_see_each_item_and_each_block_in_order(
    generators: list[BlockGenerator],
) -> None:
    listener = RecordingListener()
    g = make(generators, listener, block_interval_ms=10)
    for i in range(300):
        g.add_data(f"item-{i}", metadata=("meta", i))
        if i % 50 == 0:
            time.sleep(0.03)
    g.stop(timeout_s=WAIT_S)

    assert listener.added == [(f"item-{i}", ("meta", i)) for i in range(300)]
    assert listener.errors == []
    assert len(listener.generated) >= 2
    assert listener.generated == [bid for bid, _ in listener.pushed]
    log = listener.log
    for bid in listener.generated:
        gen_at = log.index(("generate", bid, None))
        push_at = log.index(("push", bid, None))
        assert gen_at < push_at
        assert sum(1 for e in log if e[:2] == ("generate", bid)) == 1
        assert sum(1 for e in log if e[:2] == ("push", bid)) == 1
    # on_generate_block runs when the buffer is swapped: the items added before it
    # are exactly the items of that block.
    seen = 0
    pushed = dict(listener.pushed)
    for kind, a, _ in log:
        if kind == "add":
            seen += 1
        elif kind == "generate":
            cut_so_far = listener.generated[: listener.generated.index(a) + 1]
            upto = sum(len(pushed[b]) for b in cut_so_far)
            assert seen == upto


def test_add_metadata_only_reaches_the_listener_without_data(
    generators: list[BlockGenerator],
) -> None:
    listener = RecordingListener()
    g = make(generators, listener, block_interval_ms=10)
    g.add_data("a", 1)
    g.add_metadata_only(2)
    g.add_data("b", 3)
    g.stop(timeout_s=WAIT_S)
    assert listener.added == [("a", 1), (None, 2), ("b", 3)]
    assert listener.pushed_records() == ["a", "b"]


# -- rate limit ------------------------------------------------------------------------


def test_rate_limit_is_respected(generators: list[BlockGenerator]) -> None:
    listener = RecordingListener()
    g = make(generators, listener, block_interval_ms=50, rate_limit=200)
    assert g.rate_limit == 200
    t0 = time.monotonic()
    for i in range(300):
        g.add_data(i)
    elapsed = time.monotonic() - t0
    g.stop(timeout_s=WAIT_S)
    assert elapsed >= 0.95, f"300 items at 200/s took only {elapsed:.2f}s"
    assert elapsed < 5.0
    assert listener.pushed_records() == list(range(300))
    assert len(listener.pushed) > 1  # blocks were still cut while throttled


def test_update_rate_takes_effect_while_running(generators: list[BlockGenerator]) -> None:
    listener = RecordingListener()
    g = make(generators, listener, block_interval_ms=50, rate_limit=20)
    done = threading.Event()

    def produce() -> None:
        for i in range(200):
            g.add_data(i)
        done.set()

    t, errs = run_in_thread(produce)
    time.sleep(0.3)
    assert not done.is_set()  # 200 items at 20/s would take 10 s
    t0 = time.monotonic()
    g.update_rate(0)  # unlimited
    assert g.rate_limit == 0
    assert done.wait(WAIT_S), "raising the rate did not release add_data"
    assert time.monotonic() - t0 < 1.0
    t.join(WAIT_S)
    assert errs == []

    g.update_rate(100)  # and lowering it throttles again
    t0 = time.monotonic()
    for i in range(200, 300):
        g.add_data(i)
    assert time.monotonic() - t0 >= 0.8
    g.stop(timeout_s=WAIT_S)
    assert listener.pushed_records() == list(range(300))


# -- bounded queue: backpressure -------------------------------------------------------


def test_full_queue_blocks_add_data_until_pushing_resumes(
    generators: list[BlockGenerator],
) -> None:
    release = threading.Event()
    listener = RecordingListener(held_until(release))
    g = make(generators, listener, block_interval_ms=5, queue_size=2, max_block_records=2)
    progress: list[int] = []

    def produce() -> None:
        for i in range(100):
            g.add_data(i)
            progress.append(i)

    t, errs = run_in_thread(produce)
    try:
        time.sleep(0.5)
        stuck_at = len(progress)
        time.sleep(0.3)
        assert t.is_alive(), "add_data never blocked on a full queue"
        assert len(progress) == stuck_at, "add_data kept going while the queue was full"
        # Bounded: pusher (1 block) + queue (2) + timer (1) + buffer (1), 2 records each.
        assert stuck_at <= 12, f"{stuck_at} items accepted with a 2-block queue of 2-item blocks"
    finally:
        release.set()
    t.join(WAIT_S)
    assert not t.is_alive(), "add_data stayed blocked after pushing resumed"
    assert errs == []
    g.stop(timeout_s=WAIT_S)
    assert listener.pushed_records() == list(range(100))


def test_put_timeout_raises_a_typed_error_and_loses_nothing_accepted(
    generators: list[BlockGenerator],
) -> None:
    release = threading.Event()
    listener = RecordingListener(held_until(release))
    g = make(generators, listener, block_interval_ms=5, queue_size=1, max_block_records=1,
             put_timeout_s=0.2)
    accepted: list[int] = []
    try:
        t0 = time.monotonic()
        with pytest.raises(BlockGeneratorTimeoutError, match="full block queue"):
            for i in range(1000):
                g.add_data(i)
                accepted.append(i)
        assert time.monotonic() - t0 < WAIT_S
        assert len(accepted) < 10
        assert g.is_active()  # a timeout is backpressure, not a stop
    finally:
        release.set()
    g.add_data("after")
    g.stop(timeout_s=WAIT_S)
    assert listener.pushed_records() == [*accepted, "after"]


# -- stop ------------------------------------------------------------------------------


def test_stop_pushes_everything_queued_then_refuses_data(
    generators: list[BlockGenerator],
) -> None:
    listener = RecordingListener(lambda b, r: time.sleep(0.02))
    g = make(generators, listener, block_interval_ms=60_000, queue_size=100,
             max_block_records=10)
    for i in range(95):
        g.add_data(i)
    assert len(listener.pushed) < 10  # the slow pusher is still behind
    t0 = time.monotonic()
    g.stop(timeout_s=WAIT_S)
    assert time.monotonic() - t0 < WAIT_S
    assert g.is_stopped() and not g.is_active()
    # The last partial block was cut at stop, and every queued block was pushed.
    assert listener.pushed_records() == list(range(95))
    assert len(listener.pushed[-1][1]) == 5
    with pytest.raises(BlockGeneratorStoppedError):
        g.add_data("late")
    with pytest.raises(BlockGeneratorStoppedError):
        g.add_multiple_data(["late"])
    with pytest.raises(BlockGeneratorStoppedError):
        g.add_metadata_only("late")
    g.stop(timeout_s=WAIT_S)  # idempotent
    assert listener.pushed_records() == list(range(95))
    assert listener.errors == []


def test_stop_releases_a_producer_blocked_on_a_full_queue(
    generators: list[BlockGenerator],
) -> None:
    release = threading.Event()
    listener = RecordingListener(held_until(release))
    g = make(generators, listener, block_interval_ms=5, queue_size=1, max_block_records=1)
    accepted: list[int] = []

    def produce() -> None:
        for i in range(100):
            g.add_data(i)
            accepted.append(i)

    t, errs = run_in_thread(produce)
    time.sleep(0.3)
    assert t.is_alive()
    stopper, stop_errs = run_in_thread(lambda: g.stop(timeout_s=WAIT_S))
    t.join(WAIT_S)
    assert not t.is_alive(), "stop() left add_data blocked"
    assert len(errs) == 1 and isinstance(errs[0], BlockGeneratorStoppedError)
    release.set()
    stopper.join(WAIT_S)
    assert not stopper.is_alive() and stop_errs == []
    assert listener.pushed_records() == accepted  # nothing accepted was lost


def test_start_twice_is_refused(generators: list[BlockGenerator]) -> None:
    g = make(generators, RecordingListener())
    with pytest.raises(BlockGeneratorStoppedError):
        g.start()


# -- push failure ----------------------------------------------------------------------


def test_a_failed_push_stops_all_later_pushes(generators: list[BlockGenerator]) -> None:
    release = threading.Event()
    boom = RuntimeError("WAL down")
    calls = {"n": 0}

    def push(block_id: str, records: list[Any]) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            release.wait(WAIT_S)  # let later blocks queue up behind the failing one
            raise boom

    listener = RecordingListener(push)
    g = make(generators, listener, block_interval_ms=5, queue_size=10, max_block_records=1)
    g.add_data(0)
    wait_until(lambda: len(listener.pushed) == 1, what="first block pushed")
    for i in range(1, 6):
        g.add_data(i)
    wait_until(lambda: g.blocks_generated >= 5, what="blocks queued behind the failing push")
    release.set()
    wait_until(lambda: listener.errors != [], what="on_error")

    assert g.failed is boom
    assert len(listener.errors) == 1
    message, err = listener.errors[0]
    assert err is boom and listener.push_attempts[1] in message
    with pytest.raises(BlockGeneratorStoppedError):
        g.add_data("late")
    t0 = time.monotonic()
    g.stop(timeout_s=WAIT_S)
    assert time.monotonic() - t0 < WAIT_S
    time.sleep(0.1)
    # Blocks after the failed one were never handed to on_push_block.
    assert len(listener.push_attempts) == 2
    assert listener.pushed_records() == [0]
    assert not g.is_active()


def test_a_failed_block_cut_stops_accepting_data(generators: list[BlockGenerator]) -> None:
    boom = RuntimeError("listener broke while cutting")

    class FailingCut(RecordingListener):
        def on_generate_block(self, block_id: str) -> None:
            raise boom

    listener = FailingCut()
    g = make(generators, listener, block_interval_ms=5)
    g.add_data(0)
    wait_until(lambda: listener.errors != [], what="on_error after a failed cut")
    assert listener.errors[0][1] is boom
    # Nothing will ever push what is added now: add_data must refuse it, not drop it.
    with pytest.raises(BlockGeneratorStoppedError):
        g.add_data(1)
    assert g.failed is boom
    g.stop(timeout_s=WAIT_S)
    assert listener.pushed == []


def test_flush_pushes_the_current_buffer_and_keeps_running(
    generators: list[BlockGenerator],
) -> None:
    listener = RecordingListener(lambda b, r: time.sleep(0.05))
    g = make(generators, listener, block_interval_ms=60_000, max_block_records=10)
    for i in range(25):  # two full blocks cut early, five items still buffered
        g.add_data(i)
    t0 = time.monotonic()
    assert g.flush(timeout_s=WAIT_S)
    assert time.monotonic() - t0 < WAIT_S
    assert listener.pushed_records() == list(range(25))  # all pushed when flush returns
    assert g.is_active()
    g.add_data(25)
    assert g.flush(timeout_s=WAIT_S)
    assert g.flush(timeout_s=WAIT_S)  # nothing buffered: returns at once
    g.stop(timeout_s=WAIT_S)
    assert listener.pushed_records() == list(range(26))


def test_flush_reports_a_failed_push(generators: list[BlockGenerator]) -> None:
    def fail(block_id: str, records: list[Any]) -> None:
        raise RuntimeError("WAL down")

    g = make(generators, RecordingListener(fail), block_interval_ms=60_000)
    g.add_data(0)
    assert g.flush(timeout_s=WAIT_S) is False
