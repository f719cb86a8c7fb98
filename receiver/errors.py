"""Typed errors of the receiver side; all derive from :class:`ReceiverError`."""

from __future__ import annotations

from walstream.errors import CorruptDataError, WalStreamError


class ReceiverError(WalStreamError):
    """Root of every error the ``receiver`` package raises."""


class BlockGeneratorStoppedError(ReceiverError):
    """Data was added after the block generator stopped accepting it."""


class BlockGeneratorTimeoutError(ReceiverError):
    """``add_data`` found no room within ``put_timeout_s`` (backpressure: the WAL or
    the driver is not keeping up). The item was not added; the generator still runs.
    Deliberately not a :class:`BlockGeneratorStoppedError`, which receivers take as
    "the supervisor is stopping" and end on."""


class ReceiverRefusedError(ReceiverError):
    """The driver refused to register this receiver (unknown, stopped, or a duplicate)."""


class EndpointSecurityError(ReceiverError):
    """The driver's endpoint and this receiver did not trust each other. Never retried:
    the same credentials or session would be refused again."""


class EndpointAuthError(EndpointSecurityError):
    """The endpoint refused this receiver's application secret (UNAUTHENTICATED: none
    was presented, or another application's): the task spec's credentials are not
    those of the driver listening at that address."""


class DriverProofError(EndpointAuthError):
    """An answer or a registration did not carry the driver's proof of the application
    secret: whatever answered is not the driver that launched this receiver (another
    process on its port, or a wrong secret). Nothing in the answer was acted on."""


class EndpointPermissionError(EndpointSecurityError):
    """The endpoint refused a call as not this receiver's to make (PERMISSION_DENIED):
    its session token is another stream's or was superseded by a newer registration,
    or a block names a WAL topic or a source topic that is not its stream's."""


class BlockStoreError(ReceiverError):
    """A block could not be stored in the WAL after its bounded retries; it was not reported."""


class BlockReportError(ReceiverError):
    """The driver did not acknowledge a stored block; its source was not acknowledged."""


class BadRecordError(ReceiverError):
    """A record cannot be stored (not encodable, or over ``max_record_bytes``)."""


class CorruptItemError(BadRecordError, CorruptDataError):
    """A stored item does not decode: truncated, garbage, too deep or too large."""


class SourceMetadataError(ReceiverError, TypeError):
    """``store``'s metadata is not a source position of a shape the supervisor knows
    (a ``SourceRange``, a ``(topic, partition, offset)`` tuple, or a list or tuple of
    ``SourceRange``). Raised before anything is stored: positions never vanish silently."""


class BlockTooLargeError(ReceiverError, ValueError):
    """A multi-item store carrying source positions holds more bytes than one block
    may (``max_block_bytes``). Its positions cannot be divided among several blocks
    (a range may span skipped records, items of several partitions interleave), and
    one block over the cap may be one the WAL can never store: refused before
    anything is stored. Store smaller lists, or each item with its own position."""


class CleanRefusedError(ReceiverError):
    """The driver did not grant a delete of this receiver's WAL data now (it is not
    certain to lead, never asked for that clean, or could not be reached), or its
    grant came back with too little of its lease left: the clean stops before the
    delete and the data stays (a later clean, granted, removes it)."""

