"""The driver's lease held over time: claiming, renewing, releasing and losing it.

Who holds the lease is decided by the order of one Kafka partition
(:mod:`walstream.driver.ha.lease_log`: the records and their fold).

The log is the authority; time only decides *when* somebody claims:

- A contender claims when the log holds no lease (empty, or released), or when it
  has watched the current epoch for ``timeout`` on its own monotonic clock
  without a valid record of it. It then reads the log through its own claim and
  leads only if its claim is the winning one.
- The holder renews every ``renew_period`` and reads the log through each
  renewal before counting it. It considers itself the holder until its last
  confirmed renewal's *send* time plus ``timeout``. A standby starts its
  ``timeout`` only when it *reads* that renewal, which is later, so with clocks
  that run at the same rate the holder stops leading before a standby claims.
  A holder paused past that (SIGSTOP, a long collection) is caught by the log:
  on waking, its next renewal's read finds the newer claim and it is fenced
  (:class:`~walstream.driver.ha.errors.LeaseFencedError`). What it wrote while not knowing
  is for the epoch checks of the WAL and the checkpoint to refuse.
- A holder that cannot confirm a renewal within ``timeout`` (broker unreachable)
  gives the lease up for good (:class:`~walstream.driver.ha.errors.LeaseLostError`);
  leading again is a new claim with a new epoch.

Every produce, read and thread join is bounded (``io_timeout`` or less).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from walstream.driver.ha.errors import (
    LeaseError,
    LeaseFencedError,
    LeaseIOError,
    LeaseLogRecreatedError,
    LeaseLostError,
)
from walstream.driver.ha.lease_log import (
    CLAIM,
    LEASE_CODEC,
    RELEASE,
    RENEW,
    LeaseConfig,
    LeaseState,
    LeaseView,
    fold,
)
from walstream.errors import CorruptDataError
from walstream.kafka_logging import with_logger

log = logging.getLogger(__name__)


#: Records read back from the end of the log to find a decodable snapshot.
_TAIL_WINDOW = 16
#: How long a holder whose hold ran out reads the log to tell a fence from a lost
#: renewal before it ends the hold (s): the hold ends this soon after its deadline.
WHY_LOST_BUDGET_S = 0.1


def default_holder_id() -> str:
    """A holder id unique to this object in this process on this host."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """One participant of the lease: a contender, then the holder or a standby.

    ``try_acquire`` claims the next epoch when the lease is free or expired and
    says whether this participant won; a winner renews in a background thread
    until ``release``, a fence or a loss. ``watch`` is the standby's wait for
    expiry. ``on_lost`` (optional) is called once, from the renewer thread, with
    the :class:`LeaseLostError` (or :class:`LeaseFencedError`) that ended a hold.
    """

    def __init__(self, config: LeaseConfig, holder_id: str | None = None,
                 on_lost: Callable[[LeaseError], None] | None = None) -> None:
        self.config = config
        self.holder_id = holder_id or default_holder_id()
        self._on_lost = on_lost
        base = dict(config.kafka_settings)
        self._producer = Producer(with_logger({
            **base, "bootstrap.servers": config.bootstrap_servers,
            "acks": "all", "enable.idempotence": True, "linger.ms": 0,
            "message.timeout.ms": int(config.io_timeout_s * 1000)}))
        self._consumer = Consumer(with_logger({
            **base, "bootstrap.servers": config.bootstrap_servers,
            "group.id": f"walstream-lease-reader-{self.holder_id}",  # never joined
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "enable.partition.eof": True, "auto.offset.reset": "error",
            "fetch.wait.max.ms": config.fetch_wait_ms}))
        # The producer's first send waits for the partition's metadata; fetching it
        # here keeps that wait out of the first claim's timing (bounded, best effort).
        with contextlib.suppress(KafkaException):
            self._producer.list_topics(timeout=config.io_timeout_s)
        self._io = threading.RLock()  # one reader/writer of the clients at a time
        self._state = LeaseState()
        self._next = -1  # next offset to fold; -1 until the first read positions it
        self._last_live = time.monotonic()  # last valid record of the current epoch read
        self._epoch: int | None = None  # the epoch this participant holds
        self._valid_until = 0.0
        self._ended: LeaseError | None = None  # why the hold ended (fenced, lost)
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._closed = False

    # -- reading the log -------------------------------------------------------------

    def _deadline(self, seconds: float | None = None) -> float:
        return time.monotonic() + (self.config.io_timeout_s if seconds is None else seconds)

    def _poll_until(self, done: Callable[[int | None], bool], deadline: float, what: str,
                    on_record: Callable[[int, dict[str, Any]], None] | None = None) -> None:
        """Read records until ``done(eof_offset)``, folding each (or handing it to
        ``on_record``); ``eof_offset`` is the end offset when the poll reported the
        end of the partition, else None. Raises :class:`LeaseIOError` at ``deadline``."""
        topic = self.config.topic
        while not done(None):
            left = deadline - time.monotonic()
            if left <= 0:
                raise LeaseIOError(f"lease topic {topic}: {what} not done within bound")
            msg = self._consumer.poll(min(left, 0.05))
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    if done(msg.offset()):
                        return
                    continue
                if err.fatal() or err.code() in (KafkaError.OFFSET_OUT_OF_RANGE,
                                                 KafkaError._AUTO_OFFSET_RESET):
                    raise LeaseIOError(f"lease topic {topic}: {err}")
                continue  # transient: librdkafka retries
            offset = msg.offset()
            if offset is None or offset < self._next:
                continue  # already read (a re-positioned fetch)
            self._next = offset + 1
            try:
                _v, record = LEASE_CODEC.decode(msg.value() or b"")
            except CorruptDataError:
                continue  # a foreign or corrupt record changes nothing
            if on_record is not None:
                on_record(offset, record)
                continue
            self._state, live = fold(self._state, offset, record)
            if live:
                self._last_live = time.monotonic()

    def _assign(self, offset: int) -> None:
        self._consumer.assign([TopicPartition(self.config.topic, 0, offset)])
        self._next = offset

    def _end_offsets(self, deadline: float) -> tuple[int, int]:
        tp = TopicPartition(self.config.topic, 0)
        try:
            low, high = self._consumer.get_watermark_offsets(
                tp, timeout=max(0.1, deadline - time.monotonic()))
        except KafkaException as exc:
            raise LeaseIOError(f"lease topic {self.config.topic}: no offsets: {exc}") from exc
        return int(low), int(high)

    def _at_end(self, eof: int | None, listed_end: int) -> bool:
        """At the end of the log: past the end ListOffsets gave at the start of the
        read, and at the end a Fetch reported (its end-of-partition event, or the
        newest Fetch response's high watermark). ListOffsets alone may lag the true
        end on some brokers; an end-of-partition event may be stale, from an earlier
        arrival at an earlier end."""
        if self._next < listed_end:
            return False
        if eof is not None and eof >= self._next:
            return True
        try:
            _low, fetched = self._consumer.get_watermark_offsets(
                TopicPartition(self.config.topic, 0), cached=True)
        except KafkaException:
            return False
        return fetched is not None and 0 <= fetched <= self._next

    def _position(self, deadline: float) -> None:
        """Position the reader at the first read: after the newest decodable record's
        snapshot, or at the log's start when no record near the end decodes."""
        low, high = self._end_offsets(deadline)
        self._state, self._last_live = LeaseState(), time.monotonic()
        if high <= max(low, 0):
            self._assign(max(low, 0))
            return
        newest: list[dict[str, Any]] = []
        self._assign(max(low, high - _TAIL_WINDOW))
        self._poll_until(lambda eof: self._at_end(eof, high), deadline, "read the tail",
                         on_record=lambda _o, rec: newest.append(rec))
        if not newest:
            self._assign(max(low, 0))
            return
        rec = newest[-1]
        self._state = LeaseState(rec["seen_epoch"], rec["seen_holder"],
                                 rec["seen_claim_offset"], rec["seen_released"])
        self._assign(rec["seen_through"] + 1)
        self._last_live = time.monotonic()

    def _read_to_end(self, deadline: float) -> None:
        if self._next < 0:
            self._position(deadline)
        _low, high = self._end_offsets(deadline)
        self._poll_until(lambda eof: self._at_end(eof, high), deadline, "read to the end")

    def _read_through(self, offset: int, deadline: float) -> None:
        self._poll_until(lambda _eof: self._next > offset, deadline,
                         f"read through offset {offset}")

    # -- writing the log -------------------------------------------------------------

    def _write(self, kind: str, epoch: int, deadline: float) -> int:
        """Append one record; return its offset once the broker acknowledged it."""
        s = self._state
        value = LEASE_CODEC.encode({
            "kind": kind, "epoch": epoch, "holder": self.holder_id,
            "time_ms": int(time.time() * 1000), "seen_epoch": s.epoch,
            "seen_holder": s.holder, "seen_claim_offset": s.claim_offset,
            "seen_released": s.released, "seen_through": self._next - 1})
        result: list[Any] = []

        def on_delivery(err: Any, msg: Any) -> None:
            result.append(err if err is not None else msg.offset())

        try:
            self._producer.produce(self.config.topic, value=value, partition=0,
                                   on_delivery=on_delivery)
        except (KafkaException, BufferError) as exc:
            raise LeaseIOError(f"lease topic {self.config.topic}: {kind} not sent: {exc}") from exc
        while not result and time.monotonic() < deadline:
            self._producer.poll(min(0.05, max(0.0, deadline - time.monotonic())))
        if not result:
            raise LeaseIOError(f"lease topic {self.config.topic}: {kind} not acknowledged "
                               "within bound")
        if not isinstance(result[0], int):
            raise LeaseIOError(f"lease topic {self.config.topic}: {kind} failed: {result[0]}")
        return result[0]

    # -- the contender and the holder ------------------------------------------------

    @property
    def held(self) -> bool:
        """True while this participant holds its epoch: not fenced, lost or released,
        and its last confirmed renewal's send time plus the timeout is ahead."""
        return (self._epoch is not None and self._ended is None
                and time.monotonic() < self._valid_until)

    def valid_for(self) -> float:
        """Seconds this participant is certain to keep holding its epoch from now (no
        standby can claim before; its last confirmed renewal's send time plus the
        timeout, on this process's monotonic clock); 0 when it does not hold it."""
        if self._epoch is None or self._ended is not None:
            return 0.0
        return max(0.0, self._valid_until - time.monotonic())

    @property
    def epoch(self) -> int | None:
        """The epoch this participant holds (or last held until released or lost)."""
        return self._epoch

    def check(self) -> None:
        """Raise why this participant does not hold the lease; return when it does."""
        if self._ended is not None:
            raise self._ended
        if not self.held:
            raise LeaseLostError(f"lease holder {self.holder_id!r} does not hold the lease "
                                 f"(epoch {self._epoch})")

    def view(self) -> LeaseView:
        """The log's lease now (reads to the end of the log, bounded)."""
        with self._io:
            self._read_to_end(self._deadline())
            return self._view()

    def _view(self) -> LeaseView:
        s = self._state
        expired = s.free or time.monotonic() - self._last_live >= self.config.timeout_s
        if s.holder == self.holder_id and s.epoch == self._epoch and self.held:
            expired = False
        return LeaseView(s, expired)

    def silent_s(self) -> float:
        """Seconds since this reader last read a sign of life of the current holder
        (its claim or a renewal); read before a claim, it dates the holder's end."""
        return time.monotonic() - self._last_live

    def try_acquire(self, floor: int = 0) -> bool:
        """Claim the next epoch if the lease is free or expired; True when this
        participant holds the lease on return.

        Reads the log to its end, claims ``max(epoch, floor) + 1`` and reads through
        the claim: the first winning claim in the log wins, so at most one contender
        of a round returns True. ``floor`` is the highest epoch the application used
        that the log may not show (module doc). Bounded by ``io_timeout`` per step."""
        if self._closed:
            raise LeaseError("lease: closed")
        if self.held:
            return True
        if self._ended is not None or self._epoch is not None:
            return False  # a hold that ended never resumes on this object
        with self._io:
            self._read_to_end(self._deadline())
            view = self._view()
            if not view.expired:
                return False
            epoch = max(view.state.epoch, floor) + 1
            if floor > view.state.epoch:
                log.warning("lease %s: the log is behind (its newest epoch %d, the "
                            "application's %d, from its driver WAL and checkpoints): "
                            "claiming epoch %d above both", self.config.topic,
                            view.state.epoch, floor, epoch)
            sent = time.monotonic()
            offset = self._write(CLAIM, epoch, self._deadline())
            self._read_through(offset, self._deadline())
            s = self._state
            if not (s.epoch == epoch and s.claim_offset == offset):
                return False
            self._epoch = epoch
            self._valid_until = sent + self.config.timeout_s
            took = time.monotonic() - sent
            if took > self.config.timeout_s / 2:
                # The hold counts from the claim's send, so little of it is left for
                # the first renewal: a busy process may lose the lease at once.
                log.warning("lease %s: the claim of epoch %d took %.2f s to confirm, of a "
                            "%.1f s lease", self.config.topic, epoch, took,
                            self.config.timeout_s)
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew_loop, daemon=True,
                                         name=f"lease-renewer-{epoch}")
        self._renewer.start()
        return True

    def acquire(self, max_wait_s: float) -> bool:
        """Try to acquire until it succeeds or ``max_wait_s`` passes."""
        deadline = time.monotonic() + max_wait_s
        while True:
            if self.try_acquire():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.watch(left)

    def _renew_once(self) -> None:
        assert self._epoch is not None
        with self._io:
            sent = time.monotonic()
            deadline = min(self._deadline(), self._valid_until)
            offset = self._write(RENEW, self._epoch, deadline)
            if offset < self._next:
                raise LeaseLogRecreatedError(
                    f"lease topic {self.config.topic}: a renewal was stored at offset "
                    f"{offset}, below offset {self._next} already read: the topic was "
                    f"recreated; epoch {self._epoch} stops leading")
            self._read_through(offset, deadline)
            self._check_log()
            self._valid_until = sent + self.config.timeout_s

    def _check_log(self) -> None:
        """Raise when the log, as read so far, no longer gives this holder its epoch."""
        assert self._epoch is not None
        s = self._state
        if s.epoch != self._epoch or s.holder != self.holder_id:
            raise LeaseFencedError(self.holder_id, self._epoch, s.epoch, s.holder)
        if s.released:
            raise LeaseLostError(f"lease epoch {self._epoch}: released")

    def _renew_loop(self) -> None:
        """Renew every period; end the hold at its deadline, at once.

        The deadline is the send time of the last confirmed renewal plus the timeout
        (:attr:`held`): a standby may claim from then on. The loop never sleeps past
        it, a renewal's own I/O is bounded by it, and finding out why the hold ran out
        takes at most :data:`WHY_LOST_BUDGET_S`, so the hold ends right after the
        deadline whether or not the broker can be reached."""
        period = self.config.renew_period_s
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self._renew_once()
            except (LeaseFencedError, LeaseLogRecreatedError) as exc:
                self._end(exc)
                return
            except LeaseError:
                pass  # retried until the hold runs out below
            now = time.monotonic()
            if now >= self._valid_until:
                self._end(self._why_lost())
                return
            self._stop.wait(max(0.0, min(period - (now - started), self._valid_until - now)))

    def _why_lost(self) -> LeaseError:
        """Why a hold ran out: fenced when the log, read to its end within
        :data:`WHY_LOST_BUDGET_S`, holds a newer epoch; else lost for want of a
        confirmed renewal (a holder cut off from the broker learns no more, and does
        not wait to)."""
        lost = LeaseLostError(f"lease holder {self.holder_id!r}: no renewal of epoch "
                              f"{self._epoch} confirmed within {self.config.timeout_s} s: "
                              "the hold ran out")
        if not self._io.acquire(timeout=WHY_LOST_BUDGET_S):
            return lost
        try:
            self._read_to_end(self._deadline(WHY_LOST_BUDGET_S))
            self._check_log()
        except LeaseFencedError as fenced:
            return fenced
        except LeaseError:
            pass
        finally:
            self._io.release()
        return lost

    def _end(self, why: LeaseError) -> None:
        if self._ended is not None:
            return
        self._ended = why
        if self._on_lost is not None:
            self._on_lost(why)

    def release(self) -> None:
        """Stop renewing and, while still held, log the release so that a standby can
        claim at once. Idempotent; bounded."""
        self._stop.set()
        renewer, self._renewer = self._renewer, None
        if renewer is not None and renewer is not threading.current_thread():
            renewer.join(self.config.io_timeout_s + self.config.timeout_s)
        if self._epoch is not None and self.held:
            with self._io, contextlib.suppress(LeaseError):
                self._write(RELEASE, self._epoch, self._deadline())
        if self._ended is None and self._epoch is not None:
            self._ended = LeaseLostError(f"lease epoch {self._epoch}: released")

    def close(self) -> None:
        """Release, then close the Kafka clients."""
        if self._closed:
            return
        self.release()
        self._closed = True
        with self._io:
            self._producer.flush(self.config.io_timeout_s)
            self._consumer.close()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the standby -----------------------------------------------------------------

    def watch(self, max_wait_s: float) -> LeaseView:
        """Tail the log until the lease is free or expired, or ``max_wait_s`` passes;
        return the view then (``expired`` tells which)."""
        deadline = time.monotonic() + max_wait_s
        with self._io:
            self._read_to_end(self._deadline())
            while True:
                view = self._view()
                if view.expired or time.monotonic() >= deadline:
                    return view
                wake = min(deadline, self._last_live + self.config.timeout_s)

                def woken(_eof: int | None, wake: float = wake) -> bool:
                    return self._state.free or time.monotonic() >= wake

                with contextlib.suppress(LeaseIOError):
                    self._poll_until(woken, wake + 0.001, "watch")
