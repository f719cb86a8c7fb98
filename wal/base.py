"""The write-ahead log contract (Spark's ``WriteAheadLog``), five methods."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import TracebackType

from walstream.wal.errors import EpochNotSupportedError, FollowNotSupportedError
from walstream.wal.handle import RecordHandle


@dataclass
class ReplayProgress:
    """How far a ``read_all`` got, in the records the log's storage counts.

    For a Kafka log these are Kafka records of its segments, counted by offsets:
    ``total`` is the sum, over the segments the ``read_all`` reads, of each
    partition's end offset minus the offset the read starts at, both taken when
    the ``read_all`` began; ``consumed`` is how many of those the read has passed
    (frames of a chunked record, stored groups, skipped corrupt records alike),
    so it reaches ``total`` when every segment was read to its end. Records
    written after the start are neither in ``total`` nor in ``consumed``.
    ``total`` is None when the ends could not be learnt; the read goes on.

    The reading thread updates it; another thread may read it (plain ints).
    """

    total: int | None = None
    consumed: int = 0


@dataclass(frozen=True)
class FollowPosition:
    """Where a follower stands: the log it is reading (``log``, a KafkaWriteAheadLog
    name) and, for every segment topic of that log it knows, the offset after the last
    Kafka record it consumed (``offsets``; 0 for one it has not started)."""

    log: str
    offsets: Mapping[str, int] = field(default_factory=dict)


class LogFollower(ABC):
    """Yields a log's replay, then its later records, in log order.

    One thread calls :meth:`poll` and :meth:`drain_to_end`; :meth:`close` may be
    called from any thread and makes a running call return within one short
    consumer poll. After ``close`` every call raises :class:`~walstream.wal.errors.WalClosedError`.
    """

    #: The wait of a :meth:`poll` without ``timeout_s``.
    poll_timeout_s: float = 1.0

    @abstractmethod
    def poll(self, max_records: int = 1000, timeout_s: float | None = None) -> list[bytes]:
        """Up to ``max_records`` records, the next ones in log order.

        Waits up to ``timeout_s`` (the follower's default when None) for the first;
        once it has one it takes only those readable without waiting for the
        broker to receive more. Returns ``[]`` when none came in time.
        """

    @property
    @abstractmethod
    def caught_up(self) -> bool:
        """True when the latest call reached the end of the newest segment it knew
        of (the high watermark of its latest Fetch) with nothing left to return."""

    @abstractmethod
    def drain_to_end(self, timeout_s: float) -> Iterator[bytes]:
        """The records up to the log's end as of this call, then stop.

        The end is taken from Fetch responses the broker sent after the call, so
        every record whose ``write`` returned before the call is yielded (and some
        written during the drain may be, in log order). The iterator raises
        :class:`FollowTimeoutError` when the end is not reached within
        ``timeout_s`` of the call, the caller's time between records included.
        """

    @abstractmethod
    def close(self) -> None:
        """Release the broker clients; idempotent."""

    def positions(self) -> FollowPosition:
        """The log this follower reads now and how far it consumed each segment.

        Meaningful once every record the follower consumed was returned to the caller,
        as after a :meth:`drain_to_end` iterated to its end. An optional capability:
        this default raises :class:`FollowNotSupportedError`.
        """
        raise FollowNotSupportedError(f"{type(self).__name__} has no positions")

    def __enter__(self) -> LogFollower:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class WriteAheadLog(ABC):
    """A durable, ordered log of byte records addressed by :class:`RecordHandle`.

    Durability contract shared by every implementation:

    1. ``write`` returns only after the record is durable; if it raises, the
       caller must treat the record as not stored.
    2. ``read(handle)`` returns exactly the bytes written, for every handle a
       ``write`` returned, until ``clean`` drops it.
    3. ``read_all`` yields every record not yet cleaned, in write order, from any
       process, including after the writer died.
    4. ``clean(t)`` drops records written with a time older than ``t``; nothing
       newer is ever dropped.
    5. After ``close`` every call raises :class:`~walstream.wal.errors.WalClosedError`.
    """

    @abstractmethod
    def write(self, record: bytes, time_ms: int) -> RecordHandle:
        """Store ``record`` durably, stamped with ``time_ms``; return its handle."""

    @abstractmethod
    def read(self, handle: RecordHandle) -> bytes:
        """Return the exact bytes stored at ``handle``."""

    @abstractmethod
    def read_all(self) -> Iterator[bytes]:
        """Yield every record not yet cleaned, in write order."""

    @abstractmethod
    def clean(self, thresh_time_ms: int, wait_for_completion: bool) -> None:
        """Drop records written with a time older than ``thresh_time_ms``."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release resources; later calls raise ``WalClosedError``."""

    @property
    def pipelines_writes(self) -> bool:
        """Whether :meth:`write_async` returns before its write is acknowledged, so a
        caller can overlap a write with its next step (a Kafka log). False for this
        default, whose ``write_async`` stores in the caller's thread."""
        return False

    def write_async(self, record: bytes, time_ms: int) -> Future[RecordHandle]:
        """Start storing ``record``; the future's result is its handle once the record
        is durable, and a failed write sets the future's exception (contract 1 holds
        for the future). This default stores synchronously, as ``write``, and
        returns a completed future; a failure raises at once."""
        done: Future[RecordHandle] = Future()
        done.set_result(self.write(record, time_ms))
        return done

    @property
    def strict(self) -> bool:
        """Whether reading raises on a stored record it cannot decode, instead of
        reporting and skipping it (``KafkaWalConfig.strict``). False by default."""
        return False

    def replay_progress(self) -> ReplayProgress | None:
        """The progress of this log's latest ``read_all``, updated as it is consumed.

        An optional capability: a log whose storage can tell how many records lie
        ahead when a ``read_all`` starts returns its :class:`ReplayProgress` (a new
        one from each ``read_all`` call on); one that cannot returns None (this
        default), and its readers report progress without a total.
        """
        return None

    def follow(self, poll_timeout_s: float = 1.0) -> LogFollower:
        """A :class:`LogFollower` of this log: what ``read_all`` yields now, then every
        record appended later, in log order (a hot standby's tail of the log).

        An optional capability: a log that cannot be followed raises
        :class:`FollowNotSupportedError` (this default). ``poll_timeout_s`` is the
        wait of a ``poll`` without its own timeout.
        """
        raise FollowNotSupportedError(f"{type(self).__name__} cannot be followed")

    def begin_epoch(self, epoch: int, follower: LogFollower) -> None:
        """Start writing lease epoch ``epoch``'s log after the log ``follower`` read.

        An optional capability of a log kept as one log per epoch
        (:class:`~walstream.wal.epoch_chain.EpochChainLog`); this default raises
        :class:`~walstream.wal.errors.EpochNotSupportedError`.
        """
        raise EpochNotSupportedError(f"{type(self).__name__} has no lease epochs")

    def resume_epoch(self, epoch: int) -> None:
        """Write lease epoch ``epoch``'s log again, without a new link: how a driver
        without high availability continues a log an earlier leader left at
        ``epoch`` (the newest linked epoch). Optional, as :meth:`begin_epoch`; this
        default raises :class:`~walstream.wal.errors.EpochNotSupportedError`."""
        raise EpochNotSupportedError(f"{type(self).__name__} has no lease epochs")

    def newest_epoch(self) -> int:
        """The newest lease epoch this log was begun in (its newest link), as stored
        now: for a log kept per epoch, read from where the links live, which no
        clean deletes. This default, for a log without epochs, is 0."""
        return 0

    def prepare_epoch(self, timeout_s: float) -> None:
        """Make a later :meth:`begin_epoch` quick: connect what it writes with now.
        A hot standby calls it while standing by. Changes nothing that a reader
        sees; this default, for a log without epochs, does nothing."""
        return None

    def __enter__(self) -> WriteAheadLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ForwardingWriteAheadLog(WriteAheadLog):
    """A WAL that hands every call to ``wrapped``: the base of wrappers that watch a
    log (count its writes, note what became durable) and change nothing in it.
    A subclass overrides what it watches and calls ``super()``, so every guarantee
    stays the wrapped log's: ``write`` returns only when ``wrapped.write`` did."""

    def __init__(self, wrapped: WriteAheadLog) -> None:
        self.wrapped = wrapped

    def write(self, record: bytes, time_ms: int) -> RecordHandle:
        return self.wrapped.write(record, time_ms)

    def read(self, handle: RecordHandle) -> bytes:
        return self.wrapped.read(handle)

    def read_all(self) -> Iterator[bytes]:
        return self.wrapped.read_all()

    def clean(self, thresh_time_ms: int, wait_for_completion: bool) -> None:
        self.wrapped.clean(thresh_time_ms, wait_for_completion)

    def close(self) -> None:
        self.wrapped.close()

    @property
    def pipelines_writes(self) -> bool:
        return self.wrapped.pipelines_writes

    def write_async(self, record: bytes, time_ms: int) -> Future[RecordHandle]:
        return self.wrapped.write_async(record, time_ms)

    @property
    def strict(self) -> bool:
        return self.wrapped.strict

    def replay_progress(self) -> ReplayProgress | None:
        return self.wrapped.replay_progress()

    def follow(self, poll_timeout_s: float = 1.0) -> LogFollower:
        return self.wrapped.follow(poll_timeout_s)

    def begin_epoch(self, epoch: int, follower: LogFollower) -> None:
        self.wrapped.begin_epoch(epoch, follower)

    def resume_epoch(self, epoch: int) -> None:
        self.wrapped.resume_epoch(epoch)

    def newest_epoch(self) -> int:
        return self.wrapped.newest_epoch()

    def prepare_epoch(self, timeout_s: float) -> None:
        self.wrapped.prepare_epoch(timeout_s)
