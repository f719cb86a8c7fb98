"""JobScheduler: listener events, BatchInfo, concurrency, job errors, idleness.

The jobs are plain Python callables: no Spark, no Kafka.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.driver.helpers import WAIT_S
from tests.driver.scheduler_doubles import Env, job, sleeper
from walstream.driver.errors import JobFailedError
from walstream.driver.scheduler.batch_info import BatchInfo
from walstream.driver.scheduler.job_scheduler import JobScheduler
from walstream.driver.scheduler.listener import ListenerBus, StreamingListener

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def env() -> Iterator[Env]:
    e = Env()
    yield e
    e.close()


@pytest.fixture
def env2() -> Iterator[Env]:
    e = Env(concurrent_jobs=2)
    yield e
    e.close()


# -- events and BatchInfo -----------------------------------------------------------------


def test_events_arrive_in_order_per_batch_with_batch_info_filled(env: Env) -> None:
    for t in (1000, 2000):
        env.scheduler.submit_job_set(
            [job(t, 0, sleeper(0.06), "save"), job(t, 1, sleeper(0.02), "print")],
            t, {0: 5, 1: 7})
    env.flush()

    for t in (1000, 2000):
        kinds = env.collector.kinds(t)
        assert kinds[0] == ("submitted", None)
        assert kinds[1] == ("started", None)
        assert kinds[-1] == ("completed", None)
        ops = kinds[2:-1]
        assert sorted(ops) == [("op_completed", 0), ("op_completed", 1),
                               ("op_started", 0), ("op_started", 1)]
        for op in (0, 1):
            assert ops.index(("op_started", op)) < ops.index(("op_completed", op))

        info: BatchInfo = env.collector.last("completed", t)
        assert info.batchTime() == t
        assert info.numRecords() == 12
        assert info.num_records_per_stream == {0: 5, 1: 7}
        submitted, start, end = (info.submissionTime(), info.processingStartTime(),
                                 info.processingEndTime())
        assert start >= 0 and end >= 0
        assert submitted <= start <= end
        assert info.schedulingDelay() == start - submitted
        assert info.processingDelay() == end - start
        assert info.totalDelay() == end - submitted
        sd, pd, td = info.schedulingDelay(), info.processingDelay(), info.totalDelay()
        assert sd >= 0 and pd >= 0 and td >= 0
        assert sd >= 0 and td == sd + pd
        # Two jobs run one after another (one thread): at least 60 + 20 ms.
        assert pd >= 75

        ops_info = info.outputOperationInfos()
        assert sorted(ops_info) == [0, 1]
        assert [ops_info[0].name(), ops_info[1].name()] == ["save", "print"]
        assert ops_info[1].description() == "description of op1"
        for op_id, at_least in ((0, 55), (1, 15)):
            o = ops_info[op_id]
            assert o.batchTime() == t
            assert o.failureReason() is None
            o_start, o_end, o_dur = o.startTime(), o.endTime(), o.duration()
            assert o_start >= 0 and o_end >= 0 and o_dur >= 0
            assert start <= o_start <= o_end <= end
            assert o_dur == o_end - o_start
            assert o_dur >= at_least

    # The completion callback got every batch, in order, once; `completed` agrees.
    assert [i.batchTime() for i in env.callbacks] == [1000, 2000]
    assert [i.batchTime() for i in env.scheduler.completed] == [1000, 2000]
    assert env.scheduler.pending_times() == []
    assert env.scheduler.errors == []


def test_events_are_snapshots_of_the_moment_they_were_posted() -> None:
    """PySpark's events carry the BatchInfo as it was when posted: a listener reading
    onBatchSubmitted late must not see a processing start, nor onBatchStarted an end."""
    e = Env()
    gate = threading.Event()

    class Late(StreamingListener):
        def onBatchSubmitted(self, batchSubmitted: Any) -> None:  # noqa: N803
            gate.wait(WAIT_S)  # deliver everything after the batch has finished

    try:
        e.bus._listeners.insert(0, Late())
        e.scheduler.submit_job_set([job(1000, 0, sleeper(0.02))], 1000, {0: 1})
        assert e.scheduler.wait_idle(WAIT_S)
        gate.set()
        e.bus.stop(WAIT_S)
        seen = {(s["kind"], s.get("op")): s for s in e.collector.seen}
        # Times not known yet are -1, as PySpark's listener objects report them.
        assert seen[("submitted", None)]["start"] == -1
        assert seen[("submitted", None)]["end"] == -1
        assert seen[("started", None)]["start"] >= 0
        assert seen[("started", None)]["end"] == -1
        assert seen[("op_started", 0)]["start"] >= 0
        assert seen[("op_started", 0)]["end"] == -1
        assert seen[("op_completed", 0)]["end"] >= 0
        assert seen[("completed", None)]["end"] >= 0
    finally:
        gate.set()
        e.close()


# -- concurrency ----------------------------------------------------------------------------


def _timed(spans: dict[int, tuple[float, float]], t: int, seconds: float,
           lock: threading.Lock) -> Callable[[], None]:
    def run() -> None:
        start = time.monotonic()
        time.sleep(seconds)
        with lock:
            spans[t] = (start, time.monotonic())
    return run


def test_one_concurrent_job_runs_batches_one_after_another_in_order(env: Env) -> None:
    spans: dict[int, tuple[float, float]] = {}
    lock = threading.Lock()
    times = [1000, 2000, 3000, 4000]
    for t in times:
        env.scheduler.submit_job_set([job(t, 0, _timed(spans, t, 0.05, lock))], t, {})
    # All four are pending at first (queued behind the first).
    assert env.scheduler.pending_times() == times
    env.flush()
    order = sorted(spans, key=lambda t: spans[t][0])
    assert order == times
    for a, b in itertools.pairwise(times):
        assert spans[a][1] <= spans[b][0], f"batch {b} started before {a} ended"
    assert [i.batchTime() for i in env.callbacks] == times
    # Later batches waited: their scheduling delay grows.
    delays = [env.collector.last("completed", t).schedulingDelay() for t in times]
    assert delays[-1] >= 100


def test_two_concurrent_jobs_overlap_batches(env2: Env) -> None:
    both_running = threading.Barrier(2, timeout=WAIT_S)
    spans: dict[int, tuple[float, float]] = {}
    lock = threading.Lock()

    def meet(t: int) -> Callable[[], None]:
        def run() -> None:
            start = time.monotonic()
            both_running.wait()  # BrokenBarrierError unless the other batch runs too
            time.sleep(0.02)
            with lock:
                spans[t] = (start, time.monotonic())
        return run

    env2.scheduler.submit_job_set([job(1000, 0, meet(1000))], 1000, {})
    env2.scheduler.submit_job_set([job(2000, 0, meet(2000))], 2000, {})
    env2.flush()
    assert env2.scheduler.errors == []
    assert spans[2000][0] < spans[1000][1] and spans[1000][0] < spans[2000][1]
    for t in (1000, 2000):
        kinds = env2.collector.kinds(t)
        assert kinds == [("submitted", None), ("started", None), ("op_started", 0),
                         ("op_completed", 0), ("completed", None)]


def test_two_concurrent_jobs_of_one_batch_keep_event_order(env2: Env) -> None:
    barrier = threading.Barrier(2, timeout=WAIT_S)

    def meet() -> None:
        barrier.wait()  # BrokenBarrierError unless both jobs run at once

    env2.scheduler.submit_job_set([job(1000, 0, meet), job(1000, 1, meet)], 1000, {0: 3})
    env2.flush()
    assert env2.scheduler.errors == []
    kinds = env2.collector.kinds(1000)
    assert kinds[:2] == [("submitted", None), ("started", None)]
    assert kinds[-1] == ("completed", None)
    assert len(kinds) == 7
    info = env2.collector.last("completed", 1000)
    assert all(o.endTime() >= 0 for o in info.outputOperationInfos().values())


# -- errors -------------------------------------------------------------------------------


def test_a_failing_job_is_recorded_and_later_batches_still_run(env: Env) -> None:
    ran: list[int] = []

    def boom() -> None:
        raise ValueError("boom 42")

    assert env.scheduler.await_error(0.05) is None  # nothing failed yet
    env.scheduler.submit_job_set(
        [job(1000, 0, boom, "explode"), job(1000, 1, lambda: ran.append(1000))], 1000, {})
    env.scheduler.submit_job_set([job(2000, 0, lambda: ran.append(2000))], 2000, {})

    err = env.scheduler.await_error(WAIT_S)
    assert isinstance(err, JobFailedError)
    assert "boom 42" in str(err)
    assert "1000" in str(err)
    assert "explode" in str(err)
    assert isinstance(err.__cause__, ValueError)
    env.flush()

    # The batch's other output operation and the next batch ran.
    assert ran == [1000, 2000]
    info = env.collector.last("completed", 1000)
    failed = info.outputOperationInfos()[0]
    reason = failed.failureReason()
    assert reason is not None and "boom 42" in reason and "ValueError" in reason
    assert failed.endTime() >= 0
    assert info.outputOperationInfos()[1].failureReason() is None
    op_done = [i for k, t, op, i in env.collector.events
               if k == "op_completed" and t == 1000 and op == 0]
    assert "boom 42" in (op_done[0].failureReason() or "")
    assert env.collector.last("completed", 2000).outputOperationInfos()[0].failureReason() \
        is None
    assert [i.batchTime() for i in env.scheduler.completed] == [1000, 2000]
    assert len(env.scheduler.errors) == 1
    assert env.scheduler.await_error(0) is err  # the first error, again


def test_await_error_returns_none_after_stop() -> None:
    s = JobScheduler(ListenerBus())
    waiter: list[JobFailedError | None] = []
    th = threading.Thread(target=lambda: waiter.append(s.await_error(WAIT_S)))
    th.start()
    time.sleep(0.05)
    started = time.monotonic()
    s.stop()
    th.join(WAIT_S)
    assert not th.is_alive()
    assert waiter == [None]
    assert time.monotonic() - started < 2


# -- empty batches, idleness ------------------------------------------------------------


def test_an_empty_job_set_completes_at_once(env: Env) -> None:
    env.scheduler.submit_job_set([], 3000, {0: 0})
    # Completed before submit_job_set returned.
    assert env.scheduler.pending_times() == []
    assert [i.batchTime() for i in env.callbacks] == [3000]
    assert env.scheduler.wait_idle(0.01)
    info = env.scheduler.completed[-1]
    assert info.batchTime() == 3000
    assert info.numRecords() == 0
    assert info.processingDelay() == 0
    assert info.outputOperationInfos() == {}
    env.flush()
    kinds = env.collector.kinds(3000)
    assert kinds[0] == ("submitted", None)
    assert kinds[-1] == ("completed", None)


def test_wait_idle_times_out_while_a_batch_runs(env: Env) -> None:
    release = threading.Event()
    def blocked() -> None:
        release.wait(WAIT_S)

    env.scheduler.submit_job_set([job(1000, 0, blocked)], 1000, {})
    started = time.monotonic()
    assert env.scheduler.wait_idle(0.1) is False
    assert 0.09 <= time.monotonic() - started < 2
    assert env.scheduler.pending_times() == [1000]
    release.set()
    assert env.scheduler.wait_idle(WAIT_S) is True
    assert env.scheduler.pending_times() == []
    assert env.scheduler.wait_idle(0) is True


def test_wait_idle_waits_for_the_completion_callback() -> None:
    """Callers stop things after wait_idle (the generator, the WAL): the completion
    handling of the last batch must be over by then."""
    done: list[int] = []

    def slow_callback(info: BatchInfo) -> None:
        time.sleep(0.2)
        done.append(info.batchTime())

    s = JobScheduler(ListenerBus(), on_batch_completed=slow_callback)
    try:
        s.submit_job_set([job(1000, 0, lambda: None)], 1000, {})
        assert s.wait_idle(WAIT_S)
        assert done == [1000]
    finally:
        s.stop()


def test_stopped_scheduler_runs_no_new_batches() -> None:
    s = JobScheduler(ListenerBus())
    s.stop()
    ran: list[int] = []
    s.submit_job_set([job(1000, 0, lambda: ran.append(1))], 1000, {})
    assert s.wait_idle(0.5)
    assert ran == []
    assert s.pending_times() == []
