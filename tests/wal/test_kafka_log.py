"""KafkaWriteAheadLog against a real broker (modelled on Spark's WriteAheadLogSuite)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from walstream import procs
from walstream.testing import wait_until
from walstream.wal import (
    KafkaWriteAheadLog,
    RecordHandle,
    RecordNotFoundError,
    RecordTooLargeError,
    WalClosedError,
    WalWriteError,
    WalWriteTimeoutError,
)
from walstream.wal.errors import CorruptRecordError

WalFactory = Callable[..., KafkaWriteAheadLog]


def _topics(bootstrap: str, name: str) -> list[str]:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return sorted(t for t in md.topics if name in t)


def test_write_then_read_every_handle(wal_factory: WalFactory) -> None:
    log = wal_factory()
    data = [f"record-{i}".encode() * (i + 1) for i in range(50)]
    handles = [log.write(d, 1_000 + i) for i, d in enumerate(data)]
    assert len(set(handles)) == 50
    assert all(isinstance(h, RecordHandle) for h in handles)
    # Read back in a random order to exercise seeking.
    for i in [7, 0, 49, 13, 13, 25]:
        assert log.read(handles[i]) == data[i]


def test_no_topic_before_first_write(wal_factory: WalFactory, bootstrap: str) -> None:
    log = wal_factory()
    assert _topics(bootstrap, log.name) == []
    assert list(log.read_all()) == []
    assert _topics(bootstrap, log.name) == []
    log.write(b"x", 5)
    assert len(_topics(bootstrap, log.name)) == 1


def test_read_all_in_write_order_and_after_reopen(wal_factory: WalFactory) -> None:
    log = wal_factory(rolling_interval_ms=100)
    data = [f"r{i}".encode() for i in range(30)]
    for i, d in enumerate(data):
        log.write(d, 1_000 + i * 20)  # spans several segments
    assert len(log.segments()) >= 5
    assert list(log.read_all()) == data
    log.close()
    reopened = wal_factory(name=log.name, rolling_interval_ms=100)
    assert list(reopened.read_all()) == data
    # A new writer continues the log after the old records.
    reopened.write(b"after", 1_000 + 30 * 20)
    assert list(reopened.read_all()) == [*data, b"after"]


def test_a_log_reads_the_same_whatever_codec_wrote_each_record(
        wal_factory: WalFactory) -> None:
    """Readers take any codec: a log written uncompressed, then by a restart with
    another codec, reads back whole and in order, by handle and from the start."""
    first = wal_factory(compression="none")
    name = first.name
    data = [(f"line {i} " * 200).encode() for i in range(40)]
    handles = [first.write(d, 1_000 + i) for i, d in enumerate(data[:20])]
    first.close()
    for codec, part in (("lz4", data[20:30]), ("zstd", data[30:])):
        log = wal_factory(name=name, compression=codec)
        handles += [log.write(d, 1_000 + len(handles)) for d in part]
        log.close()
    reader = wal_factory(name=name)
    assert reader.config.compression == "lz4"  # the default
    assert list(reader.read_all()) == data
    assert [reader.read(handles[i]) for i in (0, 19, 20, 29, 30, 39)] == \
        [data[i] for i in (0, 19, 20, 29, 30, 39)]


def test_records_larger_than_a_chunk_are_split_and_reassembled(wal_factory: WalFactory) -> None:
    log = wal_factory(chunk_bytes=64 * 1024, max_record_bytes=8 * 1024 * 1024)
    big = bytes(range(256)) * (3 * 1024 * 1024 // 256 + 7)  # ~3 MB, 49 chunks
    small = b"small"
    h1 = log.write(big, 10)
    h2 = log.write(small, 11)
    assert h1.chunks == -(-len(big) // (64 * 1024))
    assert h2.offset == h1.offset + h1.chunks
    assert log.read(h1) == big
    assert log.read(h2) == small
    assert list(log.read_all()) == [big, small]


def test_oversize_record_is_refused_naming_the_limit(wal_factory: WalFactory) -> None:
    log = wal_factory(max_record_bytes=1000)
    with pytest.raises(RecordTooLargeError, match="max_record_bytes=1000"):
        log.write(b"z" * 1001, 1)
    assert list(log.read_all()) == []


def test_clean_old_records_synchronously(wal_factory: WalFactory, bootstrap: str) -> None:
    log = wal_factory(rolling_interval_ms=100)
    handles = [log.write(f"r{i}".encode(), i * 50) for i in range(20)]  # times 0..950
    before = len(log.segments())
    log.clean(500, wait_for_completion=True)
    assert list(log.read_all()) == [f"r{i}".encode() for i in range(10, 20)]
    assert len(log.segments()) < before  # space reclaimed: whole segments deleted
    assert all(s.end_ms > 500 for s in log.segments())
    with pytest.raises(RecordNotFoundError):
        log.read(handles[0])
    assert log.read(handles[15]) == b"r15"
    # Another process (a new instance) sees the same cut, even in the straddling segment.
    other = wal_factory(name=log.name, rolling_interval_ms=100)
    assert list(other.read_all()) == [f"r{i}".encode() for i in range(10, 20)]


def test_clean_old_records_asynchronously(wal_factory: WalFactory) -> None:
    log = wal_factory(rolling_interval_ms=100)
    for i in range(20):
        log.write(f"r{i}".encode(), i * 50)
    log.clean(700, wait_for_completion=False)
    # The threshold applies at once; the deletion finishes in the background.
    assert list(log.read_all()) == [f"r{i}".encode() for i in range(14, 20)]
    wait_until(lambda: all(s.end_ms > 700 for s in log.segments()), 20,
               "every segment ending at or before 700 to be deleted", poll_s=0.1,
               details=lambda: f"segments end at {[s.end_ms for s in log.segments()]}")
    assert all(s.end_ms > 700 for s in log.segments())


def test_a_clean_deletes_only_while_its_guard_allows_at_the_moment_of_deleting(
        wal_factory: WalFactory) -> None:
    """The guard runs on the cleaning thread right before the destructive steps, not
    when the clean is asked for: a lease that runs out in between stops the delete."""
    holds = threading.Event()
    holds.set()
    asked: list[str] = []

    def guard() -> None:
        asked.append(threading.current_thread().name)
        if not holds.is_set():
            raise RuntimeError("lease not held")

    log = wal_factory(rolling_interval_ms=100, delete_guard=guard)
    for i in range(20):
        log.write(f"r{i}".encode(), i * 50)
    before = [s.topic for s in log.segments()]
    holds.clear()  # the lease runs out after the clean was asked for
    with pytest.raises(RuntimeError, match="lease not held"):
        log.clean(500, wait_for_completion=True)
    assert [s.topic for s in log.segments()] == before  # nothing deleted
    other = wal_factory(name=log.name, rolling_interval_ms=100)
    assert len(list(other.read_all())) == 20  # no marker either: other readers see all
    assert asked and all(name.startswith("wal-clean-") for name in asked)
    holds.set()
    log.clean(500, wait_for_completion=True)
    assert all(s.end_ms > 500 for s in log.segments())


def test_write_after_clean_of_current_segment_rolls(wal_factory: WalFactory) -> None:
    log = wal_factory(rolling_interval_ms=1000)
    log.write(b"old", 100)
    log.clean(5000, wait_for_completion=True)
    # A record older than the threshold would be invisible at once: refused, not lost.
    with pytest.raises(WalWriteError, match="older than the clean threshold 5000"):
        log.write(b"stale", 200)
    h = log.write(b"new", 5000)  # lands in a new live segment, not the deleted one
    assert list(log.read_all()) == [b"new"]
    assert log.read(h) == b"new"
    assert all(s.end_ms > 5000 for s in log.segments())


def test_close_then_any_call_raises(wal_factory: WalFactory) -> None:
    log = wal_factory()
    h = log.write(b"a", 1)
    log.close()
    for call in (
        lambda: log.write(b"b", 2),
        lambda: log.read(h),
        lambda: list(log.read_all()),
        lambda: log.clean(10, True),
    ):
        with pytest.raises(WalClosedError):
            call()
    # The librdkafka clients are released at close, not when the object is collected.
    assert log._producer is None and log._admin is None
    log.close()  # idempotent


def test_corrupt_and_foreign_records_are_reported_not_crashed_on(
    wal_factory: WalFactory, bootstrap: str
) -> None:
    reports: list[CorruptRecordError] = []
    log = wal_factory(on_corrupt=reports.append)
    log.write(b"good-1", 1)
    topic = log.segments()[0].topic
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, b"not a wal frame", partition=0)
    p.produce(topic, b"WSWF\x09garbage-of-a-future-version", partition=0)
    p.flush(10)
    log.write(b"good-2", 2)
    assert list(log.read_all()) == [b"good-1", b"good-2"]
    assert log.corrupt_records == 2
    assert len(reports) == 2
    assert "bad magic" in str(reports[0])
    assert "unknown schema version 9" in str(reports[1])
    strict = wal_factory(name=log.name, strict=True)
    with pytest.raises(CorruptRecordError):
        list(strict.read_all())


def test_concurrent_writers_all_land(wal_factory: WalFactory) -> None:
    log = wal_factory(chunk_bytes=4096)
    results: dict[int, list[tuple[bytes, RecordHandle]]] = {}

    def writer(w: int) -> None:
        out = []
        for i in range(40):
            rec = f"w{w}-{i}-".encode() * (1 + (i % 5) * 300)  # some span chunks
            out.append((rec, log.write(rec, 1000 + i)))
        results[w] = out

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    written = [pair for w in range(4) for pair in results[w]]
    for rec, h in written:
        assert log.read(h) == rec
    assert sorted(log.read_all()) == sorted(rec for rec, _ in written)


def test_broker_down_gives_a_typed_timeout_not_a_hang() -> None:
    port = procs.free_port()  # nothing listens here
    log = KafkaWriteAheadLog(f"127.0.0.1:{port}", "down", write_timeout_s=2.0, admin_timeout_s=2.0)
    try:
        with pytest.raises(WalWriteTimeoutError):
            log.write(b"lost?", 1)
    finally:
        log.close()
