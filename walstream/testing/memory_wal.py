"""An in-memory WriteAheadLog for unit tests: same contract, failures on demand."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from wal.base import WriteAheadLog
from wal.errors import RecordNotFoundError, WalClosedError, WalWriteError
from wal.handle import RecordHandle


class MemoryWriteAheadLog(WriteAheadLog):
    """Keeps records in a list; ``fail_writes`` makes the next writes raise.

    Share ``records`` between two instances to model a new process reopening the log.
    """

    def __init__(self, records: list[tuple[bytes, int] | None] | None = None) -> None:
        self.records: list[tuple[bytes, int] | None] = records if records is not None else []
        self.fail_writes = 0  # how many of the next writes fail
        self.closed = False
        self.writes = 0
        self._lock = threading.Lock()

    def write(self, record: bytes, time_ms: int) -> RecordHandle:
        with self._lock:
            if self.closed:
                raise WalClosedError("closed")
            if self.fail_writes:
                self.fail_writes -= 1
                raise WalWriteError("injected write failure")
            self.records.append((bytes(record), time_ms))
            self.writes += 1
            return RecordHandle("memory", 0, len(self.records) - 1)

    def read(self, handle: RecordHandle) -> bytes:
        if self.closed:
            raise WalClosedError("closed")
        entry = self.records[handle.offset] if handle.offset < len(self.records) else None
        if entry is None:
            raise RecordNotFoundError(str(handle))
        return entry[0]

    def read_all(self) -> Iterator[bytes]:
        if self.closed:
            raise WalClosedError("closed")
        return iter([e[0] for e in list(self.records) if e is not None])

    def clean(self, thresh_time_ms: int, wait_for_completion: bool) -> None:
        with self._lock:
            for i, e in enumerate(self.records):
                if e is not None and e[1] < thresh_time_ms:
                    self.records[i] = None

    def close(self) -> None:
        self.closed = True
