"""A small receiver pipeline for integration tests: real WALs, real gRPC, real Spark.

``ReceiverPipeline`` wires a ReceivedBlockTracker (batched Kafka WAL), a
ReceiverTracker (gRPC) and receivers launched as Spark jobs; ``run_batch``
allocates the next batch and collects each stream's items through block RDDs.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from walstream.driver.dstream.block_rdd import block_rdd
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.driver_wal import open_driver_wal
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver import BlockGeneratorConfig, Receiver
from walstream.receiver.task import ReceiverTaskSpec
from walstream.testing import wait_until

POLL_S = 0.05  # the pause between polls of a pipeline's state


class ReceiverPipeline:
    def __init__(self, sc: Any, bootstrap: str, app: str, receivers: list[Receiver],
                 block_interval_ms: int = 100) -> None:
        self.sc = sc
        self.bootstrap = bootstrap
        self.app = app
        ids = list(range(len(receivers)))
        self.blocks = ReceivedBlockTracker(
            ids, open_driver_wal(bootstrap, app))
        self.tracker = ReceiverTracker(self.blocks, ids)
        self.specs = [
            ReceiverTaskSpec(i, r, self.tracker.address, bootstrap, f"{app}-receiver-{i}",
                             BlockGeneratorConfig(block_interval_ms=block_interval_ms))
            for i, r in enumerate(receivers)
        ]
        self.items: dict[int, list[Any]] = {i: [] for i in ids}
        self._time = 10_000

    def start(self, relaunch_delay_s: float = 0.5) -> ReceiverPipeline:
        self.tracker.start_all_receivers(self.sc, self.specs, relaunch_delay_s=relaunch_delay_s)
        for i in self.items:
            wait_until(partial(self.registered, i), 60, f"receiver {i} to register",
                       poll_s=POLL_S)
        return self

    def registered(self, stream_id: int) -> bool:
        return bool(self.tracker.receivers[stream_id].state == "active")

    def worker_pid(self, stream_id: int) -> int:
        info = self.tracker.receivers[stream_id]
        return int(info.executor_id.rsplit(":", 1)[1]) if info.state == "active" else -1

    def run_batch(self) -> None:
        self._time += 1000
        self.blocks.allocate_blocks_to_batch(self._time)
        for s in self.items:
            blocks = self.blocks.get_blocks_of_batch_and_stream(self._time, s)
            self.items[s].extend(block_rdd(self.sc, blocks, self.bootstrap).collect())

    def stop(self) -> None:
        """Stop receivers gracefully (they flush), then run a last batch."""
        self.tracker.stop_all_receivers()
        self.run_batch()

    def close(self) -> None:
        self.tracker.stop_all_receivers()
        self.tracker.stop()
        self.blocks.cleanup_old_batches(2**42, wait_for_completion=True)
        self.blocks.stop()
