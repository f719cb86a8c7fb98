"""The driver engine on real Spark: listeners, job errors, graceful stop, backpressure."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from integration_tests.harness import POLL_S
from walstream.driver.dstream.block_rdd import block_rdd
from walstream.driver.engine import EngineConfig, StreamingEngine
from walstream.driver.errors import JobFailedError
from walstream.driver.scheduler.job_scheduler import Job
from walstream.driver.scheduler.listener import StreamingListener
from walstream.driver.spark import create_spark_context
from walstream.receiver import RateGeneratorReceiver
from walstream.testing import wait_until

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def sc() -> Iterator[Any]:
    context = create_spark_context("walstream-engine-tests", "local[3]")
    yield context
    context.stop()


class Recorder(StreamingListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def onReceiverStarted(self, receiverStarted: Any) -> None:  # noqa: N803
        self.events.append(("receiver_started", receiverStarted.receiverInfo()))

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803
        self.events.append(("batch_completed", batchCompleted.batchInfo()))


def _engine(sc: Any, bootstrap: str, app: str, receiver: Any,
            jobs: Callable[[StreamingEngine, int], list[Job]], **kw: Any) -> StreamingEngine:
    cfg = EngineConfig(app_id=app, bootstrap_servers=bootstrap, relaunch_delay_s=0.5, **kw)
    holder: dict[str, StreamingEngine] = {}
    engine = StreamingEngine(sc, cfg, {0: receiver}, lambda t: jobs(holder["e"], t))
    holder["e"] = engine
    return engine


def _count_job(counts: list[int], sc: Any, bootstrap: str,
               slow: Callable[[int], float] = lambda n: 0.0) -> Callable[..., list[Job]]:
    def jobs(engine: StreamingEngine, t: int) -> list[Job]:
        def run() -> None:
            blocks = engine.tracker.get_blocks_of_batch_and_stream(t, 0)
            n = block_rdd(sc, blocks, bootstrap).count()
            counts.append(n)
            time.sleep(slow(n))
        return [Job(t, 0, "count", run)]
    return jobs



def test_graceful_stop_processes_every_record_and_listeners_hear_it(
    sc: Any, bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    counts: list[int] = []
    engine = _engine(sc, bootstrap, unique_name("graceful"),
                     RateGeneratorReceiver(rate=3000, seed=1, total=3000),
                     _count_job(counts, sc, bootstrap), batch_interval_ms=500)
    rec = Recorder()
    engine.add_listener(rec)
    engine.start()
    wait_until(lambda: sum(r.until_offset for r in engine.tracker.positions(0)) >= 3000, 60,
               "all 3000 records reported", poll_s=POLL_S)
    engine.stop(graceful=True)
    assert sum(counts) == 3000
    kinds = [k for k, _ in rec.events]
    assert "receiver_started" in kinds
    completed = [info for k, info in rec.events if k == "batch_completed"]
    assert sum(info.numRecords() for info in completed) == 3000
    assert all(info.processingDelay() is not None for info in completed)


def test_a_failing_job_surfaces_in_await_termination_with_its_text(
    sc: Any, bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    seen = [0]

    def jobs(engine: StreamingEngine, t: int) -> list[Job]:
        def run() -> None:
            seen[0] += 1
            if seen[0] == 3:
                raise RuntimeError("kaboom 7 in the user's function")
        return [Job(t, 0, "maybe fail", run)]

    engine = _engine(sc, bootstrap, unique_name("fail"), RateGeneratorReceiver(rate=100, seed=2),
                     jobs, batch_interval_ms=300)
    engine.start()
    try:
        with pytest.raises(JobFailedError, match="kaboom 7 in the user's function"):
            engine.await_termination(30)
    finally:
        engine.stop()


def test_backpressure_lowers_the_receive_rate_when_batches_are_too_slow(
    sc: Any, bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    counts: list[int] = []
    # Batches process 1500 records/s; the source offers 4000/s into 500 ms batches.
    engine = _engine(sc, bootstrap, unique_name("backpressure"),
                     RateGeneratorReceiver(rate=4000, seed=3),
                     _count_job(counts, sc, bootstrap, slow=lambda n: n / 1500),
                     batch_interval_ms=500, backpressure=True)
    engine.start()
    try:
        wait_until(lambda: len([c for c in counts if c]) >= 14, 120, "14 busy batches",
                   poll_s=POLL_S)
    finally:
        engine.stop()
    limit = engine.receiver_tracker.receivers[0].rate_limit
    busy = [c for c in counts if c > 0]  # the first batches may precede the receiver
    early = max(busy[:3])
    late = sum(busy[-4:]) / 4
    assert 0 < limit < 4000 * 0.8, f"rate limit {limit}"
    assert late < 0.8 * early, f"records per batch {counts}, limit {limit}"
