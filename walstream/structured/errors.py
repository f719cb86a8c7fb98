"""Errors of the Structured Streaming source, all under :class:`SourceError`."""

from __future__ import annotations

from walstream.errors import ConfigError, WalStreamError


class SourceError(WalStreamError):
    """Root of the errors the ``walstream`` Structured Streaming source raises."""


class SourceOptionError(SourceError, ConfigError):
    """A ``readStream`` option is missing, unknown in its place, or out of range."""


class OffsetError(SourceError):
    """An offset this source did not make (another source's, or a corrupt one)."""


class ServiceError(SourceError):
    """The driver-side source service could not be reached, or refused a call."""


class RowError(SourceError):
    """A received item that no row of this source's schema can hold."""
