"""BatchedWriteAheadLog: group concurrent writes into one Kafka record.

Spark's driver-side batching, for the tracker's small events. Protocol:

1. ``write`` puts ``(record, time)`` on a bounded queue and blocks on its future.
2. One writer thread takes everything queued (up to ``max_batch_records`` /
   ``max_batch_bytes``), encodes it as one versioned Avro group stamped with the
   latest time in the group, and writes it to the wrapped log.
3. When the wrapped write returns, every future of the group gets its handle
   (group handle + index); when it raises, every future gets the error. A
   caller is unblocked only after its group is durable.

A group keeps queue order: a caller that waits for write A before issuing write
B always finds A before B in ``read_all``. ``close`` fails what is still queued.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from walstream.avro_codec import VersionedCodec
from walstream.errors import CorruptDataError, UnknownSchemaVersionError
from walstream.wal.base import FollowPosition, LogFollower, ReplayProgress, WriteAheadLog
from walstream.wal.errors import (
    CorruptRecordError,
    FollowPositionError,
    UnknownRecordVersionError,
    WalBackpressureError,
    WalClosedError,
    WalError,
    WalWriteError,
    WalWriteTimeoutError,
)
from walstream.wal.handle import RecordHandle

log = logging.getLogger(__name__)

BATCH_SCHEMA_V1: dict[str, Any] = {
    "type": "record",
    "name": "WalBatch",
    "namespace": "walstream.wal.v1",
    "fields": [{"name": "records", "type": {"type": "array", "items": "bytes"}}],
}
BATCH_CODEC = VersionedCodec("WAL batch", b"WSWB", {1: BATCH_SCHEMA_V1})


def serialize_batch(records: list[bytes]) -> bytes:
    return BATCH_CODEC.encode({"records": records})


def deserialize_batch(data: bytes) -> list[bytes]:
    try:
        _, d = BATCH_CODEC.decode(data)
    except UnknownSchemaVersionError as exc:
        raise UnknownRecordVersionError(str(exc), exc.version) from exc
    except CorruptDataError as exc:
        raise CorruptRecordError(str(exc)) from exc
    return list(d["records"])


@dataclass
class _Pending:
    record: bytes
    time_ms: int
    future: Future[RecordHandle] = field(default_factory=Future)


_STOP = object()


class BatchedWriteAheadLog(WriteAheadLog):
    """Wraps a log and writes concurrent records as one group record.

    Bounds: at most ``max_queue`` records wait; a writer that cannot enqueue
    within ``put_timeout_s`` gets :class:`WalBackpressureError`. A writer waits at
    most ``write_timeout_s`` for its group.
    """

    def __init__(
        self,
        wrapped: WriteAheadLog,
        max_batch_records: int = 4096,
        max_batch_bytes: int = 4 * 1024 * 1024,
        max_queue: int = 100_000,
        put_timeout_s: float = 30.0,
        write_timeout_s: float = 120.0,
    ) -> None:
        self.wrapped = wrapped
        self.max_batch_records = max_batch_records
        self.max_batch_bytes = max_batch_bytes
        self.put_timeout_s = put_timeout_s
        self.write_timeout_s = write_timeout_s
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_queue)
        self._closed = False
        self._close_lock = threading.Lock()
        self._carry: _Pending | None = None
        self._thread = threading.Thread(target=self._run, name="batched-wal-writer", daemon=True)
        self._thread.start()
        self.groups_written = 0
        self.corrupt_groups = 0

    def write(self, record: bytes, time_ms: int) -> RecordHandle:
        if self._closed:
            raise WalClosedError("BatchedWriteAheadLog is closed")
        pending = _Pending(bytes(record), int(time_ms))
        try:
            self._queue.put(pending, timeout=self.put_timeout_s)
        except queue.Full:
            raise WalBackpressureError(
                f"batched WAL queue full ({self._queue.maxsize} records) for "
                f"{self.put_timeout_s}s"
            ) from None
        if self._closed:  # closed while we enqueued: close() may have missed us
            self._fail_queued()
        try:
            return pending.future.result(timeout=self.write_timeout_s)
        except FutureTimeout:
            raise WalWriteTimeoutError(
                f"batched WAL: group not durable within {self.write_timeout_s}s"
            ) from None

    def _take_group(self) -> list[_Pending] | None:
        first = self._carry
        self._carry = None
        while first is None:
            item = self._queue.get()
            if item is _STOP:
                return None
            first = item
        group, size = [first], len(first.record)
        while len(group) < self.max_batch_records:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                self._queue.put(_STOP)
                break
            if size + len(item.record) > self.max_batch_bytes:
                self._carry = item
                break
            group.append(item)
            size += len(item.record)
        return group

    def _run(self) -> None:
        while True:
            group = self._take_group()
            if group is None:
                return
            live = [p for p in group if p.future.set_running_or_notify_cancel()]
            if not live:
                continue
            try:
                handle = self.wrapped.write(
                    serialize_batch([p.record for p in live]), max(p.time_ms for p in live)
                )
            except BaseException as exc:  # every waiter of the group learns of it
                err = exc if isinstance(exc, WalError) else WalWriteError(
                    f"batched WAL: wrapped log failed: {exc!r}")
                if err is not exc:
                    err.__cause__ = exc
                for p in live:
                    p.future.set_exception(err)
                continue
            self.groups_written += 1
            for i, p in enumerate(live):
                p.future.set_result(
                    RecordHandle(handle.topic, handle.partition, handle.offset, handle.chunks, i)
                )

    def read(self, handle: RecordHandle) -> bytes:
        if self._closed:
            raise WalClosedError("BatchedWriteAheadLog is closed")
        records = deserialize_batch(self.wrapped.read(handle.group()))
        if not 0 <= handle.index < len(records):
            raise CorruptRecordError(f"{handle}: group holds {len(records)} records")
        return records[handle.index]

    def read_all(self) -> Iterator[bytes]:
        """The original records, group by group, in write order.

        A stored record that is not a group is reported like a corrupt record of
        the wrapped log (counted, logged, skipped).
        """
        if self._closed:
            raise WalClosedError("BatchedWriteAheadLog is closed")
        return self._read_all(self.wrapped.read_all())

    def _read_all(self, stored: Iterator[bytes]) -> Iterator[bytes]:
        for data in stored:
            try:
                yield from deserialize_batch(data)
            except CorruptRecordError as exc:
                if self.wrapped.strict:
                    raise
                self.corrupt_groups += 1
                log.warning("batched WAL: skipping a stored record that is not a group: %s", exc)

    @property
    def strict(self) -> bool:
        return self.wrapped.strict

    def follow(self, poll_timeout_s: float = 1.0) -> LogFollower:
        """The wrapped log's follower, yielding the records of each group in order; a
        stored record that is not a group is reported as ``read_all`` reports it."""
        if self._closed:
            raise WalClosedError("BatchedWriteAheadLog is closed")
        return UnpackingFollower(self.wrapped.follow(poll_timeout_s), self._unpack)

    def _unpack(self, data: bytes) -> list[bytes]:
        try:
            return deserialize_batch(data)
        except CorruptRecordError as exc:
            if self.wrapped.strict:
                raise
            self.corrupt_groups += 1
            log.warning("batched WAL: skipping a stored record that is not a group: %s", exc)
            return []

    def begin_epoch(self, epoch: int, follower: LogFollower) -> None:
        """The wrapped log's ``begin_epoch`` (:class:`~walstream.wal.epoch_chain.EpochChainLog`),
        given ``follower`` as it is: this log's follower passes the wrapped follower's
        positions through. Call it before any write through this object in the new
        epoch: a group already queued may go to either epoch's log."""
        if self._closed:
            raise WalClosedError("BatchedWriteAheadLog is closed")
        self.wrapped.begin_epoch(epoch, follower)

    def resume_epoch(self, epoch: int) -> None:
        """The wrapped log's ``resume_epoch``; as :meth:`begin_epoch`, before any write
        through this object."""
        if self._closed:
            raise WalClosedError("BatchedWriteAheadLog is closed")
        self.wrapped.resume_epoch(epoch)

    def prepare_epoch(self, timeout_s: float) -> None:
        self.wrapped.prepare_epoch(timeout_s)

    def newest_epoch(self) -> int:
        return self.wrapped.newest_epoch()

    def replay_progress(self) -> ReplayProgress | None:
        """The wrapped log's: it counts stored groups (and their chunks), whatever
        number of records each group holds."""
        return self.wrapped.replay_progress()

    def clean(self, thresh_time_ms: int, wait_for_completion: bool) -> None:
        if self._closed:
            raise WalClosedError("BatchedWriteAheadLog is closed")
        self.wrapped.clean(thresh_time_ms, wait_for_completion)

    def _fail_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP and item.future.set_running_or_notify_cancel():
                item.future.set_exception(
                    WalClosedError(
                        f"close() was called before the write with time {item.time_ms} was stored"
                    )
                )

    def close(self) -> None:
        """Stop after the group in flight; fail everything still queued; close wrapped."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        carry = self._carry
        self._fail_queued()
        self._queue.put(_STOP)
        deadline = time.monotonic() + self.write_timeout_s
        self._thread.join(timeout=max(0.1, deadline - time.monotonic()))
        if carry is not None and carry.future.set_running_or_notify_cancel():
            carry.future.set_exception(WalClosedError("close() was called before it was stored"))
        self._fail_queued()
        self.wrapped.close()


class UnpackingFollower(LogFollower):
    """Follows a log of groups and yields each group's records in order.

    ``unpack`` turns one stored record into its records (``[]`` for a group it
    reports as corrupt). Memory: besides the wrapped follower's, at most the rest
    of one group, since it asks the wrapped follower for one group at a time.
    """

    def __init__(self, inner: LogFollower, unpack: Callable[[bytes], list[bytes]]) -> None:
        self.inner = inner
        self.poll_timeout_s = inner.poll_timeout_s
        self._unpack = unpack
        self._rest: deque[bytes] = deque()

    def poll(self, max_records: int = 1000, timeout_s: float | None = None) -> list[bytes]:
        out = self._take(max_records)
        wait = self.poll_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + wait
        while len(out) < max_records:
            # Once it has records, only what is readable at once (LogFollower.poll).
            groups = self.inner.poll(1, 0.0 if out else max(0.0, deadline - time.monotonic()))
            if not groups:
                break
            self._rest = deque(self._unpack(groups[0]))
            out.extend(self._take(max_records - len(out)))
        return out

    def _take(self, n: int) -> list[bytes]:
        return [self._rest.popleft() for _ in range(min(n, len(self._rest)))]

    @property
    def caught_up(self) -> bool:
        return not self._rest and self.inner.caught_up

    def drain_to_end(self, timeout_s: float) -> Iterator[bytes]:
        groups = self.inner.drain_to_end(timeout_s)  # the end is fixed now, at the call
        return self._drain(groups)

    def _drain(self, groups: Iterator[bytes]) -> Iterator[bytes]:
        while self._rest:
            yield self._rest.popleft()
        for group in groups:
            yield from self._unpack(group)

    def positions(self) -> FollowPosition:
        """The wrapped follower's positions, which count whole groups: meaningful only
        when every record of the groups it returned was taken, as after a
        :meth:`drain_to_end` iterated to its end; raises
        :class:`~walstream.wal.errors.FollowPositionError` while records of a group are
        still held."""
        if self._rest:
            raise FollowPositionError(
                f"{len(self._rest)} records of a group not taken yet: positions would "
                "count them as read")
        return self.inner.positions()

    def close(self) -> None:
        self._rest.clear()
        self.inner.close()
