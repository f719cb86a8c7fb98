"""DStreamGraph: every DStream of a context, its inputs and its output operations."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from walstream.errors import ConfigError

if TYPE_CHECKING:
    from driver.dstream import DStream
    from driver.dstream_kinds import ForEachDStream
    from driver.job_scheduler import Job


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

    def fingerprint(self) -> str:
        """A digest of the graph's shape: streams, operators, outputs in order."""
        shape = ";".join(s._fingerprint() for s in self.streams)
        return hashlib.sha256(f"{self.batch_ms}|{shape}".encode()).hexdigest()[:16]

    def describe(self) -> list[dict[str, Any]]:
        return [{"id": s._id, "kind": s._kind, "parents": [p._id for p in s._parents]}
                for s in self.streams]
