"""checkpoint: the checkpoint format and its files (Spark's Checkpoint data part,
CheckpointWriter, CheckpointReader): versioned Avro, written atomically, read
newest-valid-first. It knows no DStream and imports nothing from ``driver``: what
goes into a checkpoint and how a restart uses it is :mod:`walstream.driver.dstream.recovery`."""

from walstream.checkpoint.errors import CheckpointError

__all__ = ["CheckpointError"]
