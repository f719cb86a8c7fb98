"""Typed errors of checkpointing; all derive from :class:`CheckpointError`."""

from __future__ import annotations

from walstream.errors import WalStreamError


class CheckpointError(WalStreamError):
    """Root of every error the ``checkpoint`` package raises."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file is truncated, corrupt, or not a checkpoint of ours."""


class CheckpointWriteError(CheckpointError):
    """A checkpoint could not be written (disk full, permissions, queue full)."""


class IncompatibleGraphError(CheckpointError):
    """The setup code builds a graph the checkpoint cannot be restored into."""


class GraphNotCheckpointableError(CheckpointError):
    """Checkpointing is on and the DStream graph cannot be pickled into checkpoints.

    ``function`` names the user function that failed to pickle (qualified name,
    file and line), or is None when the culprit is not a function.
    """

    def __init__(self, message: str, function: str | None = None) -> None:
        super().__init__(message)
        self.function = function


class GraphLoadError(CheckpointError):
    """The checkpoint's pickled DStream graph cannot be loaded (changed or missing code)."""


class UnsafeCheckpointDirError(CheckpointError):
    """A local checkpoint directory another user owns or anyone may write: its
    checkpoints could be read or replaced (a restart runs their pickled graph)."""
