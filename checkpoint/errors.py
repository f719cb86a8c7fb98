"""Typed errors of checkpointing; all derive from :class:`CheckpointError`."""

from __future__ import annotations

from walstream.errors import WalStreamError


class CheckpointError(WalStreamError):
    """Root of every error the ``checkpoint`` package raises."""
