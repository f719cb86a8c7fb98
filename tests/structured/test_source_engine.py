"""SourceEngine over a real tracker and an in-memory driver log: offsets name
logged allocations; a restarted driver answers the same; a commit forgets what it
covered and cleans nothing a later micro-batch reads."""

from __future__ import annotations

import time

import pytest

from walstream.driver.engine_config import EngineConfig
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.structured.errors import OffsetError
from walstream.structured.options import SourceOptions
from walstream.structured.source_engine import SourceEngine
from walstream.testing import MemoryWAL
from walstream.wal.handle import RecordHandle
from walstream.wal.segments import segment_topic


def engine_over(wal: MemoryWAL, margin_ms: int = 0) -> SourceEngine:
    options = SourceOptions.parse({"name": "clicks", "source": "rate", "numReceivers": "2",
                                   "cleanMarginMs": str(margin_ms)})
    engine = SourceEngine(None, options,
                          EngineConfig(app_id="clicks", batch_interval_ms=1000,
                                       bootstrap_servers="unused:9092"))
    engine._tracker = ReceivedBlockTracker([0, 1], wal)  # replays what wal holds
    return engine


def report(engine: SourceEngine, stream: int, n: int, records: int = 10,
           seg_start: int | None = None) -> ReceivedBlockInfo:
    start = int(time.time() * 1000) - 1_000 if seg_start is None else seg_start
    topic = segment_topic("", f"clicks-receiver-{stream}", start, start + 60_000)
    info = ReceivedBlockInfo(stream, f"input-{stream}-{n}", records, RecordHandle(topic, 0, n))
    assert engine.tracker.add_block(info)
    return info


def test_no_new_block_keeps_the_offset_where_it_is() -> None:
    engine = engine_over(MemoryWAL())
    assert engine.latest(-1, None, None) == -1
    assert engine.blocks(-1, -1) == []


def test_an_offset_names_a_logged_allocation_that_a_restart_answers_again() -> None:
    wal = MemoryWAL()
    engine = engine_over(wal)
    a, b = report(engine, 0, 1), report(engine, 1, 1)
    end = engine.latest(-1, None, None)
    assert end > -1 and engine.blocks(-1, end) == [a, b]
    # The driver dies before Spark logs the offset: a new one replays the allocation
    # and answers the same end from the same start, with the same blocks.
    c = report(engine, 0, 2)
    again = engine_over(MemoryWAL(list(wal.records)))
    assert again.latest(-1, None, None) == end
    assert again.blocks(-1, end) == [a, b]
    assert again.tracker.get_unallocated_blocks(0) == [c]
    # The next micro-batch takes what came after.
    nxt = again.latest(end, None, None)
    assert nxt > end and again.blocks(end, nxt) == [c]


def test_limits_bound_a_micro_batch_and_the_rest_waits_in_order() -> None:
    engine = engine_over(MemoryWAL())
    blocks = [report(engine, 0, i) for i in range(3)] + [report(engine, 1, 0)]
    first = engine.latest(-1, 2, None)
    assert engine.blocks(-1, first) == [blocks[0], blocks[3]]
    second = engine.latest(first, None, 15)
    assert engine.blocks(first, second) == [blocks[1]]
    third = engine.latest(second, None, None)
    assert engine.blocks(second, third) == [blocks[2]]
    assert engine.latest(third, None, None) == third


def test_an_end_the_log_does_not_hold_is_refused() -> None:
    engine = engine_over(MemoryWAL())
    report(engine, 0, 0)
    end = engine.latest(-1, None, None)
    with pytest.raises(OffsetError, match="no allocation at"):
        engine.blocks(end, end + 5)


def test_a_commit_cleans_what_it_covered_and_keeps_what_later_batches_read() -> None:
    wal = MemoryWAL()
    engine = engine_over(wal)
    report(engine, 0, 0, seg_start=int(time.time() * 1000) - 5_000)
    first = engine.latest(-1, None, None)
    time.sleep(0.01)
    kept = report(engine, 1, 0)  # stored in a segment started a second ago
    second = engine.latest(first, None, None)
    queued = report(engine, 0, 1)
    engine.commit(first)
    assert engine.tracker.allocated_batch_times() == [second]
    # A driver restarted after the clean still has the pending allocation and the
    # queued block: the threshold stayed below both.
    again = engine_over(MemoryWAL(list(wal.records)))
    assert again.blocks(first, second) == [kept]
    assert again.tracker.get_unallocated_blocks(0) == [queued]
    # Committing the same end again changes nothing.
    engine.commit(first)
    assert engine.tracker.allocated_batch_times() == [second]


def test_the_sources_kafka_and_receiver_options_reach_the_engine_config() -> None:
    from walstream.structured.source_engine import engine_conf

    options = SourceOptions.parse({
        "name": "clicks", "source": "rate", "kafka.bootstrap.servers": "b:9092",
        "kafka.security.protocol": "SSL", "maxRatePerReceiver": "250",
        "blockInterval": "50"})
    conf = engine_conf({"spark.walstream.kafka.security.protocol": "PLAINTEXT",
                        "spark.app.name": "x"}, options)
    config = EngineConfig.from_spark_conf(conf, app_id="clicks", batch_interval_ms=1000,
                                          bootstrap_servers="b:9092")
    assert config.max_rate == 250.0  # every receiver's rate limit
    assert config.block_interval_ms == 50
    assert config.wal_options["client_config"]["security.protocol"] == "SSL"  # option wins
