"""BatchedWriteAheadLog (Spark's BatchedWriteAheadLogSuite points), plus real-broker runs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from walstream.testing import MemoryWAL
from walstream.wal import (
    BatchedWriteAheadLog,
    KafkaWriteAheadLog,
    RecordHandle,
    WalClosedError,
    WalError,
    deserialize_batch,
    serialize_batch,
)
from walstream.wal.errors import CorruptRecordError, WalWriteError


def test_serialize_deserialize_round_trip() -> None:
    records = [b"", b"a", bytes(range(256)) * 40]
    assert deserialize_batch(serialize_batch(records)) == records
    with pytest.raises(CorruptRecordError):
        deserialize_batch(b"plain record")


def _start_writers(
    log: BatchedWriteAheadLog, items: list[tuple[bytes, int]]
) -> tuple[list[threading.Thread], dict[bytes, object]]:
    results: dict[bytes, object] = {}

    def run(rec: bytes, t: int) -> None:
        try:
            results[rec] = log.write(rec, t)
        except Exception as exc:
            results[rec] = exc

    threads = [threading.Thread(target=run, args=it) for it in items]
    for th in threads:
        th.start()
        time.sleep(0.01)  # queue order = start order
    return threads, results


def test_groups_are_stamped_with_the_latest_time_and_read_back() -> None:
    mem = MemoryWAL()
    log = BatchedWriteAheadLog(mem)
    mem.gate.clear()  # hold the first group so the others queue up
    threads, results = _start_writers(log, [(b"a", 5), (b"b", 9), (b"c", 7), (b"d", 8)])
    time.sleep(0.1)
    mem.gate.set()
    for th in threads:
        th.join()
    # First group: a (taken alone while the gate was shut); second group: b, c, d.
    assert [t for _, t in mem.records] == [5, 9]
    assert list(log.read_all()) == [b"a", b"b", b"c", b"d"]
    for rec, handle in results.items():
        assert isinstance(handle, RecordHandle)
        assert log.read(handle) == rec
    log.close()
    assert mem.closed


def test_a_wrapped_failure_reaches_every_writer_of_the_group() -> None:
    mem = MemoryWAL()
    log = BatchedWriteAheadLog(mem)
    mem.gate.clear()
    mem.fail_writes = -1  # every write of the wrapped log fails
    mem.fail_with = lambda: OSError("disk on fire")
    threads, results = _start_writers(log, [(f"r{i}".encode(), i) for i in range(6)])
    time.sleep(0.1)
    mem.gate.set()
    for th in threads:
        th.join()
    assert len(results) == 6
    for exc in results.values():
        assert isinstance(exc, WalWriteError)
        assert "disk on fire" in str(exc)
    assert mem.records == []
    log.close()


def test_close_fails_what_is_still_queued() -> None:
    mem = MemoryWAL()
    log = BatchedWriteAheadLog(mem)
    mem.gate.clear()
    threads, results = _start_writers(log, [(f"q{i}".encode(), i) for i in range(5)])
    time.sleep(0.1)
    closer = threading.Thread(target=log.close)
    closer.start()
    time.sleep(0.2)
    mem.gate.set()  # let the group in flight finish
    closer.join()
    for th in threads:
        th.join()
    ok = [r for r, v in results.items() if isinstance(v, RecordHandle)]
    failed = [v for v in results.values() if isinstance(v, WalClosedError)]
    assert ok == [b"q0"]  # the group in flight completes
    assert len(failed) == 4
    with pytest.raises(WalClosedError):
        log.write(b"late", 1)


def test_batched_kafka_log_end_to_end(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    kafka = KafkaWriteAheadLog(bootstrap, unique_name("batched"), write_timeout_s=20)
    log = BatchedWriteAheadLog(kafka)
    try:
        results: dict[int, RecordHandle] = {}

        def writer(w: int) -> None:
            for i in range(25):
                results[w * 100 + i] = log.write(f"e{w}-{i}".encode(), 1000 + i)

        threads = [threading.Thread(target=writer, args=(w,)) for w in range(16)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert len(results) == 400
        assert log.groups_written < 400  # concurrent writes were grouped
        for key, handle in results.items():
            assert log.read(handle) == f"e{key // 100}-{key % 100}".encode()
        everything = list(log.read_all())
        assert sorted(everything) == sorted(f"e{k // 100}-{k % 100}".encode() for k in results)
        # Per writer, order is kept.
        for w in range(16):
            mine = [e for e in everything if e.startswith(f"e{w}-".encode())]
            assert mine == [f"e{w}-{i}".encode() for i in range(25)]
        reopened = KafkaWriteAheadLog(bootstrap, kafka.name)
        assert sorted(BatchedWriteAheadLog(reopened).read_all()) == sorted(everything)
        reopened.close()
        log.clean(2**40, wait_for_completion=True)
        assert list(log.read_all()) == []
    finally:
        log.close()
    with pytest.raises(WalError):
        log.read_all()
