"""EpochChainLog: the driver WAL of a highly available driver, one log per lease epoch.

Why one log per epoch (docs/decisions/ha-lease-and-fencing.md): an old leader
can still append to an *older* segment of its log after the new leader drew its
cut, and a cut inside one log would then sort after that record. So each epoch
writes its own :class:`~wal.KafkaWriteAheadLog`, and the cut is the new epoch's
link (layout in :mod:`walstream.wal.epoch_links`): the epoch whose log it continues and the
end offsets of that log's segments as the new leader read them.

The read rule. The chain is found from the newest epoch with a valid link, back
along each link's ``prev_epoch`` to epoch 0 (an epoch whose leader died before its
link, and the epochs no link leads through, are not in it). ``read_all`` yields each
log of the chain oldest first: an older log only its records whose every frame lies
below the end its successor's link gives that segment (none of a segment the link
does not list), then the newest log whole. What it leaves out are an old leader's
late writes: counted in ``late_records`` and logged once per log and read. Corrupt
records are reported and skipped (raised when ``strict``) as by each log's ``read_all``.

The fence. An object writes only its current epoch's log (the epoch it was built
with, or the one :meth:`EpochChainLog.begin_epoch` switched it to) and never names
another epoch's topics, so an old leader cannot append to a newer epoch's log;
what it appends to its own after the new leader's link is beyond the link's ends.

Epoch 0's log is the plain ``name``: a chain without links reads, writes and cleans
exactly the topics a KafkaWriteAheadLog ``name`` does.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from walstream.wal import segments
from walstream.wal.base import LogFollower, ReplayProgress, WriteAheadLog
from walstream.wal.config import KafkaWalConfig
from walstream.wal.epoch_follow import ChainFollower
from walstream.wal.epoch_links import ChainView, Link, Member, log_name, validate_chain_name
from walstream.wal.errors import (
    CorruptRecordError,
    RecordNotFoundError,
    StaleFollowerError,
    WalClosedError,
)
from walstream.wal.handle import RecordHandle
from walstream.wal.kafka_log import KafkaWriteAheadLog
from walstream.wal.reader import CorruptHandler

log = logging.getLogger(__name__)


class EpochChainLog(WriteAheadLog):
    """A WAL kept as one KafkaWriteAheadLog per lease epoch (see the module doc).

    ``epoch`` is the epoch this object writes (0: the plain log ``name``); a new
    leader switches it with :meth:`begin_epoch`. Records written to an epoch >= 1 log
    count only once that log has its link, which :meth:`begin_epoch` writes first.
    Options are those of :class:`~wal.KafkaWriteAheadLog` (or ``config=``) and its
    ``delete_guard``, shared by every epoch's log. Creating an instance creates no topic.
    """

    def __init__(self, bootstrap_servers: str, name: str, epoch: int = 0,
                 on_corrupt: CorruptHandler | None = None,
                 delete_guard: Callable[[], None] | None = None, **options: Any) -> None:
        self.name = validate_chain_name(name)
        log_name(name, epoch)  # validates the epoch and the name it gives
        self.bootstrap_servers = bootstrap_servers
        self.config: KafkaWalConfig = options.pop("config", None) or KafkaWalConfig(**options)
        self._on_corrupt = on_corrupt
        self._delete_guard = delete_guard
        self._epoch = epoch
        self._lock = threading.Lock()
        self._closed = False
        self._logs: dict[int, KafkaWriteAheadLog] = {}
        self._view = ChainView(bootstrap_servers, name, self.config)
        self._followers: weakref.WeakSet[ChainFollower] = weakref.WeakSet()
        self._replay: ReplayProgress | None = None
        self.corrupt_records = 0
        self.late_records = 0

    @property
    def epoch(self) -> int:
        """The epoch whose log this object writes."""
        return self._epoch

    def log_name(self, epoch: int) -> str:
        """The KafkaWriteAheadLog name of ``epoch``'s log."""
        return log_name(self.name, epoch)

    def _check_open(self) -> None:
        if self._closed:
            raise WalClosedError(f"WAL {self.name!r} is closed")

    def _log(self, epoch: int) -> KafkaWriteAheadLog:
        with self._lock:
            self._check_open()
            wal = self._logs.get(epoch)
            if wal is None:
                wal = self._logs[epoch] = KafkaWriteAheadLog(
                    self.bootstrap_servers, log_name(self.name, epoch),
                    on_corrupt=self._report_corrupt, delete_guard=self._delete_guard,
                    config=self.config)
            return wal

    def _report_corrupt(self, exc: CorruptRecordError) -> None:
        self.corrupt_records += 1
        if self._on_corrupt is not None:
            self._on_corrupt(exc)
        else:
            log.warning("WAL %s: skipping a corrupt or foreign record: %s", self.name, exc)

    # -- writing ---------------------------------------------------------------------

    def write(self, record: bytes, time_ms: int) -> RecordHandle:
        """Store ``record`` in the current epoch's log (KafkaWriteAheadLog.write)."""
        return self._log(self._epoch).write(record, time_ms)

    @property
    def pipelines_writes(self) -> bool:
        return True

    @property
    def strict(self) -> bool:
        return self.config.strict

    def write_async(self, record: bytes, time_ms: int) -> Future[RecordHandle]:
        """Enqueue ``record`` to the current epoch's log (KafkaWriteAheadLog.write_async)."""
        return self._log(self._epoch).write_async(record, time_ms)

    def begin_epoch(self, epoch: int, follower: LogFollower) -> None:
        """Begin epoch ``epoch``: write its link, then write only its log.

        Precondition: ``follower`` is this chain's follower (possibly behind wrappers
        that pass :meth:`~walstream.wal.base.LogFollower.positions` through), it was just read to
        its end with ``drain_to_end``, and the caller applied every record it returned.
        Its current log must be the chain's newest linked log, and ``epoch`` newer than
        that log's epoch (else :class:`~walstream.wal.errors.StaleFollowerError`).

        The link (``prev_epoch``: the follower's epoch; ``ends``: its positions) is
        stored as the first record of ``epoch``'s link topic and acknowledged by every
        in-sync replica before this object writes ``epoch``'s log, so no record of
        that log can precede its link. A log of ``epoch`` that already holds records
        raises :class:`~walstream.wal.errors.EpochTakenError`; nothing is written then.
        """
        self._check_open()
        position = follower.positions()
        prev = self._epoch_of_log(position.log)
        topics = self._view.topics(self.config.read_timeout_s)
        newest = self._view.resolve(topics)[-1].epoch
        if prev != newest:
            raise StaleFollowerError(
                f"WAL {self.name!r}: the follower reads {position.log!r}, not the chain's "
                f"newest linked log {self.log_name(newest)!r}; drain it first")
        if epoch <= newest:
            raise StaleFollowerError(f"WAL {self.name!r}: epoch {epoch} is not newer than "
                                     f"the chain's newest linked epoch {newest}")
        log_name(self.name, epoch)
        self._view.check_empty(epoch, topics)
        self._view.write_link(Link(epoch, newest, dict(position.offsets)))
        with self._lock:
            self._check_open()
            self._epoch = epoch
        log.info("WAL %s: epoch %d began; its log continues epoch %d's, read up to %s",
                 self.name, epoch, newest, dict(position.offsets))

    def resume_epoch(self, epoch: int) -> None:
        """Write ``epoch``'s log from now on, with no new link: ``epoch`` must be the
        chain's newest linked epoch (else :class:`~walstream.wal.errors.StaleFollowerError`).

        For a driver without high availability on a log an earlier leader left:
        its records then land after that leader's in the log every reader takes
        whole, so they count; in the older epochs' logs they would lie beyond the
        links' ends and be dropped. Nothing else may write ``epoch``'s log then (no
        leader runs without HA), which is the caller's to ensure."""
        self._check_open()
        newest = self._view.resolve(self._view.topics(self.config.read_timeout_s))[-1].epoch
        if epoch != newest:
            raise StaleFollowerError(f"WAL {self.name!r}: epoch {epoch} is not the chain's "
                                     f"newest linked epoch {newest}")
        with self._lock:
            self._check_open()
            self._epoch = epoch
        log.info("WAL %s: writing epoch %d's log again (no lease: its leader is gone)",
                 self.name, epoch)

    def newest_epoch(self) -> int:
        """The chain's newest linked epoch (0: no link yet), from the link topics,
        which :meth:`clean` never deletes: known even after the records of that
        epoch's cut were cleaned away."""
        return self.chain()[-1].epoch

    def prepare_epoch(self, timeout_s: float) -> None:
        """Connect the link writer of :meth:`begin_epoch` now (``ChainView.prepare``)."""
        self._check_open()
        self._view.prepare(timeout_s)

    def _epoch_of_log(self, name: str) -> int | None:
        if name == self.name:
            return 0
        prefix = f"{self.name}-e"
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return int(name[len(prefix):])
        return None

    # -- reading ---------------------------------------------------------------------

    def read(self, handle: RecordHandle) -> bytes:
        """The bytes at ``handle``, from the epoch log its topic belongs to."""
        self._check_open()
        epoch = self._view.epoch_of_topic(handle.topic)
        if epoch is None:
            raise RecordNotFoundError(f"{handle}: not a topic of WAL {self.name!r}")
        return self._log(epoch).read(handle)

    def chain(self) -> list[Member]:
        """The chain's logs as a read finds them now, oldest first (for inspection)."""
        self._check_open()
        return self._view.resolve(self._view.topics(self.config.read_timeout_s))

    def read_all(self) -> Iterator[bytes]:
        """Every record of the chain by the read rule (module doc), in write order."""
        self._check_open()
        progress = self._replay = ReplayProgress()
        return self._read_all(progress)

    def _read_all(self, progress: ReplayProgress) -> Iterator[bytes]:
        topics = self._view.topics(self.config.read_timeout_s)
        members = self._view.resolve(topics)
        if len(members) > 1:
            progress.total = self._total(members, topics)
        done = 0
        for member in members:
            wal = self._log(member.epoch)
            records = wal.iter_records()
            mine = wal.replay_progress()
            assert mine is not None
            ends, late = member.ends, 0
            for record, _ts, handle in records:
                if ends is None or handle.offset + handle.chunks <= ends.get(handle.topic, 0):
                    yield record
                else:
                    late += 1
                progress.consumed = done + mine.consumed
                if len(members) == 1:
                    progress.total = mine.total
            done += mine.consumed
            progress.consumed = done
            if late:
                self.late_records += late
                log.warning("WAL %s: skipped %d records of epoch %d's log written after the "
                            "next epoch's leader read it (an old leader's late writes)",
                            self.name, late, member.epoch)

    def _total(self, members: list[Member], topics: list[str]) -> int | None:
        """The Kafka records ahead of a read of ``members``, or None if not learnt."""
        live: list[str] = []
        for member in members:
            segs, markers = segments.parse_topics(
                topics, self.config.topic_prefix, log_name(self.name, member.epoch))
            thresh = max(markers, default=-1)
            live += [s.topic for s in segs if s.end_ms > thresh]
        try:
            extents = self._view.extents(live)
        except Exception as exc:  # a progress total is never worth failing the read
            log.warning("WAL %s: could not learn the segments' end offsets: %s", self.name, exc)
            return None
        if any(t not in extents for t in live):
            return None
        return sum(end - start for start, end in extents.values())

    def replay_progress(self) -> ReplayProgress | None:
        """The latest :meth:`read_all`'s progress over all the chain's logs, in Kafka
        records (see :class:`~walstream.wal.base.ReplayProgress`); None before any read."""
        return self._replay

    def follow(self, poll_timeout_s: float = 1.0) -> ChainFollower:
        """A :class:`~walstream.wal.epoch_follow.ChainFollower`: ``read_all``'s records, then the
        newest log's later ones, then each newer epoch's log as its link appears.
        Closing this log closes its followers."""
        self._check_open()
        follower = ChainFollower(self.bootstrap_servers, self.name, self.config,
                                 self._report_corrupt, poll_timeout_s)
        self._followers.add(follower)
        return follower

    # -- cleaning and closing ----------------------------------------------------------

    def clean(self, thresh_time_ms: int, wait_for_completion: bool) -> None:
        """Drop records older than ``thresh_time_ms`` from every epoch's log, each as
        KafkaWriteAheadLog.clean does (whole segments; the threshold in a marker).
        Links are never deleted: each is one small topic per takeover."""
        self._check_open()
        epochs = self._view.epochs(self._view.topics(self.config.admin_timeout_s))
        for epoch in sorted(epochs | {self._epoch}):
            self._log(epoch).clean(thresh_time_ms, wait_for_completion)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            logs = list(self._logs.values())
        try:
            for wal in logs:
                wal.close()
        finally:
            for follower in list(self._followers):
                follower.close()
            self._view.close()
