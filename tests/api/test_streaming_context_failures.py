"""StreamingContext failures end to end: a batch that cannot be prepared stops the
context and awaitTermination raises its error; a failed job's batch is not completed
and keeps its data."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.api.helpers import TIMEOUT
from walstream.driver import KafkaUtils, StreamingContext
from walstream.driver.dstream.direct_stream import DirectKafkaInputDStream
from walstream.driver.errors import JobFailedError
from walstream.testing import wait_until

pytestmark = pytest.mark.spark


def test_direct_stream_probe_failing_stops_context_and_await_termination_raises_it(
        ssc: StreamingContext, bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """Kafka down for the end-offset probe: the batch is retried (bounded), then the
    context stops and awaitTermination raises the probe's error; no batch ran past it."""
    topic = topic_factory("probe-fails", partitions=1)
    stream = KafkaUtils.createDirectStream(ssc, [topic], {"bootstrap.servers": bootstrap})
    assert isinstance(stream, DirectKafkaInputDStream)
    calls: list[int] = []

    def kafka_down(topic: str, partition: int, at_least: int) -> int:
        calls.append(at_least)
        raise TimeoutError(f"no answer reading the end of {topic}[{partition}]")

    stream._end_offset = kafka_down  # type: ignore[method-assign]
    ran: list[Any] = []
    stream.foreachRDD(lambda t, rdd: ran.append(t))
    ssc.start()
    with pytest.raises(TimeoutError, match="no answer reading the end") as err:
        ssc.awaitTermination(60)  # the original error, as Spark's awaitTermination
    assert any(note.startswith("Error preparing batch") for note in err.value.__notes__)
    # Raised once the stop it caused has finished: a script ending here leaves
    # nothing of the context running.
    assert ssc._state == "stopped"
    assert StreamingContext.getActive() is None
    assert ran == []  # no batch ran past the one that could not be prepared
    assert len(calls) == 4  # the first attempt and the 3 default retries
    time.sleep(0.2)
    assert not ssc.sparkContext._jsc.sc().isStopped()  # the application stops it


def _driver_wal_events(bootstrap: str, app_id: str) -> list[Any]:
    """Every tracker event the driver WAL holds, in order."""
    from walstream.driver.scheduler.driver_wal import open_driver_wal
    from walstream.driver.scheduler.tracker_events import decode_event

    log = open_driver_wal(bootstrap, app_id)
    try:
        return [decode_event(r) for r in log.read_all()]
    finally:
        log.close()


def test_failed_output_batch_is_not_completed_and_keeps_its_blocks(
        ssc: StreamingContext, bootstrap: str, tmp_path: Any) -> None:
    """A batch whose output raises: awaitTermination raises that error; later batches
    run and are cleaned up, but the failed one stays pending (in every checkpoint),
    is never cleaned up, and its blocks stay allocated to it in the driver WAL."""
    from walstream.checkpoint.files import read_latest
    from walstream.driver.scheduler.tracker_events import BatchAllocation, BatchCleanup
    from walstream.receiver.rate_receiver import RateGeneratorReceiver

    cpd = str(tmp_path / "cp")
    ssc.checkpoint(cpd)
    failed: list[int] = []
    seen: list[int] = []

    def output(t: Any, rdd: Any) -> None:
        seen.append(int(t.timestamp() * 1000))
        # The third batch: the ones before it complete and can be cleaned up.
        if not failed and len(seen) >= 3 and rdd.count() > 0:
            failed.append(seen[-1])
            raise ValueError("the sink refused batch")

    ssc.receiverStream(RateGeneratorReceiver(rate=200)).foreachRDD(output)
    ssc.start()
    with pytest.raises(JobFailedError, match="the sink refused batch"):
        ssc.awaitTermination(60)
    t = failed[0]
    engine = ssc._engine
    assert engine is not None
    batch_ms = engine.config.batch_interval_ms
    # Later batches complete, are checkpointed and cleaned up after (well past t).
    wait_until(lambda: any(i.batchTime() > t + 4 * batch_ms and i.batchTime() not in
                           engine.scheduler.failed_times()
                           for i in engine.scheduler.completed),
               TIMEOUT, "later batches", poll_s=0.05)
    wait_until(lambda: (c := read_latest(cpd)) is not None
               and c.checkpoint_time_ms > t + 4 * batch_ms,
               TIMEOUT, "a later checkpoint", poll_s=0.05)
    latest = read_latest(cpd)
    assert latest is not None
    assert t in latest.pending_times_ms, "a restart would not re-run the failed batch"
    assert t in engine.scheduler.pending_times() and engine.scheduler.failed_times() == [t]
    blocks = engine.tracker.get_blocks_of_batch(t)
    assert sum(b.num_records for bs in blocks.values() for b in bs) > 0
    app_id = engine.config.app_id
    ssc.stop(stopSparkContext=False)

    events = _driver_wal_events(bootstrap, app_id)
    cleaned = {x for e in events if isinstance(e, BatchCleanup) for x in e.batch_times_ms}
    assert cleaned, "no cleanup ran at all: the test proves nothing"
    assert t not in cleaned, "the failed batch was cleaned up as if completed"
    assert max(cleaned) < t
    allocations = [e for e in events if isinstance(e, BatchAllocation)
                   and e.batch_time_ms == t]
    assert allocations and any(bs for _, bs in allocations[-1].blocks)


def test_graceful_stop_of_checkpointed_context_logs_last_cleanup_without_errors(
        ssc: StreamingContext, bootstrap: str, tmp_path: Any,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """stop(stopGraceFully=True) drains the checkpoint writer before it closes the
    driver WAL: the last batch's cleanup (after its checkpoint) is logged, and the
    stop logs no error and prints no traceback."""
    import logging

    from walstream.driver.scheduler.tracker_events import BatchCleanup
    from walstream.receiver.rate_receiver import RateGeneratorReceiver

    ssc.checkpoint(str(tmp_path / "cp"))
    ssc.receiverStream(RateGeneratorReceiver(rate=200)).foreachRDD(lambda rdd: rdd.count())
    ssc.start()
    engine = ssc._engine
    assert engine is not None
    wait_until(lambda: len(engine.scheduler.completed) >= 3, TIMEOUT, "three batches", ssc=ssc)
    app_id, batch_ms = engine.config.app_id, engine.config.batch_interval_ms
    capsys.readouterr()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        ssc.stop(stopSparkContext=False, stopGraceFully=True)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    assert "Traceback" not in capsys.readouterr().err
    last = max(i.batchTime() for i in engine.scheduler.completed)
    cleanups = [e for e in _driver_wal_events(bootstrap, app_id) if isinstance(e, BatchCleanup)]
    # The last batch's cleanup drops every batch before its threshold (last - batch).
    assert cleanups and max(cleanups[-1].batch_times_ms, default=-1) == last - 2 * batch_ms
    # The cleanup was announced first: the clean mark names the last completed batch.
    from walstream.checkpoint.files import read_clean_mark

    assert read_clean_mark(str(tmp_path / "cp")) == last
