"""A driver process for crash tests: receiver + tracker + batches, dumping tracker state.

Runs an in-process RateGeneratorReceiver (deterministic lines), a
ReceivedBlockTracker over a batched Kafka WAL, and a JobGenerator whose batches
read their blocks back from the receiver WAL. After every change of tracker
state it atomically writes ``state.to_json()`` to ``--state-file``, so a test
that arms a kill point (``WALSTREAM_KILL_POINT``) can compare the state a
restarted tracker replays with the state right before the SIGKILL. With
``--checkpoint-dir`` it also checkpoints as the engine does (after a batch is
generated and after it completed) and cleans the tracker only once the
checkpoint written after the batch's completion is durable.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from checkpoint.data import CheckpointData
from checkpoint.files import CheckpointWriter
from driver.events import TrackerEvent
from driver.job_generator import JobGenerator
from driver.job_scheduler import Job, JobScheduler
from driver.received_block_tracker import ReceivedBlockTracker
from driver.receiver_endpoint import LocalReceiverEndpoint
from receiver import BlockGeneratorConfig, RateGeneratorReceiver, ReceiverSupervisor
from receiver.block import Block
from wal import BatchedWriteAheadLog, KafkaWriteAheadLog


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
    args = ap.parse_args()

    tracker = DumpingTracker(
        args.state_file, [0],
        BatchedWriteAheadLog(KafkaWriteAheadLog(args.bootstrap, f"{args.app}-driver")))
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
    time.sleep(args.seconds)
    os._exit(3)  # no kill point fired: the test reports that


if __name__ == "__main__":
    main()
