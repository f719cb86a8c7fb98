"""EngineMetrics without Spark: the listener's figures, the driver WAL's, the
replay's, the Kafka lag, and the scrape-time gauges, as Prometheus exposes them."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from walstream.driver.scheduler.batch_info import BatchInfo, OutputOperationInfo
from walstream.driver.scheduler.listener import (
    StreamingListenerBatchCompleted,
    StreamingListenerBatchSubmitted,
)
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.scheduler.tracker_events import (
    BatchAllocation,
    BatchCleanup,
    BlockAddition,
    encode_event,
    event_kind_of,
)
from walstream.driver.ui.metrics import (
    EngineMetrics,
    Live,
    MeteredWriteAheadLog,
    ReceiverFigures,
    record_recovery,
)
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.testing.memory_wal import MemoryWAL
from walstream.wal.handle import RecordHandle

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(metrics: EngineMetrics) -> Samples:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def _batch(t: int, records: dict[int, int], failure: str | None = None) -> BatchInfo:
    info = BatchInfo(t, records, t + 10, t + 30, t + 130)
    info.output_operations[0] = OutputOperationInfo(t, 0, "foreachRDD", "", t + 30, t + 130,
                                                    failure)
    return info


def _block(stream: int, n: int, topic: str = "src", part: int = 0, until: int = 0
           ) -> ReceivedBlockInfo:
    return ReceivedBlockInfo(stream, f"b-{stream}-{until}", n, RecordHandle("wal", 0, 0),
                             (SourceRange(topic, part, until - n, until),))


def test_batches_and_records_are_counted_as_the_listener_sees_them() -> None:
    m = EngineMetrics("app")
    m.onBatchSubmitted(StreamingListenerBatchSubmitted(_batch(1000, {0: 5, 1: 2})))
    m.onBatchCompleted(StreamingListenerBatchCompleted(_batch(1000, {0: 5, 1: 2})))
    m.onBatchSubmitted(StreamingListenerBatchSubmitted(_batch(2000, {0: 3})))
    m.onBatchCompleted(StreamingListenerBatchCompleted(_batch(2000, {0: 3}, "boom")))
    s = _samples(m)
    assert s[("walstream_batches_completed_total", ())] == 1
    assert s[("walstream_batches_failed_total", ())] == 1
    assert s[("walstream_records_processed_total", ())] == 7  # the failed batch's are not
    assert s[("walstream_records_received_total", (("stream", "0"),))] == 8
    assert s[("walstream_records_received_total", (("stream", "1"),))] == 2
    assert s[("walstream_last_batch_processing_delay_seconds", ())] == 0.1
    assert s[("walstream_last_batch_scheduling_delay_seconds", ())] == 0.02
    assert s[("walstream_last_batch_total_delay_seconds", ())] == 0.12
    assert s[("walstream_batch_total_delay_seconds_count", ())] == 2
    assert s[("walstream_recovery_first_batch_seconds", ())] > 0
    snap = m.snapshot()
    assert [b["status"] for b in snap["batches"]] == ["completed", "failed"]
    assert snap["batches"][1]["error"] == "boom"


def test_scrape_time_gauges_read_the_live_figures() -> None:
    m = EngineMetrics("app")
    m.set_live(lambda: Live(3, 1, (ReceiverFigures(0, "R", "active", "h", "e", 50.0),
                                   ReceiverFigures(1, "R", "failed", "", "", 0.0))))
    s = _samples(m)
    assert s[("walstream_batches_unprocessed", ())] == 3
    assert s[("walstream_batches_running", ())] == 1
    assert s[("walstream_receivers", (("state", "active"),))] == 1
    assert s[("walstream_receivers", (("state", "failed"),))] == 1
    assert s[("walstream_receivers", (("state", "scheduled"),))] == 0
    assert s[("walstream_receiver_rate_limit", (("stream", "0"),))] == 50.0


def test_the_driver_wal_is_metered_by_kind_and_bytes_and_replayed() -> None:
    m = EngineMetrics("app")
    wal = MemoryWAL()
    metered = MeteredWriteAheadLog(wal, "app-driver", m)
    tracker = ReceivedBlockTracker([0], metered)
    tracker.add_block(_block(0, 4, until=4))
    tracker.allocate_blocks_to_batch(1000)
    tracker.cleanup_old_batches(2000, wait_for_completion=True)
    s = _samples(m)
    log = (("log", "app-driver"),)
    assert s[("walstream_wal_write_seconds_count", log)] == 3
    assert s[("walstream_wal_bytes_written_total", log)] == sum(
        len(e[0]) for e in wal.records if e is not None)
    for kind in ("BLOCK_ADDITION", "BATCH_ALLOCATION", "BATCH_CLEANUP"):
        assert s[("walstream_wal_events_total", (("kind", kind),))] == 1
    [w] = m.snapshot()["wal"]
    assert w["records"] == 3 and w["clean_threshold_ms"] == 2000

    again = EngineMetrics("app")
    replayed = ReceivedBlockTracker([0], MemoryWAL(wal.records))
    record_recovery(again, replayed, [0])
    s = _samples(again)
    assert s[("walstream_recovery_replayed_events", ())] == 3
    assert again.snapshot()["restart"]["restarted"] is True
    fresh = EngineMetrics("app")
    record_recovery(fresh, ReceivedBlockTracker([0], MemoryWAL()), [0])
    assert fresh.snapshot()["restart"]["restarted"] is False


def test_event_kinds_are_read_without_decoding() -> None:
    b = _block(0, 1, until=1)
    assert event_kind_of(encode_event(BlockAddition(b))) == "BLOCK_ADDITION"
    assert event_kind_of(encode_event(BatchAllocation(1, ((0, (b,)),)))) == "BATCH_ALLOCATION"
    assert event_kind_of(encode_event(BatchCleanup((1,)))) == "BATCH_CLEANUP"
    assert event_kind_of(b"not an event") is None
    assert event_kind_of(b"") is None


def test_kafka_lag_is_the_end_minus_what_completed_batches_processed() -> None:
    m = EngineMetrics("app")
    ends = {("t", 0): 100, ("t", 1): 40}
    m.set_source_ends(lambda: dict(ends))
    assert m.kafka_lag() == {}  # no batch completed yet: nothing known processed
    m.batch_sources({0: (_block(0, 60, "t", 0, until=60), _block(0, 40, "t", 1, until=40))})
    assert m.kafka_lag() == {("t", 0): 40, ("t", 1): 0}
    m.batch_sources({0: (_block(0, 10, "t", 0, until=30),)})  # an older range: no step back
    s = _samples(m)
    assert s[("walstream_kafka_source_lag", (("partition", "0"), ("topic", "t")))] == 40
    assert s[("walstream_kafka_source_lag", (("partition", "1"), ("topic", "t")))] == 0
    assert m.snapshot()["kafka_lag"] == [{"topic": "t", "partition": 0, "lag": 40},
                                         {"topic": "t", "partition": 1, "lag": 0}]
