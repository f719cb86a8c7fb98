"""Following a write-ahead log: its replay, then every record appended after it.

A hot standby keeps its state current by tailing the log it would replay on
takeover. ``WriteAheadLog.follow`` returns a :class:`LogFollower` that first yields
what ``read_all`` would yield, then the records appended later, in log order, one
``poll`` at a time.

Order (Kafka logs, :class:`KafkaLogFollower`): segments in ``read_all``'s order (by
start time), and within a segment by offset. The follower leaves segment S for the
next one only once a newer segment exists and it has read S to the high watermark
of a Fetch answered after that newer segment was seen (from a consumer created
after it, so no earlier answer can pass for the end).

That misses nothing in S when every write to S was acknowledged before the newer
segment was created: one writer instance calling ``write`` from one thread, as
``BatchedWriteAheadLog`` does (``KafkaWriteAheadLog._segment_for`` never goes back
to an older segment, and ``write`` returns only once acknowledged). Two writer
instances of one log (an old and a new leader), ``write`` calls of several threads
racing across a roll, or pipelined ``write_async`` calls can land a record in S
after the follower left it, or make a segment appear behind it. The follower never
yields such a record out of order; it logs a segment that appears behind it, and
:meth:`LogFollower.drain_to_end` raises :class:`FollowGapError` when a segment
behind it holds records it never yielded, so a caller that needs ``read_all``'s
exact sequence replays again.

Deletion: a segment cleaned under the follower (released first by this process
through :func:`walstream.wal.reader.release_topics`, or missing from the broker's
topic list) is skipped with a log line, never waited on. A clean in another process
meets the librdkafka fault described there as a ``read_all`` would; a follower that
keeps up fetches only the newest segment, which a clean behind the current batch
does not delete.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from walstream.kafka_logging import with_logger
from walstream.wal import segments
from walstream.wal.base import FollowPosition, LogFollower
from walstream.wal.config import KafkaWalConfig
from walstream.wal.errors import (
    CorruptRecordError,
    FollowTimeoutError,
    WalClosedError,
    WalError,
    WalReadError,
)
from walstream.wal.follow_checks import raise_on_bound_mismatch, raise_on_gaps
from walstream.wal.framing import Reassembler, decode_frame
from walstream.wal.reader import consumer_config, register_releasable, unregister_releasable
from walstream.wal.segments import Segment

log = logging.getLogger(__name__)

_PARTITION = 0
# The longest one consumer poll waits, so close() and release() wait at most this.
_SLICE_S = 0.1
_OUT_OF_RANGE = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET}
_GONE = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC,
         KafkaError._UNKNOWN_PARTITION}


class KafkaLogFollower(LogFollower):
    """Follows a :class:`~wal.KafkaWriteAheadLog`'s segment topics (see the module doc).

    Memory: one record being reassembled, librdkafka's fetch queue of one
    partition, and the records of the current ``poll``. Records older than the
    newest clean threshold seen are skipped as ``read_all`` skips them; corrupt
    ones go to ``report`` and are skipped (raised for a strict log, as by ``read_all``).
    New segments are found by listing the broker's topics at most every
    ``metadata_interval_s``, and only when the follower waits for records.

    Bounded (``ends`` given, or :meth:`bound` called): it reads only the segments
    ``ends`` lists, each up to its end offset (exclusive), never a record whose
    frames reach that end, and is :attr:`finished` after the last of them: how an
    epoch chain reads an older epoch's log (:mod:`walstream.wal.epoch_chain`).
    """

    def __init__(self, bootstrap_servers: str, name: str, config: KafkaWalConfig,
                 report: Callable[[CorruptRecordError], None], poll_timeout_s: float = 1.0,
                 threshold_ms: int = -1, metadata_interval_s: float = 0.5,
                 ends: Mapping[str, int] | None = None) -> None:
        if poll_timeout_s <= 0 or metadata_interval_s <= 0:
            raise WalError("poll_timeout_s and metadata_interval_s must be > 0")
        self.name = name
        self.poll_timeout_s = poll_timeout_s
        self.metadata_interval_s = metadata_interval_s
        self._config = config
        self._report = report
        self._conf = consumer_config(
            bootstrap_servers, {**config.client_config, **config.consumer_config})
        self._admin: AdminClient | None = AdminClient(with_logger({
            "bootstrap.servers": bootstrap_servers,
            "socket.connection.setup.timeout.ms": 10_000, **config.client_config}))
        self._threshold = threshold_ms
        self._lock = threading.Lock()  # guards the consumer against release() and close()
        self._stop = threading.Event()
        self._doomed: set[str] = set()  # released for deletion: never fetched again
        self._pending: list[Segment] = []  # known segments after the current one
        self._cur: Segment | None = None
        self._consumer: Consumer | None = None
        self._pos = 0  # the next offset of the current segment
        self._read_any = False
        self._opened_at = 0.0
        self._first_end: int | None = None  # the first end its consumer learnt
        self._end: int | None = None  # the latest end its consumer learnt
        self._newer_since = 0.0  # when a segment after the current one was first seen
        self._asm = Reassembler(on_torn=report)
        # Segments read to their end: where the follower left them.
        self._left: dict[str, tuple[Segment, int]] = {}
        self._last: Segment | None = None  # the segment left most recently
        self._behind: set[str] = set()  # segments found behind the follower, never read
        self._known: set[str] = set()
        self._next_listing = 0.0
        self._caught_up = False
        self._drain_stop: tuple[str, float] | None = None  # (last topic, call time)
        self._bound: dict[str, int] | None = None if ends is None else dict(ends)
        self._yielded: dict[str, int] = {}  # segment -> offset after its last record yielded
        listing = self._list(config.read_timeout_s)
        if listing is None:
            raise WalReadError(f"WAL {name!r}: no topic list within {config.read_timeout_s}s")
        self._absorb(listing)
        register_releasable(self)

    # -- the contract --------------------------------------------------------------

    def poll(self, max_records: int = 1000, timeout_s: float | None = None) -> list[bytes]:
        self._check_open()
        wait = self.poll_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + wait
        out: list[bytes] = []
        while len(out) < max_records:
            record = self._next(deadline, wait=not out)
            if record is None:
                break
            out.append(record)
        self._caught_up = self._at_newest_end()
        return out

    @property
    def caught_up(self) -> bool:
        return self._caught_up

    @property
    def finished(self) -> bool:
        """True when bounded and every segment of the bound was read to its end."""
        return self._bound is not None and self._cur is None and not self._pending

    def positions(self) -> FollowPosition:
        offsets = {t: pos for t, (_seg, pos) in self._left.items()}
        offsets.update((t, 0) for t in self._behind)
        offsets.update((s.topic, 0) for s in self._pending)
        if self._cur is not None:
            offsets[self._cur.topic] = self._pos
        return FollowPosition(self.name, offsets)

    def bound(self, ends: Mapping[str, int]) -> None:
        """Read from now on only the segments in ``ends``, each up to its end, then finish.

        Raises :class:`FollowOverrunError` when a record already yielded lies at or
        beyond an end (or in a live segment ``ends`` leaves out), and
        :class:`FollowGapError` when the follower left a segment, or passed one
        behind it, before the end ``ends`` gives it: either way its caller's state no
        longer matches the bounded log and must be rebuilt with a fresh replay.
        """
        self._check_open()
        listing = self._list(self._config.read_timeout_s)
        if listing is None:
            raise FollowTimeoutError(
                f"WAL {self.name!r}: no topic list within {self._config.read_timeout_s}s")
        bound = self._bound = dict(ends)
        self._absorb(listing)
        self._pending = [s for s in self._pending if s.topic in bound]
        live = {s.topic for s in segments.parse_topics(
            listing, self._config.topic_prefix, self.name)[0] if s.end_ms > self._threshold}
        passed = {t: pos for t, (_seg, pos) in self._left.items() if t in live}
        passed.update((t, 0) for t in self._behind if t in live)
        raise_on_bound_mismatch(
            self.name, bound, {t: e for t, e in self._yielded.items() if t in live}, passed)

    def drain_to_end(self, timeout_s: float) -> Iterator[bytes]:
        self._check_open()
        called = time.monotonic()
        deadline = called + timeout_s
        if self._bound is not None:
            return self._drain_bounded(deadline)
        listing = self._list(max(0.05, timeout_s))
        if listing is None:
            raise FollowTimeoutError(f"WAL {self.name!r}: no topic list within {timeout_s}s")
        self._absorb(listing)
        self._check_gaps(deadline)
        last = self._pending[-1] if self._pending else self._cur
        if last is None:
            self._caught_up = True
            return iter(())
        if self._cur is not None:
            self._reopen()  # its ends now come from Fetches answered after the call
        return self._drain(deadline, last.topic, called)

    def _drain(self, deadline: float, last: str, called: float) -> Iterator[bytes]:
        self._drain_stop = (last, called)
        try:
            while True:
                record = self._next(deadline, wait=True)
                if record is not None:
                    yield record
                    continue
                if self._drained(last, called):
                    self._caught_up = self._at_newest_end()
                    return
                self._check_open()
                raise FollowTimeoutError(
                    f"WAL {self.name!r}: the end as of the drain's start not reached "
                    f"within its bound (at {self._cur.topic if self._cur else None}"
                    f"@{self._pos})")
        finally:
            self._drain_stop = None

    def _drain_bounded(self, deadline: float) -> Iterator[bytes]:
        while not self.finished:
            record = self._next(deadline, wait=True)
            if record is not None:
                yield record
            elif not self.finished:
                self._check_open()
                raise FollowTimeoutError(
                    f"WAL {self.name!r}: the ends of the bound not reached within the drain's "
                    f"bound (at {self._cur.topic if self._cur else None}@{self._pos})")
        self._caught_up = True

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._close_consumer()
        self._admin = None  # released now, not when this object is collected
        unregister_releasable(self)

    def release(self, topics: set[str]) -> None:
        """Stop fetching ``topics`` before they are deleted (see
        :func:`walstream.wal.reader.release_topics`); the follower skips them from now on."""
        with self._lock:
            self._doomed |= topics
            if self._cur is not None and self._cur.topic in topics:
                self._close_consumer()

    # -- reading -------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._stop.is_set():
            raise WalClosedError(f"WAL {self.name!r}: the follower is closed")

    def _drained(self, last: str, called: float) -> bool:
        cur = self._cur
        if cur is None:
            return not any(s.topic == last for s in self._pending)
        if cur.topic != last:
            return not any(s.topic == last for s in self._pending)
        return (self._opened_at >= called and self._first_end is not None
                and self._pos >= self._first_end)

    def _at_newest_end(self) -> bool:
        if self._bound is not None:
            return self.finished
        if self._pending:
            return False
        return self._cur is None or (self._end is not None and self._pos >= self._end)

    def _next(self, deadline: float, wait: bool) -> bytes | None:
        """The next record, or None at the deadline (at once at the end when not
        ``wait``, and at once when a drain's end is reached)."""
        while not self._stop.is_set():
            if self._drain_stop is not None and self._drained(*self._drain_stop):
                return None
            cur = self._cur
            if cur is None:
                if self._pending:
                    self._open(self._pending.pop(0))
                    continue
                if self._bound is not None:
                    return None  # finished: a bounded follower waits for nothing more
                if self._refresh(deadline):
                    continue
                if not wait or time.monotonic() >= deadline:
                    return None
                self._stop.wait(min(_SLICE_S, max(0.0, deadline - time.monotonic())))
                continue
            if cur.topic in self._doomed or cur.end_ms <= self._threshold:
                self._leave("cleaned")
                continue
            if self._bound is not None:
                if self._pos >= self._bound.get(cur.topic, 0):
                    self._leave(None)
                    continue
            elif self._pending and not self._stop_here(cur):
                if self._opened_at < self._newer_since:
                    self._reopen()  # its ends may predate the newer segment
                    continue
                if self._first_end is not None and self._pos >= self._first_end:
                    self._leave(None)
                    continue
            at_end = self._end is not None and self._pos >= self._end
            # At least one poll, even at the deadline: what is fetched already counts.
            remaining = 0.0 if at_end and not wait else max(0.0, deadline - time.monotonic())
            with self._lock:
                if self._consumer is None:  # released meanwhile: skipped above
                    continue
                msg = self._consumer.poll(min(_SLICE_S, remaining))
            if msg is None:
                if self._refresh(deadline):
                    continue
                if remaining <= 0 or (at_end and not wait):
                    return None
                continue
            record = self._handle(msg)
            if record is not None:
                return record
        return None

    def _stop_here(self, cur: Segment) -> bool:
        return self._drain_stop is not None and self._drain_stop[0] == cur.topic

    def _handle(self, msg: Any) -> bytes | None:
        cur = self._cur
        assert cur is not None
        err = msg.error()
        if err is not None:
            code = err.code()
            if code == KafkaError._PARTITION_EOF:
                self._learn_end(int(msg.offset() or 0))
            elif code in _OUT_OF_RANGE and not self._read_any:
                with self._lock:  # trimmed head (retention): read from the first record
                    if self._consumer is not None:
                        self._consumer.assign(
                            [TopicPartition(cur.topic, _PARTITION, OFFSET_BEGINNING)])
                self._read_any = True
            elif code in _OUT_OF_RANGE or code in _GONE:
                self._leave(f"gone ({err.str()})")
            elif not (err.retriable() or code == KafkaError._TRANSPORT):
                raise WalReadError(f"{cur.topic}: {err.str()}")
            return None
        offset = int(msg.offset() or 0)
        self._read_any = True
        if self._bound is not None and offset >= self._bound.get(cur.topic, 0):
            self._pos = max(self._pos, self._bound.get(cur.topic, 0))  # left by _next
            return None
        seen = offset < self._pos  # the record _reopen reads again for its end
        self._pos = max(self._pos, offset + 1)
        with self._lock:
            consumer = self._consumer
            if consumer is not None:
                try:
                    _low, high = consumer.get_watermark_offsets(
                        TopicPartition(cur.topic, _PARTITION), cached=True)
                except KafkaException:
                    high = -1
                if high is not None and high > 0:
                    self._learn_end(int(high))
        if seen:
            return None
        where = f"{cur.topic}@{offset}"
        try:
            frame = decode_frame(msg.value(), where, self._config.max_record_bytes)
            record = self._asm.feed(frame, where)
        except CorruptRecordError as exc:
            if self._config.strict:
                raise  # as read_all; a torn record goes to report even then
            self._report(exc)
            return None
        if record is None or int(msg.timestamp()[1]) < self._threshold:
            return None
        self._yielded[cur.topic] = offset + 1
        return record

    def _learn_end(self, end: int) -> None:
        if self._first_end is None:
            self._first_end = end
        self._end = max(end, self._end or 0)

    # -- segments ------------------------------------------------------------------

    def _open(self, seg: Segment) -> None:
        self._cur = seg
        self._pos = 0
        self._read_any = False
        self._asm = Reassembler(on_torn=self._report)
        self._newer_since = time.monotonic() if self._pending else 0.0
        self._reopen()

    def _reopen(self) -> None:
        """A new consumer of the current segment: every end it learns comes from a
        Fetch answered after this call.

        It starts one record before the current position when there is one: the
        broker answers at once with that record and the high watermark, where a
        Fetch at the end would be held for ``fetch.wait.max.ms`` before the
        end-of-partition event. The record is skipped, not yielded again.
        """
        cur = self._cur
        assert cur is not None
        with self._lock:
            self._close_consumer()
            self._first_end = self._end = None
            self._opened_at = time.monotonic()
            if cur.topic in self._doomed or self._stop.is_set():
                return  # never fetch a topic being deleted; _next skips it
            self._consumer = Consumer(with_logger(self._conf))
            self._consumer.assign(
                [TopicPartition(cur.topic, _PARTITION, max(0, self._pos - 1))])

    def _leave(self, why: str | None) -> None:
        cur = self._cur
        assert cur is not None
        if why is not None:
            log.warning("WAL %s: segment %s %s under the follower; skipped after offset %d",
                        self.name, cur.topic, why, self._pos)
        elif self._asm.pending:
            log.info("WAL %s: %s ends with an incomplete record from %s "
                     "(its write never returned); skipped", self.name, cur.topic,
                     self._asm.reset())
        if why is None:
            self._left[cur.topic] = (cur, self._pos)
        self._last = cur
        with self._lock:
            self._close_consumer()
        self._cur = None
        self._first_end = self._end = None

    def _close_consumer(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _list(self, timeout_s: float) -> list[str] | None:
        admin = self._admin
        if admin is None:
            return None  # closed
        try:
            return list(admin.list_topics(timeout=max(0.05, timeout_s)).topics)
        except KafkaException as exc:
            log.debug("WAL %s: topic list failed: %s", self.name, exc)
            return None

    def _refresh(self, deadline: float) -> bool:
        """List the topics when due; True when the segments ahead changed."""
        now = time.monotonic()
        if now < self._next_listing:
            return False
        listing = self._list(min(self._config.admin_timeout_s, deadline - now))
        if listing is None:
            return False  # due again at once: the next wait retries
        self._next_listing = time.monotonic() + self.metadata_interval_s
        return self._absorb(listing)

    def _absorb(self, topics: list[str]) -> bool:
        segs, markers = segments.parse_topics(topics, self._config.topic_prefix, self.name)
        if markers:
            self._threshold = max(self._threshold, max(markers))
        changed = False
        live = {s.topic for s in segs}
        cur = self._cur
        if cur is not None and cur.topic not in live:
            self._leave("deleted")
            changed = True
        kept = [s for s in self._pending if s.topic in live]
        for s in self._pending:
            if s.topic not in live:
                log.warning("WAL %s: segment %s was deleted before the follower read it",
                            self.name, s.topic)
        if len(kept) != len(self._pending):
            self._pending, changed = kept, True
        position = self._cur or self._last
        for s in segs:
            if s.topic in self._known or s.end_ms <= self._threshold:
                continue
            self._known.add(s.topic)
            if self._bound is not None and s.topic not in self._bound:
                continue  # beyond the bound: never read
            if position is not None and s < position:
                self._behind.add(s.topic)
                log.warning("WAL %s: segment %s appeared behind the follower (at %s); "
                            "its records are not followed", self.name, s.topic, position.topic)
                continue
            self._pending.append(s)
            changed = True
        self._pending.sort()
        if changed and self._pending and self._cur is not None and self._newer_since == 0.0:
            self._newer_since = time.monotonic()
        self._left = {t: o for t, o in self._left.items() if t in live}
        self._behind &= live
        return changed

    def _check_gaps(self, deadline: float) -> None:
        """Raise :class:`FollowGapError` when a segment behind the follower holds
        records it never yielded (see the module doc)."""
        behind = {t: pos for t, (seg, pos) in self._left.items()
                  if seg.end_ms > self._threshold and t not in self._doomed}
        behind.update((t, 0) for t in self._behind if t not in self._doomed)
        raise_on_gaps(self.name, self._conf["bootstrap.servers"], self._config, behind, deadline)
