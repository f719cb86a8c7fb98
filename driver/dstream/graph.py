"""DStreamGraph: every DStream of a context, its inputs and its output operations.

The graph is also what checkpoints read and restore of the streams: their shape
(fingerprints, in order), the newest durable state of each stateful stream and
where a restart puts restored state back. Recovery goes through these methods,
never through a stream's own attributes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from walstream.errors import ConfigError

if TYPE_CHECKING:
    from walstream.driver.dstream.dstream import DStream
    from walstream.driver.dstream.dstream_kinds import ForEachDStream
    from walstream.driver.scheduler.job_scheduler import Job


class DStreamGraph:
    def __init__(self, batch_ms: int) -> None:
        self.batch_ms = batch_ms
        self.streams: list[DStream] = []
        self.outputs: list[ForEachDStream] = []
        self.remember_ms = 0
        self.zero_ms: int | None = None

    def register(self, stream: DStream) -> int:
        self.streams.append(stream)
        return len(self.streams) - 1

    def add_output(self, stream: ForEachDStream) -> int:
        self.outputs.append(stream)
        return len(self.outputs) - 1

    def inputs(self) -> list[DStream]:
        return [s for s in self.streams if not s._parents]

    def validate(self, checkpoint_dir: str | None) -> None:
        if not self.outputs:
            raise ConfigError("No output operations registered, so nothing to execute")
        if checkpoint_dir is None and any(s._must_checkpoint for s in self.streams):
            raise ConfigError(
                "The checkpoint directory has not been set. Please set it by "
                "StreamingContext.checkpoint() (needed by updateStateByKey and "
                "windows with an inverse function)")

    def initialize(self, zero_ms: int) -> None:
        self.zero_ms = zero_ms
        for out in self.outputs:
            out._initialize(zero_ms)
            out._set_remember(max(self.remember_ms, self.batch_ms))

    def max_remember_ms(self) -> int:
        return max([s._remember_ms for s in self.streams] + [self.batch_ms])

    def generate_jobs(self, t: int) -> list[Job]:
        jobs = []
        for out in self.outputs:
            job = out.generate_job(t)
            if job is not None:
                jobs.append(job)
        return jobs

    def clear_metadata(self, t: int) -> None:
        for out in self.outputs:
            out._clear_metadata(t)

    def shape(self) -> tuple[str, ...]:
        """Every stream's fingerprint (kind, parameters, parents), in graph order."""
        return tuple(s._fingerprint() for s in self.streams)

    def fingerprint(self) -> str:
        """A digest of the graph's shape: streams, operators, outputs in order."""
        shape = ";".join(self.shape())
        return hashlib.sha256(f"{self.batch_ms}|{shape}".encode()).hexdigest()[:16]

    def durable_state(self) -> list[tuple[str, int, str]]:
        """``(stream fingerprint, batch time, path)`` of every state of each stateful
        stream that it still remembers and whose reliable checkpoint is complete (or
        that was restored at start), oldest first per stream. All of them, as Spark's
        DStreamCheckpointData keeps: with concurrent jobs an older batch can still be
        pending when a newer one's state is durable, and its re-run after a restart
        starts from the newest state before it."""
        state = []
        for s in self.streams:
            if not s._must_checkpoint:
                continue
            # A copy: the checkpoint writer's thread clears old RDDs (cleanup after the
            # previous checkpoint) while this runs on the job generator's thread.
            done = sorted((ts, path) for ts, rdd in list(s._generated.items())
                          if (path := state_path(rdd)) is not None)
            state += [(s._fingerprint(), ts, path) for ts, path in done]
        return state

    def restore_state(self, fingerprint: str, time_ms: int, rdd: Any, path: str) -> bool:
        """Make ``rdd``, read back from ``path``, the state of the stream with
        ``fingerprint`` at ``time_ms``; False when no stream of this graph has it."""
        for s in self.streams:
            if s._fingerprint() == fingerprint:
                # A checkpoint file read back is not "checkpointed" to Spark
                # (isCheckpointed() is False), yet it is this stream's state: remember
                # where it lives, so that checkpoints written before new state is
                # checkpointed still name it. A checkpoint naming no state would make
                # the next restart recompute state from batches cleanup already dropped.
                rdd._walstream_state_path = path
                s._generated[time_ms] = rdd
                floor = s._restored_floor_ms
                s._restored_floor_ms = time_ms if floor is None else min(floor, time_ms)
                return True
        return False

    def state_floor(self, state_times: Mapping[str, int], zero_ms: int) -> int | None:
        """The oldest batch time whose state a restart restores, given each stateful
        stream's restored state time (by fingerprint); a stream with none restarts
        from ``zero_ms``. None: no stateful stream."""
        floors = [state_times.get(s._fingerprint(), zero_ms)
                  for s in self.streams if s._must_checkpoint]
        return min(floors) if floors else None

    def describe(self) -> list[dict[str, Any]]:
        return [{"id": s._id, "kind": s._kind, "parents": [p._id for p in s._parents]}
                for s in self.streams]


def state_path(rdd: Any) -> str | None:
    """Where a state RDD's data is durable: the state restored at start-up, or an
    RDD whose reliable checkpoint is complete; None while it is not durable."""
    restored = getattr(rdd, "_walstream_state_path", None)
    if restored is not None:
        return str(restored)
    try:
        return str(rdd.getCheckpointFile()) if rdd.isCheckpointed() else None
    except Exception:
        return None
