"""A JobGenerator harness for the driver's tests: a ReceivedBlockTracker over an
in-memory WAL, a real JobScheduler, and jobs that record which blocks each batch saw
(when its jobs were built and when they ran); the batch interval is ``INTERVAL``."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

from tests.driver.helpers import INTERVAL
from walstream.driver.scheduler.job_generator import JobGenerator
from walstream.driver.scheduler.job_scheduler import Job, JobScheduler
from walstream.driver.scheduler.listener import ListenerBus
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.testing import MemoryWAL
from walstream.wal.handle import RecordHandle

_ids = itertools.count()


def block(stream: int = 0, n: int = 10) -> ReceivedBlockInfo:
    i = next(_ids)
    return ReceivedBlockInfo(stream, f"input-{stream}-{i}", n, RecordHandle("rwal", 0, i),
                             (SourceRange("src", stream, i * n, (i + 1) * n),))


def ids(blocks: dict[int, tuple[ReceivedBlockInfo, ...]]) -> set[str]:
    return {b.block_id for bs in blocks.values() for b in bs}


class Harness:
    """Tracker + scheduler + generator; each batch's job records what it saw."""

    def __init__(self, cleanup: bool = True,
                 checkpointer: Callable[[int, Callable[[], None] | None], None] | None = None,
                 generate: Callable[[int], list[Job]] | None = None,
                 job_s: float = 0.0, max_events: int = 10_000) -> None:
        self.job_s = job_s
        self.wal = MemoryWAL()
        self.tracker = ReceivedBlockTracker([0, 1], self.wal)
        self.lock = threading.Lock()
        self.at_generation: dict[int, set[str]] = {}  # t -> blocks of t when jobs were built
        self.seen: dict[int, set[str]] = {}  # t -> blocks of t when the job ran
        self.generated: list[int] = []
        self.cleaned: list[int] = []
        self.scheduler = JobScheduler(ListenerBus(),
                                      on_batch_completed=lambda i: self.gen.on_batch_completed(i))
        self.gen = JobGenerator(self.tracker, INTERVAL, generate or self.generate_jobs,
                                self.scheduler, cleanup=self.cleanup if cleanup else None,
                                checkpointer=checkpointer, max_events=max_events)

    def generate_jobs(self, t: int) -> list[Job]:
        with self.lock:
            self.generated.append(t)
            self.at_generation[t] = ids(self.tracker.get_blocks_of_batch(t))

        def run() -> None:
            with self.lock:
                self.seen[t] = ids(self.tracker.get_blocks_of_batch(t))
            time.sleep(self.job_s)
        return [Job(t, 0, "collect", run)]

    def cleanup(self, t: int) -> None:
        with self.lock:
            self.cleaned.append(t)

    def completed_times(self) -> list[int]:
        return [i.batchTime() for i in self.scheduler.completed]

    def records(self, t: int) -> dict[int, int]:
        return next(i.num_records_per_stream for i in self.scheduler.completed
                    if i.batchTime() == t)

    def batch_with(self, block_id: str) -> int | None:
        with self.lock:
            return next((t for t, s in sorted(self.seen.items()) if block_id in s), None)

    def restart(self, times: list[int]) -> int:
        """Resubmit ``times`` as a restart does and start with a timer that stays
        quiet for an hour; returns the timer's first time."""
        self.gen.resubmit(times)
        far = (int(time.time() * 1000) // INTERVAL + 36_000) * INTERVAL
        assert self.gen.start(far) == far
        return far

    def close(self) -> None:
        self.gen.stop(timeout_s=2)
        self.scheduler.stop(wait_for_jobs=False)
