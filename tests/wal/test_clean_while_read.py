"""A clean deleting a segment this process has read by handle must not crash the process.

librdkafka (2.16) dereferences a NULL topic name when a Fetch response for a
deleted topic carries no topic id but a current-leader tag, which Tansu sends:
the process dies with SIGSEGV on the consumer's main thread. A consumer is
exposed while a Fetch for the topic is in flight when it is deleted (the Fetch
librdkafka sends right after delivering a record, even once unassigned), and
whenever it is assigned the topic again after the deletion. The crash kills
the process, so the sequence runs in subprocesses.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

_CHILD = """
import sys, time
from walstream.wal import KafkaWriteAheadLog, RecordNotFoundError

bootstrap, name = sys.argv[1], sys.argv[2]
log = KafkaWriteAheadLog(bootstrap, name, rolling_interval_ms=1000)
other = KafkaWriteAheadLog(bootstrap, name, rolling_interval_ms=1000)  # knows no threshold
old = log.write(b"old", 100)
assert log.read(old) == b"old"
assert other.read(old) == b"old"
log.clean(5000, wait_for_completion=True)  # deletes the segment both just read
for reader in (log, other):  # other's consumer assigns the deleted topic again
    try:
        reader.read(old)
        raise SystemExit("a cleaned record was read")
    except RecordNotFoundError:
        pass
new = log.write(b"new", 6000)
assert log.read(new) == b"new"
time.sleep(0.2)  # librdkafka handles the answers to Fetches for the deleted topic
other.close()
log.close()
print("ok", flush=True)
"""


def test_read_then_clean_then_read_again_does_not_crash(
    bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    crashes: list[int] = []
    started = time.monotonic()
    for run in range(3):
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, bootstrap, unique_name(f"r{run}")],
            capture_output=True, text=True, timeout=60, cwd=Path(__file__).parents[2],
        )
        if proc.returncode == -signal.SIGSEGV:
            crashes.append(run)
            continue
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip() == "ok"
    assert crashes == [], f"SIGSEGV in runs {crashes} of 3"
    assert time.monotonic() - started < 30
