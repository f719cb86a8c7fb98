"""A driver process for crash tests: receiver + tracker + batches, dumping tracker state.

Runs an in-process RateGeneratorReceiver (deterministic lines), a
ReceivedBlockTracker over a batched Kafka WAL, and a JobGenerator whose batches
read their blocks back from the receiver WAL. After every change of tracker
state it atomically writes ``state.to_json()`` to ``--state-file``, so a test
that arms a kill point (``--kill-point name[:n]``) can compare the state a
restarted tracker replays with the state right before the SIGKILL. With
``--checkpoint-dir`` it also checkpoints as the engine does (after a batch is
generated and after it completed) and cleans the tracker only once the
checkpoint written after the batch's completion is durable.

The kill point is armed only once the first checkpoint is durable (at start
without ``--checkpoint-dir``), through ``WALSTREAM_KILL_POINT_FILE``, so ``n``
counts the crossings after arming and a test may rely on a checkpoint existing
however early its point comes in the run. ``WALSTREAM_KILL_POINT`` is refused:
it would arm the point from the first line, before any checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from walstream import killpoints
from walstream.checkpoint.data import CheckpointData
from walstream.checkpoint.writer import CheckpointWriter
from walstream.driver.receiver_tracker.endpoint import LocalReceiverEndpoint
from walstream.driver.scheduler.driver_wal import open_driver_wal
from walstream.driver.scheduler.job_generator import JobGenerator
from walstream.driver.scheduler.job_scheduler import Job, JobScheduler
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.scheduler.tracker_events import TrackerEvent
from walstream.receiver import BlockGeneratorConfig, RateGeneratorReceiver, ReceiverSupervisor
from walstream.receiver.block import Block
from walstream.wal import KafkaWriteAheadLog


class DumpingTracker(ReceivedBlockTracker):
    def __init__(self, state_file: Path, *args: Any, **kwargs: Any) -> None:
        self.state_file = state_file
        super().__init__(*args, **kwargs)

    def _apply(self, event: TrackerEvent) -> None:
        super()._apply(event)
        if hasattr(self, "state_file"):
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.state().to_json(), sort_keys=True))
            os.replace(tmp, self.state_file)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("app")
    ap.add_argument("--state-file", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--batch-ms", type=int, default=300)
    ap.add_argument("--checkpoint-dir", type=Path)
    ap.add_argument("--kill-point", required=True,
                    help="name[:n]: die at the n-th crossing after the first checkpoint")
    args = ap.parse_args()
    if os.environ.get(killpoints.ENV):
        ap.error(f"{killpoints.ENV} would arm before the first checkpoint: use --kill-point")
    name, _, n = args.kill_point.partition(":")
    # Unarmed until the first checkpoint: the file does not exist yet.
    kill_file = args.state_file.with_name(args.state_file.name + ".kill-point")
    kill_file.unlink(missing_ok=True)
    os.environ[killpoints.FILE_ENV] = str(kill_file)

    tracker = DumpingTracker(
        args.state_file, [0],
        open_driver_wal(args.bootstrap, args.app))
    receiver_wal = KafkaWriteAheadLog(args.bootstrap, f"{args.app}-receiver-0")
    endpoint = LocalReceiverEndpoint(tracker, [0])
    supervisor = ReceiverSupervisor(RateGeneratorReceiver(rate=500, seed=3), 0, receiver_wal,
                                    endpoint, BlockGeneratorConfig(block_interval_ms=50))

    def run_batch(t: int) -> None:
        for info in tracker.get_blocks_of_batch_and_stream(t, 0):
            Block.decode(receiver_wal.read(info.handle))  # the batch's "output"

    writer = CheckpointWriter(args.checkpoint_dir) if args.checkpoint_dir else None

    def checkpointer(t: int, on_done: Any) -> None:
        assert writer is not None
        writer.write(CheckpointData(
            checkpoint_time_ms=t, written_wall_ms=int(time.time() * 1000), app_id=args.app,
            batch_ms=args.batch_ms, zero_time_ms=0, fingerprint="crash-driver",
            graph_shape=("receiver",), pending_times_ms=tuple(jobs.pending_times())), on_done)

    def generate(t: int) -> list[Job]:
        return [Job(t, 0, "read", lambda: run_batch(t))]

    scheduler = JobScheduler(on_batch_completed=lambda info: jobs.on_batch_completed(info))
    jobs = JobGenerator(tracker, args.batch_ms, generate, scheduler,
                        cleanup=lambda t: tracker.cleanup_old_batches(t - 2 * args.batch_ms,
                                                                      True),
                        checkpointer=checkpointer if writer else None)
    supervisor.start()
    jobs.start()
    deadline = time.monotonic() + args.seconds
    # ``written`` counts checkpoint files already durable (the writer's thread
    # increments it after the write returns).
    while writer is not None and writer.written == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if writer is None or writer.written > 0:
        killpoints.arm_file(kill_file, name, int(n) if n.isdigit() else 1)
    time.sleep(max(0.0, deadline - time.monotonic()))
    os._exit(3)  # no kill point fired: the test reports that


if __name__ == "__main__":
    main()
