"""checkpoint: checkpoints and getOrCreate recovery (Spark's Checkpoint, CheckpointWriter,
CheckpointReader). See :mod:`checkpoint.recovery` for what is recovered today."""

from checkpoint.errors import CheckpointError

__all__ = ["CheckpointError"]
