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


class CheckpointFencedError(CheckpointError):
    """A writer of lease epoch ``epoch`` found a fence of the newer epoch
    ``fence_epoch`` in the checkpoint directory: another driver has taken over, and
    this one must stop writing (and cleaning) and exit.

    ``path`` is None when nothing was published; otherwise it names a checkpoint
    that landed while the fence was being written. Readers judge that file by the
    fence alone (it counts only when the fence lists it), and the writer runs no
    retention and no cleanup after it.
    """

    def __init__(self, message: str, epoch: int, fence_epoch: int,
                 path: str | None = None) -> None:
        super().__init__(message)
        self.epoch = epoch
        self.fence_epoch = fence_epoch
        self.path = path


class CorruptFenceError(CheckpointError):
    """A fence file is truncated, corrupt or not a fence of ours, and a decision
    depends on it. Reading a checkpoint of an older epoch than the fence is refused
    rather than guessed: skipping the fence could accept a fenced driver's late
    checkpoint, and reading it as an empty list would silently drop every
    checkpoint written before the takeover. The message names the file; restoring
    it, or removing it once the checkpoints it judges are known to be valid, lets
    reading go on."""

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class CheckpointFallbackError(CheckpointError):
    """The newest checkpoint cannot be restored and every older one is older than the
    last WAL cleanup (the clean mark): restoring it could silently lack data, so
    nothing is restored. The error names the checkpoint to repair."""
