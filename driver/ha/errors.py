"""Typed errors of the driver's high-availability lease (``driver/ha/lease.py``)."""

from __future__ import annotations

from walstream.driver.errors import DriverError
from walstream.errors import ConfigError


class LeaseError(DriverError):
    """Root of every error the driver's lease raises."""


class LeaseConfigError(LeaseError, ConfigError):
    """A lease setting is missing, of the wrong type or out of range."""


class LeaseIOError(LeaseError):
    """The lease topic could not be written or read within the configured bound."""


class LeaseLostError(LeaseError):
    """The holder could not confirm a renewal within the lease timeout.

    The lease is given up for good: a standby may already have claimed the next
    epoch. Taking the lease again means a new claim, with a new epoch.
    """


class LeaseFencedError(LeaseLostError):
    """The lease log holds a winning claim for an epoch newer than the holder's.

    Everything the fenced holder does from now on belongs to a superseded epoch.
    """

    def __init__(self, holder: str, epoch: int, newer_epoch: int, newer_holder: str) -> None:
        self.holder = holder
        self.epoch = epoch
        self.newer_epoch = newer_epoch
        self.newer_holder = newer_holder
        super().__init__(
            f"lease holder {holder!r} of epoch {epoch} is fenced: {newer_holder!r} "
            f"holds epoch {newer_epoch}"
        )


class LeaseLogRecreatedError(LeaseLostError):
    """The lease log went back: a record this holder appended got an offset below
    what it had already read, so the topic was deleted and created again. What the
    new log says about epochs is not this holder's history; it stops leading."""


class LeaseReleasedError(LeaseError):
    """This driver gave the lease up itself (its context is stopping): a standby may
    lead already, so nothing may be cleaned any more. Not a failure."""
