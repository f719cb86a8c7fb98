"""Typed errors of the driver side; all derive from :class:`DriverError`."""

from __future__ import annotations

from walstream.errors import WalStreamError


class DriverError(WalStreamError):
    """Root of every error the ``driver`` package raises."""


class TrackerWriteError(DriverError):
    """A tracker event could not be logged; the tracker's state did not change."""


class UnknownReceiverError(DriverError):
    """A message came from a receiver that is not registered (or was deregistered)."""


class JobFailedError(DriverError):
    """A batch job failed; raised from ``awaitTermination`` with the original error text."""


class StreamClosedError(DriverError):
    """A driver-side input stream was used after its context stopped and closed it."""


class ReportLimitError(DriverError):
    """A receiver's report exceeds a limit of the driver's endpoint (source ranges per
    block, name length, record count); refused before anything was logged or kept."""


class ReceiverPermissionError(DriverError):
    """A receiver's call is not its to make; the endpoint answers PERMISSION_DENIED and
    nothing was logged or kept."""


class SessionTokenError(ReceiverPermissionError):
    """A call presented a session token that is not its stream's current one: another
    stream's, or one a newer registration of the stream superseded."""


class ForeignBlockError(ReceiverPermissionError):
    """A block report names a WAL topic that is not a segment of its stream's receiver
    WAL, or a source topic its stream's receiver does not declare."""


class NotLeaderError(DriverError):
    """This driver is not certain to lead (its lease was released, lost, fenced or
    not renewed in time): a block report is refused, retriable, so the receiver
    keeps its source unacknowledged and the data reaches the next leader."""


class TrackerFencedError(DriverError):
    """The tracker's epoch is below the driver WAL's cut: a newer leader logged
    ``EpochStarted`` of a higher epoch, so every event this tracker would log is
    void on every replay. The refused call changed no state (an event it had
    already logged when the cut reached the tracker is void); the driver that owns
    the tracker has been superseded and must stop leading."""

    def __init__(self, epoch: int, fence_epoch: int) -> None:
        self.epoch = epoch
        self.fence_epoch = fence_epoch
        super().__init__(
            f"tracker of epoch {epoch} is fenced: the driver WAL holds the cut of epoch "
            f"{fence_epoch}, so whatever it logs is void; a newer leader runs the batches"
        )
