"""``walstream inspect CHECKPOINT_DIR``: what a restart would recover, as JSON.

Reads the newest valid checkpoint and replays the driver WAL it names (read
only: nothing is written or cleaned), so the output is exactly the tracker
state a ``getOrCreate`` restart would begin from.
"""

from __future__ import annotations

import json
from typing import Any

from checkpoint.errors import CheckpointError
from checkpoint.files import read_latest


def inspect_checkpoint(directory: str, bootstrap_servers: str) -> dict[str, Any]:
    from driver.events import decode_event
    from driver.received_block_tracker import ReceivedBlockTracker
    from wal import BatchedWriteAheadLog, KafkaWriteAheadLog

    data = read_latest(directory)
    if data is None:
        raise CheckpointError(f"no valid checkpoint in {directory}")
    log = BatchedWriteAheadLog(KafkaWriteAheadLog(bootstrap_servers, f"{data.app_id}-driver"))
    tracker = ReceivedBlockTracker([], None)
    try:
        for record in log.read_all():
            tracker._apply(decode_event(record))
    finally:
        log.close()
    state = tracker.state().to_json()
    streams = sorted({int(s) for s in state["unallocated"]} |
                     {int(s) for per in state["allocated"].values() for s in per})
    return {
        "checkpoint_dir": str(directory),
        "checkpoint_time_ms": data.checkpoint_time_ms,
        "app_id": data.app_id,
        "batch_ms": data.batch_ms,
        "pending_batches_ms": list(data.pending_times_ms),
        "state_rdds": [{"stream": s.stream, "time_ms": s.time_ms, "path": s.path}
                       for s in data.state_rdds],
        "tracker": state,
        "positions": {str(s): [r.__dict__ for r in tracker.positions(s)] for s in streams},
    }


def main_inspect(directory: str, bootstrap_servers: str) -> str:
    return json.dumps(inspect_checkpoint(directory, bootstrap_servers), indent=2,
                      sort_keys=True)
