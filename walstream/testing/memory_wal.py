"""The in-memory write-ahead log of the test kit: the WAL contract, failures on demand.

:class:`MemoryWAL` is a real :class:`~walstream.wal.base.WriteAheadLog` (``write``, ``read``,
``read_all``, ``clean``, ``close``; thread-safe) that keeps its records in a list.
Its fault injection is a set of plain attributes a test sets while the log is in use:

``fail_writes``
    how many of the next writes fail (``-1``: every write, until set back to ``0``);
``fail_with``
    makes the exception such a write raises (default :class:`~walstream.wal.errors.WalWriteError`);
``gate``
    a :class:`threading.Event`, set by default; clear it to hold every write (before it
    is stored or failed) until it is set again.

It counts what happened (``write_attempts``, ``writes``, ``failed_writes``) and
``closed`` tells whether ``close`` ran. ``records`` is the log itself: a list of
``(record, time_ms)``, ``None`` where ``clean`` removed one. Passing one log's
``records`` to a new :class:`MemoryWAL` models a new process reopening the log.

:class:`AsyncMemoryWAL` adds ``write_async`` (as ``KafkaWriteAheadLog`` has), whose
writes land ``delay_s`` later, in order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

from walstream.wal.base import WriteAheadLog
from walstream.wal.errors import RecordNotFoundError, WalClosedError, WalWriteError
from walstream.wal.handle import RecordHandle

Entry = tuple[bytes, int]  # (record, time_ms)


def _injected_failure() -> BaseException:
    return WalWriteError("injected write failure")


class MemoryWAL(WriteAheadLog):
    """A thread-safe in-memory WAL with fault injection (see the module docstring).

    ``records`` (optional) is the list to keep the log in, e.g. another
    :class:`MemoryWAL`'s ``records`` to reopen it; ``topic`` names the handles'
    topic (a handle of another topic is not found).
    """

    def __init__(self, records: list[Entry | None] | None = None, *,
                 topic: str = "memory") -> None:
        self.records: list[Entry | None] = records if records is not None else []
        self.topic = topic
        self.fail_writes = 0
        self.fail_with: Callable[[], BaseException] = _injected_failure
        self.gate = threading.Event()
        self.gate.set()
        self.closed = False
        self.write_attempts = 0  # every write that got past the gate of an open log
        self.writes = 0  # writes that stored their record
        self.failed_writes = 0  # writes failed by ``fail_writes``
        self._lock = threading.Lock()

    def write(self, record: bytes, time_ms: int) -> RecordHandle:
        self.gate.wait()
        with self._lock:
            if self.closed:
                raise WalClosedError("closed")
            self.write_attempts += 1
            if self.fail_writes != 0:
                if self.fail_writes > 0:
                    self.fail_writes -= 1
                self.failed_writes += 1
                raise self.fail_with()
            self.records.append((bytes(record), time_ms))
            self.writes += 1
            return RecordHandle(self.topic, 0, len(self.records) - 1)

    def read(self, handle: RecordHandle) -> bytes:
        with self._lock:
            if self.closed:
                raise WalClosedError("closed")
            if handle.topic != self.topic or not 0 <= handle.offset < len(self.records):
                raise RecordNotFoundError(f"no record at {handle}")
            entry = self.records[handle.offset]
            if entry is None:
                raise RecordNotFoundError(f"record at {handle} was cleaned")
            return entry[0]

    def read_all(self) -> Iterator[bytes]:
        with self._lock:
            if self.closed:
                raise WalClosedError("closed")
            return iter([e[0] for e in self.records if e is not None])

    def clean(self, thresh_time_ms: int, wait_for_completion: bool) -> None:
        with self._lock:
            if self.closed:
                raise WalClosedError("closed")
            for i, e in enumerate(self.records):
                if e is not None and e[1] < thresh_time_ms:
                    self.records[i] = None

    def close(self) -> None:
        with self._lock:
            self.closed = True

    def __len__(self) -> int:
        """How many records the log holds (cleaned ones not counted)."""
        with self._lock:
            return sum(e is not None for e in self.records)


class AsyncMemoryWAL(MemoryWAL):
    """A :class:`MemoryWAL` with ``write_async``: each such write runs on one worker
    thread after ``delay_s``, in order, and its Future resolves only then, so a record
    is readable only once its Future is done. ``async_calls`` counts the calls."""

    def __init__(self, delay_s: float = 0.002, records: list[Entry | None] | None = None,
                 *, topic: str = "memory") -> None:
        super().__init__(records, topic=topic)
        self.delay_s = delay_s
        self.async_calls = 0
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mem-wal")

    @property
    def pipelines_writes(self) -> bool:
        return True

    def write_async(self, record: bytes, time_ms: int) -> Future[RecordHandle]:
        """Begin a write; its Future holds the handle (or the write's error)."""
        with self._lock:
            if self.closed:
                raise WalClosedError("closed")
            self.async_calls += 1

        def delayed() -> RecordHandle:
            time.sleep(self.delay_s)
            return self.write(record, time_ms)

        return self._worker.submit(delayed)

    def close(self) -> None:
        super().close()
        self._worker.shutdown(wait=False, cancel_futures=True)

