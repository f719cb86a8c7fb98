"""getOrCreate: recover a context from its checkpoint directory, or create it.

Today's scope: no checkpoint files are written yet (the CheckpointWriter is
being built), so ``get_or_create`` calls ``setupFunc`` -- PySpark's behaviour for
a directory without a checkpoint -- and the new context's engine replays the
driver WAL of the same checkpoint directory (its app id derives from the path),
so blocks received but not yet processed before a crash are not lost.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from checkpoint.errors import CheckpointError

if TYPE_CHECKING:
    from driver.streaming_context import StreamingContext


def get_or_create(checkpoint_path: str,
                  setup: Callable[[], StreamingContext]) -> StreamingContext:
    ssc = setup()
    if ssc is None or not hasattr(ssc, "_graph"):
        raise CheckpointError("setupFunc must return a StreamingContext")
    if ssc._checkpoint_dir is None:
        ssc.checkpoint(checkpoint_path)
    elif os.path.abspath(ssc._checkpoint_dir) != os.path.abspath(checkpoint_path):
        raise CheckpointError(
            f"setupFunc set checkpoint directory {ssc._checkpoint_dir!r}, but getOrCreate "
            f"was given {checkpoint_path!r}: they must be the same")
    return ssc
