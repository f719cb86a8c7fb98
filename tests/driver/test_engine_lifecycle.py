"""StreamingEngine's lifecycle: construction opens no WAL, binds no port and starts no
thread; recover() replays the driver WAL once (reading ``tracker`` first recovers);
start() regenerates the resubmitted batches before the first new one and tells the
listeners that batch's time.

No Spark: an engine without receivers launches no Spark job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.driver.generator_harness import block
from tests.driver.helpers import INTERVAL, WAIT_S
from walstream.driver.engine import StreamingEngine
from walstream.driver.engine_config import EngineConfig
from walstream.driver.scheduler.job_scheduler import Job
from walstream.driver.scheduler.listener import StreamingListener
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.testing import wait_until
from walstream.wal import BatchedWriteAheadLog, EpochChainLog, KafkaWriteAheadLog

pytestmark = pytest.mark.timeout(120)


def _config(app: str, bootstrap: str) -> EngineConfig:
    return EngineConfig(app_id=app, batch_interval_ms=INTERVAL, bootstrap_servers=bootstrap)


class _Started(StreamingListener):
    def __init__(self) -> None:
        self.times: list[int] = []

    def onStreamingStarted(self, streamingStarted: Any) -> None:  # noqa: N803
        self.times.append(streamingStarted.time())


def _crashed_with_batch_1000(bootstrap: str, app: str) -> ReceivedBlockInfo:
    """A driver WAL as a driver that died with batch 1000 allocated leaves it; the block."""
    dead = ReceivedBlockTracker(
        [0], BatchedWriteAheadLog(KafkaWriteAheadLog(bootstrap, f"{app}-driver")))
    b = block(0)
    assert dead.add_block(b)
    dead.allocate_blocks_to_batch(1000)
    dead.stop()
    return b


def test_construction_opens_no_wal_binds_no_port_and_starts_no_thread() -> None:
    before = set(threading.enumerate())
    # Nothing listens there: a constructor that touched Kafka would fail or hang.
    engine = StreamingEngine(None, _config("never-started", "127.0.0.1:1"), {},
                             lambda t: [])
    assert set(threading.enumerate()) - before == set()
    with pytest.raises(RuntimeError, match="has not bound the receiver endpoint"):
        _ = engine.receiver_tracker
    engine.stop()  # neither replays nor binds only to close
    assert set(threading.enumerate()) - before == set()
    assert engine.await_termination(0)


def test_recover_replays_once_and_start_regenerates_before_the_first_new_batch(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    app = unique_name("engine")
    b = _crashed_with_batch_1000(bootstrap, app)

    built: list[int] = []
    seen: dict[int, dict[int, tuple[ReceivedBlockInfo, ...]]] = {}
    holder: dict[str, StreamingEngine] = {}

    def jobs(t: int) -> list[Job]:
        built.append(t)
        seen[t] = holder["e"].tracker.get_blocks_of_batch(t)
        return []

    engine = holder["e"] = StreamingEngine(None, _config(app, bootstrap), {}, jobs,
                                           driver_stream_ids=[0])
    started = _Started()
    engine.add_listener(started)
    try:
        assert engine.tracker.allocated_batch_times() == [1000]  # reading it recovered
        tracker = engine.tracker
        engine.recover()
        assert engine.tracker is tracker  # once
        first = engine.start(resubmit=[1000])
        wait_until(lambda: first in built, WAIT_S, "the first new batch")
        assert built[0] == 1000 and built.index(1000) < built.index(first)
        assert seen[1000] == {0: (b,)}
    finally:
        engine.stop()
    assert started.times == [first]


def test_after_a_restart_receivers_launch_once_the_first_resubmitted_batch_completed(
    bootstrap: str, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = unique_name("engine-launch")
    _crashed_with_batch_1000(bootstrap, app)

    release = threading.Event()
    order: list[str] = []

    def jobs(t: int) -> list[Job]:
        def run() -> None:
            if t == 1000:
                release.wait(WAIT_S)
                order.append("batch 1000 done")
        return [Job(t, 0, "out", run)]

    engine = StreamingEngine(None, _config(app, bootstrap), {}, jobs, driver_stream_ids=[0])
    monkeypatch.setattr(engine, "_launch_receivers", lambda endpoint: order.append("launch"))
    try:
        engine.start(resubmit=[1000])
        wait_until(lambda: engine.generator.scheduler.pending_times() != [], WAIT_S,
                   "batch 1000 running")
        assert order == []  # start() returned; the receivers wait for the batch
        release.set()
        wait_until(lambda: "launch" in order, WAIT_S, "the receivers launched")
        assert order == ["batch 1000 done", "launch"]
    finally:
        release.set()
        engine.stop()


def test_a_first_start_launches_receivers_at_once_and_a_stop_never_loses_a_launch(
    bootstrap: str, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = StreamingEngine(None, _config(unique_name("engine-fresh"), bootstrap), {},
                            lambda t: [])
    launched: list[str] = []
    monkeypatch.setattr(fresh, "_launch_receivers", lambda endpoint: launched.append("fresh"))
    try:
        fresh.start()
        assert launched == ["fresh"]
    finally:
        fresh.stop()

    # A restart stopped while its first batch still runs: the receivers are
    # launched (and then stopped with the rest) before stop() returns.
    app = unique_name("engine-stop")
    _crashed_with_batch_1000(bootstrap, app)
    hold = threading.Event()
    engine = StreamingEngine(None, _config(app, bootstrap), {},
                             lambda t: [Job(t, 0, "out", lambda: hold.wait(WAIT_S))],
                             driver_stream_ids=[0])
    monkeypatch.setattr(engine, "_launch_receivers", lambda endpoint: launched.append("late"))
    try:
        engine.start(resubmit=[1000])
    finally:
        engine.stop()
        hold.set()
    assert launched == ["fresh", "late"]


def test_without_ha_an_engine_continues_the_epoch_an_ha_leader_left_after_its_cut_was_cleaned(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """An app ran with HA (it led epoch 1 and cleaned its log past the record of its
    own cut), then restarts without HA: it continues epoch 1, which the chain's
    link still names, rather than epoch 0 (whose fences the checkpoint and the
    sinks already passed, so the restart would be refused)."""
    app = unique_name("engine-after-ha")
    now = [1_000.0]
    chain = BatchedWriteAheadLog(EpochChainLog(bootstrap, f"{app}-driver",
                                               rolling_interval_ms=1_000))
    follower = chain.follow(poll_timeout_s=0.3)
    assert list(follower.drain_to_end(20)) == []
    chain.begin_epoch(1, follower)
    follower.close()
    leader = ReceivedBlockTracker([0], chain, clock=lambda: now[0])
    leader.start_epoch(1)  # its cut, logged at 1 s
    for t in range(2, 6):
        now[0] = t * 1_000.0
        assert leader.add_block(block(0))
        leader.allocate_blocks_to_batch(t * 1_000_000)
    leader.cleanup_old_batches(4_000_000, True)  # past the cut's record
    leader.stop()
    chain.close()

    engine = StreamingEngine(None, _config(app, bootstrap), {}, lambda t: [],
                             driver_stream_ids=[0])
    try:
        engine.recover()
        assert engine.epoch == 1
        assert engine.tracker.epoch == 1 and engine.tracker.fence_epoch == 1
        assert engine.tracker.allocated_batch_times() == [4_000_000, 5_000_000]
    finally:
        engine.stop()
