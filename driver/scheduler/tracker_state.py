"""What the block tracker (driver/scheduler/received_block_tracker.py) reports about itself:
its replay's figures, a comparable snapshot of its queues, and how far a replay
read of a WAL whose total is known."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from walstream.progress import Extent
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.wal.base import WriteAheadLog


@dataclass(frozen=True)
class RecoveryStats:
    """What the tracker's WAL replay did: events decoded and applied in log order,
    undecodable events skipped, how long it took, and when it began (wall clock,
    seconds; the tracker's clock), and how many of the decoded events were void
    (an older epoch's, after a newer epoch's cut: they changed nothing).
    All zero, beginning at construction, when no replay ran."""

    events_replayed: int
    corrupt_events: int
    seconds: float
    started_at_s: float
    fenced_events: int = 0


@dataclass(frozen=True)
class TrackerState:
    """A plain, comparable snapshot of the tracker (for tests and ``walstream inspect``)."""

    unallocated: tuple[tuple[int, tuple[ReceivedBlockInfo, ...]], ...]
    allocated: tuple[tuple[int, tuple[tuple[int, tuple[ReceivedBlockInfo, ...]], ...]], ...]
    last_allocated_batch_time_ms: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "unallocated": {str(s): [b.block_id for b in bs] for s, bs in self.unallocated},
            "allocated": {
                str(t): {str(s): [b.block_id for b in bs] for s, bs in streams}
                for t, streams in self.allocated
            },
            "last_allocated_batch_time_ms": self.last_allocated_batch_time_ms,
        }


def wal_extent(wal: WriteAheadLog) -> Extent | None:
    """How far ``wal``'s latest ``read_all`` got in its records of a known total;
    None when the log cannot tell
    (see :meth:`~walstream.wal.base.WriteAheadLog.replay_progress`)."""
    replay = wal.replay_progress()
    if replay is None or replay.total is None:
        return None
    return Extent(replay.consumed, replay.total)


#: Where a driver writes its tracker state right after a replay (chaos tests).
RECOVERED_STATE_ENV = "WALSTREAM_RECOVERED_STATE_FILE"


def dump_recovered_state(state: TrackerState) -> None:
    """For chaos tests: the tracker state right after the replay, before any batch,
    written to ``$WALSTREAM_RECOVERED_STATE_FILE`` when set (compared with what
    ``walstream inspect`` printed for the dead driver)."""
    path = os.environ.get(RECOVERED_STATE_ENV)
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(state.to_json(), f, sort_keys=True)
        os.replace(tmp, path)
