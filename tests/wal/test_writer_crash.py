"""A writer killed with SIGKILL loses none of the records whose write returned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from walstream import killpoints
from walstream.wal import KafkaWriteAheadLog, RecordHandle
from walstream.wal.errors import CorruptRecordError, TornRecordError


def _record(i: int) -> bytes:
    return f"record-{i}:".encode() * (1 + i % 400)


def test_sigkill_after_n_acknowledged_writes_loses_none(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    name = unique_name("crash")
    proc = subprocess.Popen(
        [sys.executable, "-m", "walstream.testing.wal_writer", bootstrap, name],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    acked: list[tuple[int, RecordHandle]] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            row = json.loads(line)
            acked.append((row["i"], RecordHandle.from_dict(row["handle"])))
            if len(acked) == 300:
                os.kill(proc.pid, signal.SIGKILL)  # mid-stream: more writes are in flight
                break
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert len(acked) == 300

    log = KafkaWriteAheadLog(bootstrap, name)
    try:
        for i, handle in acked:
            assert log.read(handle) == _record(i)
        everything = list(log.read_all())
        # Exactly the N acknowledged records, plus possibly records whose write
        # had not returned yet, in order: never fewer, never out of order.
        assert len(everything) >= 300
        assert everything == [_record(i) for i in range(len(everything))]
        assert len(log.segments()) > 1  # the run crossed segment boundaries
    finally:
        log.clean(2**40, wait_for_completion=True)
        log.close()


def test_sigkill_between_chunks_loses_no_acknowledged_record(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """A writer dies between two chunks of a record; a new writer continues the same
    segment; read_all returns every acknowledged record and reports the torn one."""
    name = unique_name("torn")
    proc = subprocess.Popen(
        [sys.executable, "-m", "walstream.testing.wal_writer", bootstrap, name],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
        env={**os.environ, killpoints.ENV: "wal.between_chunks"},
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL, err
    assert "kill point wal.between_chunks reached" in err
    acked = [(row["i"], RecordHandle.from_dict(row["handle"]))
             for row in map(json.loads, out.splitlines())]
    torn_i = len(acked)  # the record whose write never returned
    assert [i for i, _ in acked] == list(range(torn_i))
    assert len(_record(torn_i)) > 2048, "the torn record spans chunks"

    reports: list[CorruptRecordError] = []
    after = [b"after-crash-single", b"after-crash-multi:" * 300, b"after-crash-last"]
    log = KafkaWriteAheadLog(bootstrap, name, rolling_interval_ms=500, chunk_bytes=2048,
                             on_corrupt=reports.append)
    try:
        segments_before = log.segments()
        # Same time as the torn record: the new writer appends to its segment.
        new = [log.write(rec, 1_000 + 5 * torn_i) for rec in after]
        assert log.segments() == segments_before
        assert new[0].topic == acked[-1][1].topic
        everything = list(log.read_all())
        assert everything == [_record(i) for i in range(torn_i)] + after
        for rec, handle in zip(after, new, strict=True):
            assert log.read(handle) == rec
        assert len(reports) == 1 and log.corrupt_records == 1
        assert isinstance(reports[0], TornRecordError)
    finally:
        log.close()
    # Cleaned by a fresh instance: deleting a segment right after this process's
    # consumer fetched from it can crash librdkafka (SIGSEGV in its metadata cache).
    cleaner = KafkaWriteAheadLog(bootstrap, name)
    cleaner.clean(2**40, wait_for_completion=True)
    cleaner.close()
