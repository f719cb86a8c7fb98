"""The listener bus: a slow, hanging or failing listener never holds up batches; a full
bus drops and counts events instead of blocking; stop delivers what is queued, bounded.

The jobs are plain Python callables: no Spark, no Kafka.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.driver.helpers import WAIT_S
from tests.driver.scheduler_doubles import Env, job
from walstream.driver.scheduler.batch_info import BatchInfo
from walstream.driver.scheduler.job_scheduler import JobScheduler
from walstream.driver.scheduler.listener import (
    ListenerBus,
    StreamingListener,
    StreamingListenerBatchSubmitted,
)

pytestmark = pytest.mark.timeout(30)


def test_a_slow_listener_does_not_block_batches() -> None:
    e = Env()
    release = threading.Event()

    class Slow(StreamingListener):
        def onBatchSubmitted(self, batchSubmitted: Any) -> None:  # noqa: N803
            release.wait(WAIT_S)

    try:
        e.bus._listeners.insert(0, Slow())
        started = time.monotonic()
        for t in (1000, 2000, 3000):
            e.scheduler.submit_job_set([job(t, 0, lambda: None)], t, {0: 1})
        assert e.scheduler.wait_idle(2.0)
        assert time.monotonic() - started < 2.0
        assert [i.batchTime() for i in e.scheduler.completed] == [1000, 2000, 3000]
        assert e.collector.events == []  # still stuck in the slow listener
        release.set()
        e.bus.stop(WAIT_S)
        assert len(e.collector.events) == 15  # 5 events per batch, none lost
        assert e.bus.dropped == 0
    finally:
        release.set()
        e.close()


def test_a_full_bus_drops_and_counts_instead_of_blocking() -> None:
    e = Env(capacity=3)
    release = threading.Event()
    delivered: list[str] = []

    class Stuck(StreamingListener):
        def onBatchSubmitted(self, batchSubmitted: Any) -> None:  # noqa: N803
            delivered.append("submitted")
            release.wait(WAIT_S)

    try:
        e.bus._listeners.insert(0, Stuck())
        started = time.monotonic()
        for t in (1000, 2000, 3000, 4000):
            e.scheduler.submit_job_set([job(t, 0, lambda: None)], t, {})
        assert e.scheduler.wait_idle(2.0)
        assert time.monotonic() - started < 2.0
        # 20 events posted, at most 1 being delivered + 3 queued.
        assert e.bus.dropped >= 16
        release.set()
        e.bus.stop(WAIT_S)
        assert len(e.collector.events) + e.bus.dropped == 20
    finally:
        release.set()
        e.close()


def test_bus_post_never_blocks_and_stop_delivers_queued_events() -> None:
    bus = ListenerBus(capacity=2)
    got: list[int] = []

    class L(StreamingListener):
        def onBatchSubmitted(self, batchSubmitted: Any) -> None:  # noqa: N803
            got.append(batchSubmitted.batchInfo().batchTime())

    bus.add(L())
    for n in range(5):  # not started: 2 queued, 3 dropped, nothing blocks
        bus.post(StreamingListenerBatchSubmitted(BatchInfo(n, {}, 0)))
    assert bus.dropped == 3
    bus.start()
    bus.stop(WAIT_S)
    assert got == [0, 1]


def test_a_failing_listener_does_not_stop_delivery() -> None:
    bus = ListenerBus()
    got: list[str] = []

    class Bad(StreamingListener):
        def onBatchStarted(self, batchStarted: Any) -> None:  # noqa: N803
            raise RuntimeError("listener bug")

    class Good(StreamingListener):
        def onBatchStarted(self, batchStarted: Any) -> None:  # noqa: N803
            got.append("started")

    bus.add(Bad())
    bus.add(Good())
    bus.start()
    s = JobScheduler(bus)
    try:
        s.submit_job_set([job(1000, 0, lambda: None)], 1000, {})
        s.submit_job_set([job(2000, 0, lambda: None)], 2000, {})
        assert s.wait_idle(WAIT_S)
        bus.stop(WAIT_S)
        assert got == ["started", "started"]
    finally:
        s.stop()


def test_bus_stop_is_bounded_when_a_listener_hangs() -> None:
    """stop(timeout_s) must return even when the queue is full behind a stuck listener."""
    bus = ListenerBus(capacity=1)
    release = threading.Event()

    class Stuck(StreamingListener):
        def onBatchSubmitted(self, batchSubmitted: Any) -> None:  # noqa: N803
            release.wait(WAIT_S * 2)

    bus.add(Stuck())
    bus.start()
    try:
        bus.post(StreamingListenerBatchSubmitted(BatchInfo(1000, {}, 0)))
        deadline = time.monotonic() + WAIT_S
        while bus._queue.qsize() and time.monotonic() < deadline:  # the stuck one took it
            time.sleep(0.01)
        bus.post(StreamingListenerBatchSubmitted(BatchInfo(2000, {}, 0)))  # fills the queue
        started = time.monotonic()
        done = threading.Event()
        def stop() -> None:
            bus.stop(0.3)
            done.set()

        th = threading.Thread(target=stop, daemon=True)
        th.start()
        assert done.wait(3.0), "ListenerBus.stop(0.3) hung on a full queue"
        assert time.monotonic() - started < 3.0
    finally:
        release.set()
