"""ReceivedBlockHandler: step 1 of the supervisor's protocol, a block stored in the
receiver's Kafka WAL (Spark's ``WriteAheadLogBasedBlockHandler``).

:meth:`WalBlockHandler.begin` encodes a block and, when pipelining is on and the
WAL pipelines writes (``pipelines_writes``), starts its write at once;
:meth:`WalBlockHandler.store` returns the block's WAL handle once ``acks=all`` came
back, retrying a bounded number of times, or raises
:class:`~walstream.receiver.errors.BlockStoreError`. It never reports anything: the
supervisor reports a block only with the handle this returns
(docs/ARCHITECTURE.md, invariant 1), so a block whose store failed is never known to
the driver and its source is never acknowledged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from walstream.receiver.block import Block, SourceRange
from walstream.receiver.errors import BlockStoreError
from walstream.wal.base import WriteAheadLog
from walstream.wal.errors import WalError, WalWriteTimeoutError
from walstream.wal.handle import RecordHandle

log = logging.getLogger(__name__)


@dataclass
class PendingBlock:
    """A block whose step 1 has begun: encoded, its WAL write maybe in flight."""

    block_id: str
    count: int
    source: tuple[SourceRange, ...]
    payload: bytes
    future: Future[RecordHandle] | None  # None: step 1 is a synchronous write
    started_s: float = 0.0  # perf_counter when the (first) write began
    write_seconds: float | None = None  # the write that was acknowledged, until then


@dataclass(frozen=True)
class StoreBounds:
    """How hard a store tries: ``retries`` writes, ``backoff_s`` times the try number
    between them, at most ``timeout_s`` for a pipelined write's acknowledgement."""

    retries: int
    backoff_s: float
    timeout_s: float
    pipelined: bool


class WalBlockHandler:
    """Stores one receiver's blocks in its WAL (``stream_id`` names it in errors)."""

    def __init__(self, wal: WriteAheadLog, stream_id: int, bounds: StoreBounds) -> None:
        self.wal = wal
        self.stream_id = stream_id
        self.bounds = bounds
        # A WAL that cannot pipeline (MemoryWAL) is written in store(), synchronously.
        self._pipelined = bounds.pipelined and wal.pipelines_writes

    def begin(self, block_id: str, records: Sequence[bytes],
              source: tuple[SourceRange, ...]) -> PendingBlock | None:
        """Encode the block and, pipelined, start its write; None for an empty block."""
        if not records and not source:
            return None
        payload = Block(self.stream_id, block_id, records, source).encode()
        pending = PendingBlock(block_id, len(records), source, payload, None)
        if self._pipelined:
            try:
                pending.started_s = time.perf_counter()
                pending.future = self.wal.write_async(payload, int(time.time() * 1000))
                pending.future.add_done_callback(_on_done(pending))
            except WalError as exc:  # the first try failed at once; store() retries
                failed: Future[RecordHandle] = Future()
                failed.set_exception(exc)
                pending.future = failed
        return pending

    def _try(self, pending: PendingBlock, attempt: int) -> RecordHandle:
        if attempt > 1 or pending.future is None:
            pending.started_s = time.perf_counter()
            handle = self.wal.write(pending.payload, int(time.time() * 1000))
            pending.write_seconds = time.perf_counter() - pending.started_s
            return handle
        try:
            handle = pending.future.result(timeout=self.bounds.timeout_s)
            if pending.write_seconds is None:  # the done callback has not run yet
                _acknowledged(pending)
            return handle
        except WalError:
            raise  # the write's own failure (a WalWriteTimeoutError is a TimeoutError too)
        except FutureTimeout:
            raise WalWriteTimeoutError(
                f"no acknowledgement within store_timeout_s={self.bounds.timeout_s}"
            ) from None

    def store(self, pending: PendingBlock) -> RecordHandle:
        """The block's WAL handle, after bounded retries; never report what is not
        stored."""
        for attempt in range(1, self.bounds.retries + 1):
            try:
                return self._try(pending, attempt)
            except WalError as exc:
                log.warning("stream %d: storing %s failed (try %d/%d): %s", self.stream_id,
                            pending.block_id, attempt, self.bounds.retries, exc)
                if attempt == self.bounds.retries:
                    raise BlockStoreError(
                        f"block {pending.block_id} of stream {self.stream_id} could not be "
                        f"stored after {attempt} tries: {exc}") from exc
                time.sleep(self.bounds.backoff_s * attempt)
        raise AssertionError("retries >= 1")  # unreachable: the config checks it


def _on_done(pending: PendingBlock) -> Callable[[Future[RecordHandle]], None]:
    return lambda _: _acknowledged(pending)


def _acknowledged(pending: PendingBlock) -> None:
    """``pending``'s write was acknowledged now (or failed: then a retry measures)."""
    if pending.write_seconds is None:
        pending.write_seconds = time.perf_counter() - pending.started_s
