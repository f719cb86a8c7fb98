"""Following an epoch chain (:mod:`walstream.wal.epoch_chain`): its replay, then its newest
log, then each newer epoch's log as its link appears.

:class:`ChainFollower` reads the chain's logs one after another with a
:class:`~walstream.wal.follow.KafkaLogFollower` each: an older log bounded by the ends its
successor's link recorded (so it yields what ``read_all`` yields of it), the newest
log unbounded. While it follows the newest log it lists the topics at most every
``metadata_interval_s``, when it waits for records; once a newer epoch's valid link
continues the log it follows, it bounds that log's follower by the link's ends,
reads it up to them, and goes on in the newer log. Its sequence is therefore the
one a ``read_all`` taken later yields, with one exception it reports rather than
hides: records an old leader appended after the new leader read its log, which
this follower may have yielded before the link existed. No reader counts them, so
the bound raises :class:`~walstream.wal.errors.FollowOverrunError` (a
:class:`~walstream.wal.errors.FollowGapError`) and the caller replays.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from walstream.wal.base import FollowPosition, LogFollower
from walstream.wal.config import KafkaWalConfig
from walstream.wal.epoch_links import ChainView, Member, log_name
from walstream.wal.errors import (
    CorruptRecordError,
    FollowOverrunError,
    WalClosedError,
    WalError,
    WalReadError,
)
from walstream.wal.follow import KafkaLogFollower

log = logging.getLogger(__name__)


class ChainFollower(LogFollower):
    """A :class:`LogFollower` of a whole epoch chain (see the module doc).

    :meth:`positions` are those of the log it reads now, which after a
    :meth:`drain_to_end` is the newest linked log as of the drain's start:
    what :meth:`~walstream.wal.epoch_chain.EpochChainLog.begin_epoch` records.
    """

    def __init__(self, bootstrap_servers: str, name: str, config: KafkaWalConfig,
                 report: Callable[[CorruptRecordError], None], poll_timeout_s: float = 1.0,
                 metadata_interval_s: float = 0.5) -> None:
        if poll_timeout_s <= 0 or metadata_interval_s <= 0:
            raise WalError("poll_timeout_s and metadata_interval_s must be > 0")
        self.name = name
        self.poll_timeout_s = poll_timeout_s
        self.metadata_interval_s = metadata_interval_s
        self._bootstrap = bootstrap_servers
        self._config = config
        self._report = report
        self._view = ChainView(bootstrap_servers, name, config)
        self._closed = False
        self._caught_up = False
        self._next_check = 0.0
        try:
            self._members = self._view.resolve(self._view.topics(config.read_timeout_s))
            self._index = 0
            self._cur = self._open(self._members[0])
        except BaseException:
            self._view.close()
            raise

    @property
    def epoch(self) -> int:
        """The epoch of the log this follower reads now."""
        return self._members[self._index].epoch

    def _open(self, member: Member) -> KafkaLogFollower:
        return KafkaLogFollower(self._bootstrap, log_name(self.name, member.epoch),
                                self._config, self._report, self.poll_timeout_s,
                                metadata_interval_s=self.metadata_interval_s, ends=member.ends)

    def _newest(self) -> bool:
        return self._index == len(self._members) - 1

    def _advance(self) -> bool:
        """Move to the next log of the chain once the bounded one is read; True if moved."""
        if self._newest() or not self._cur.finished:
            return False
        self._cur.close()
        self._check_open()
        self._index += 1
        self._cur = self._open(self._members[self._index])
        if self._closed:  # close() ran meanwhile and closed the follower before this one
            self._cur.close()
            self._check_open()
        return True

    def _check_links(self, timeout_s: float, force: bool = False) -> bool:
        """Look for a newer epoch's link continuing the newest log; True when found (the
        current follower is then bounded by its ends)."""
        now = time.monotonic()
        if not force and now < self._next_check:
            return False
        self._next_check = now + self.metadata_interval_s
        try:
            topics = self._view.topics(timeout_s)
        except WalReadError:
            if force:
                raise
            return False
        epoch = self.epoch
        if not any(e > epoch for e in self._view.linked(topics)):
            return False
        members = self._view.resolve(topics)
        if members[-1].epoch == epoch:
            return False  # only newer logs without a (valid) link
        at = next((i for i, m in enumerate(members) if m.epoch == epoch), None)
        if at is None:
            raise FollowOverrunError(
                f"WAL {self.name!r}: the chain no longer holds epoch {epoch}'s log, which "
                "this follower read; replay the log again")
        ends = members[at].ends
        assert ends is not None
        self._cur.bound(ends)
        log.info("WAL %s: epoch %d continues epoch %d's log; following it after reading "
                 "up to its link's ends", self.name, members[at + 1].epoch, epoch)
        self._members, self._index = members, at
        return True

    # -- the contract ----------------------------------------------------------------

    def poll(self, max_records: int = 1000, timeout_s: float | None = None) -> list[bytes]:
        self._check_open()
        wait = self.poll_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + wait
        out: list[bytes] = []
        while len(out) < max_records:
            if self._advance():
                continue
            remaining = max(0.0, deadline - time.monotonic())
            if self._newest():
                if self._check_links(min(self._config.admin_timeout_s, max(0.05, remaining))):
                    continue
                remaining = min(remaining, self.metadata_interval_s)
            # Once it has records, only those readable at once (LogFollower.poll).
            got = self._cur.poll(max_records - len(out), 0.0 if out else remaining)
            out.extend(got)
            if got or (not self._newest() and self._cur.finished):
                continue
            if out or time.monotonic() >= deadline:
                break
        self._caught_up = self._newest() and self._cur.caught_up
        return out

    @property
    def caught_up(self) -> bool:
        return self._caught_up

    def drain_to_end(self, timeout_s: float) -> Iterator[bytes]:
        self._check_open()
        deadline = time.monotonic() + timeout_s
        self._check_links(max(0.05, timeout_s), force=True)
        return self._drain(deadline)

    def _drain(self, deadline: float) -> Iterator[bytes]:
        while not self._newest():
            if not self._advance():
                yield from self._cur.drain_to_end(max(0.0, deadline - time.monotonic()))
        yield from self._cur.drain_to_end(max(0.0, deadline - time.monotonic()))
        self._caught_up = self._cur.caught_up

    def positions(self) -> FollowPosition:
        self._check_open()
        return self._cur.positions()

    def close(self) -> None:
        self._closed = True
        self._cur.close()
        self._view.close()

    def _check_open(self) -> None:
        if self._closed:
            raise WalClosedError(f"WAL {self.name!r}: the follower is closed")
