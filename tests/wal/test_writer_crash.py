"""A writer killed with SIGKILL loses none of the records whose write returned."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from wal import KafkaWriteAheadLog, RecordHandle


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
