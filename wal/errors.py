"""Typed errors of the write-ahead log; all derive from :class:`WalError`."""

from __future__ import annotations

from walstream.errors import WalStreamError


class WalError(WalStreamError):
    """Root of every error the ``wal`` package raises."""


class WalClosedError(WalError):
    """The log was closed; no further call is allowed (pending writes fail with this)."""


class WalWriteError(WalError):
    """The broker refused or lost a write. The record must be treated as not stored."""


class WalWriteTimeoutError(WalWriteError, TimeoutError):
    """No acknowledgement arrived within the configured bound (broker down or slow).

    The record must be treated as not stored; it may still appear later, so
    readers deduplicate by the ids inside records, never by position.
    """


class WalBackpressureError(WalWriteError):
    """A bounded queue stayed full for longer than its put timeout."""


class RecordTooLargeError(WalWriteError):
    """A record is larger than ``max_record_bytes``; nothing of it was written."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(
            f"record of {size} bytes exceeds the WAL limit max_record_bytes={limit}; "
            "split it before writing or raise the limit"
        )


class WalReadError(WalError):
    """A record could not be read back (broker down, timeout)."""


class RecordNotFoundError(WalReadError):
    """No record at this handle: it was cleaned, or the handle is not of this log."""


class CorruptRecordError(WalReadError):
    """Bytes at a handle are not a WAL record of ours, or fail their checksum."""


class UnknownRecordVersionError(CorruptRecordError):
    """A record was written with a schema version this release does not know."""

    def __init__(self, message: str, version: int) -> None:
        self.version = version
        super().__init__(message)


class TornRecordError(CorruptRecordError):
    """A chunked record stops before its last chunk and another record starts.

    What a writer that died between the chunks of a record leaves behind: that
    write never returned, so no acknowledged record is lost by skipping it. The
    record that follows is read normally.
    """


class EpochNotSupportedError(WalError):
    """This log is not kept per lease epoch; ``begin_epoch`` does not apply to it."""


class EpochChainError(WalError):
    """Root of the errors of a log kept as one log per lease epoch
    (:mod:`walstream.wal.epoch_chain`)."""


class EpochTakenError(EpochChainError):
    """The log of the epoch to begin already holds records: another leader of that
    epoch wrote there, which the lease rules out; refused rather than interleaved."""


class StaleFollowerError(EpochChainError):
    """``begin_epoch`` was given a follower that is not at the chain's newest linked
    log, or an epoch that is not newer than it: the link would drop records."""


class BrokenChainError(EpochChainError, WalReadError):
    """A chain link names, as the log it continues, an epoch whose log has no valid link."""


class FollowNotSupportedError(WalError):
    """This log cannot be followed; replay it with ``read_all`` instead."""


class FollowTimeoutError(WalReadError, TimeoutError):
    """``drain_to_end`` did not reach the end of the log within its bound."""


class FollowGapError(WalReadError):
    """A segment behind the follower holds records the follower never yielded.

    Only writes racing across a segment roll leave them (two writer instances of one
    log, ``write`` calls of several threads, pipelined ``write_async``; see
    :mod:`walstream.wal.follow`); ``read_all`` places them
    before the newer segment's records, so the caller's state must be rebuilt with
    a fresh replay to match it.
    """


class FollowOverrunError(FollowGapError):
    """The follower yielded records that ``read_all`` no longer yields.

    What an old leader's late writes leave when a standby read them before it saw
    the newer epoch's link (:mod:`walstream.wal.epoch_chain`): the records lie at or beyond the
    ends the new leader recorded, so no replay counts them. The caller's state must
    be rebuilt with a fresh replay.
    """


class FollowPositionError(WalError):
    """``positions()`` was asked while records the caller has not taken are buffered."""
