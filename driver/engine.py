"""StreamingEngine: the driver's moving parts wired together (what Spark's
JobScheduler owns): ReceivedBlockTracker over the driver WAL, ReceiverTracker
(gRPC endpoint + receivers as Spark jobs), JobGenerator, JobScheduler, the
listener bus and, with backpressure on, the rate controller.

The public ``driver.StreamingContext`` builds the DStream graph and drives this
engine; the engine knows nothing of DStreams: it asks ``generate_jobs(t)`` for a
batch's jobs.

Stop protocol (graceful): (1) stop the receivers (each flushes its last blocks,
stored and reported); (2) keep generating batches until no block is unallocated;
(3) wait for the running batches; (4) stop the timer and the scheduler; (5) let
the context drain its checkpoint writer (the cleanups behind the last
checkpoints log to the driver WAL); (6) stop the endpoint and close the WAL.
Ungraceful: skip (2) and (3).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from driver.batch_info import BatchInfo, ReceiverInfo
from driver.durations import conf_time_ms
from driver.job_generator import (
    DEFAULT_ALLOCATE_BACKOFF_MS,
    DEFAULT_ALLOCATE_RETRIES,
    Checkpointer,
    JobGenerator,
)
from driver.job_scheduler import Job, JobScheduler
from driver.listener import (
    ListenerBus,
    ReceiverEvent,
    StreamingListener,
    StreamingListenerReceiverError,
    StreamingListenerReceiverStarted,
    StreamingListenerStreamingStarted,
)
from driver.rate_controller import PIDRateEstimator, RateController
from driver.received_block_tracker import ReceivedBlockTracker
from driver.receiver_conf import check_max_block_bytes, max_block_bytes_from_conf
from driver.receiver_tracker import ReceiverTracker
from driver.wal_conf import wal_options_from_conf
from receiver.block_generator import BlockGeneratorConfig
from receiver.receiver import Receiver
from receiver.supervisor import SupervisorConfig
from receiver.task import ReceiverTaskSpec
from wal import BatchedWriteAheadLog, KafkaWriteAheadLog
from walstream.errors import ConfigError

log = logging.getLogger(__name__)

RECOVERED_STATE_ENV = "WALSTREAM_RECOVERED_STATE_FILE"
#: Retries of a batch whose driver-side inputs (a direct stream's offset probe)
#: failed with a retriable error, and the first wait between them in ms (doubling);
#: then the context stops and awaitTermination raises the error.
CONF_ALLOCATE_RETRIES = "spark.walstream.generator.allocateRetries"
CONF_ALLOCATE_BACKOFF = "spark.walstream.generator.allocateRetryBackoff"


def _dump_recovered_state(tracker: ReceivedBlockTracker) -> None:
    """For chaos tests: the tracker state right after the replay, before any batch,
    written to ``$WALSTREAM_RECOVERED_STATE_FILE`` when set (compared with what
    ``walstream inspect`` printed for the dead driver)."""
    path = os.environ.get(RECOVERED_STATE_ENV)
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(tracker.state().to_json(), f, sort_keys=True)
        os.replace(tmp, path)


@dataclass(frozen=True)
class EngineConfig:
    """``app_id`` names the WALs (``<app_id>-driver``, ``<app_id>-receiver-<n>``), so a
    restarted driver with the same id finds its logs again."""

    app_id: str
    batch_interval_ms: int
    bootstrap_servers: str
    remember_ms: int = 0
    concurrent_jobs: int = 1
    block_interval_ms: int = 200
    block_queue_size: int = 10
    max_rate: float = 0.0
    backpressure: bool = False
    backpressure_initial_rate: float = 0.0
    pid: dict[str, str] = field(default_factory=dict)
    endpoint_host: str = "127.0.0.1"
    endpoint_port: int = 0
    relaunch_delay_s: float = 1.0
    wal_options: dict[str, Any] = field(default_factory=dict)
    allocate_retries: int = DEFAULT_ALLOCATE_RETRIES
    allocate_backoff_ms: int = DEFAULT_ALLOCATE_BACKOFF_MS
    max_block_bytes: int = BlockGeneratorConfig.max_block_bytes

    def __post_init__(self) -> None:
        check_max_block_bytes(self.max_block_bytes)
        if self.batch_interval_ms <= 0:
            raise ConfigError("batch interval must be > 0")
        if not self.app_id:
            raise ConfigError("app_id must not be empty")
        if self.allocate_retries < 0 or self.allocate_backoff_ms < 0:
            raise ConfigError(f"{CONF_ALLOCATE_RETRIES} and {CONF_ALLOCATE_BACKOFF} must "
                              "not be negative")

    @classmethod
    def from_spark_conf(cls, conf: dict[str, str], **kw: Any) -> EngineConfig:
        """Spark's streaming conf names (spark.streaming.*) mapped onto the engine."""
        def ms(key: str, default: int) -> int:
            raw = conf.get(key)
            return default if raw is None else conf_time_ms(raw, key, bare_unit_ms=1)

        kw.setdefault("concurrent_jobs", int(conf.get("spark.streaming.concurrentJobs", 1)))
        kw.setdefault("block_interval_ms", ms("spark.streaming.blockInterval", 200))
        kw.setdefault("block_queue_size", int(conf.get("spark.streaming.blockQueueSize", 10)))
        kw.setdefault("max_rate", float(conf.get("spark.streaming.receiver.maxRate", 0)))
        kw.setdefault("backpressure", conf.get("spark.streaming.backpressure.enabled",
                                               "false").lower() == "true")
        kw.setdefault("backpressure_initial_rate",
                      float(conf.get("spark.streaming.backpressure.initialRate", 0)))
        kw.setdefault("pid", {k: v for k, v in conf.items()
                              if k.startswith("spark.streaming.backpressure.pid.")})
        kw.setdefault("allocate_retries",
                      int(conf.get(CONF_ALLOCATE_RETRIES, DEFAULT_ALLOCATE_RETRIES)))
        kw.setdefault("allocate_backoff_ms",
                      ms(CONF_ALLOCATE_BACKOFF, DEFAULT_ALLOCATE_BACKOFF_MS))
        kw.setdefault("wal_options", wal_options_from_conf(conf))  # also `walstream inspect`'s
        kw.setdefault("max_block_bytes",
                      max_block_bytes_from_conf(conf, BlockGeneratorConfig.max_block_bytes))
        return cls(**kw)

    def generator_config(self) -> BlockGeneratorConfig:
        """Every receiver's block generator settings."""
        return BlockGeneratorConfig(self.block_interval_ms, self.block_queue_size,
                                    max_block_bytes=self.max_block_bytes)


class StreamingEngine:
    def __init__(
        self,
        sc: Any,
        config: EngineConfig,
        receivers: dict[int, Receiver],
        generate_jobs: Callable[[int], list[Job]],
        checkpointer: Checkpointer | None = None,
        clear_metadata: Callable[[int], None] | None = None,
        driver_stream_ids: list[int] | None = None,
        before_allocate: Callable[[int], None] | None = None,
        clean_driver_streams: Callable[[int], None] | None = None,
        on_fatal: Callable[[BaseException], None] | None = None,
    ) -> None:
        """``on_fatal(error)``: the engine cannot go on (a batch could not be prepared);
        called once, on the job generator's thread, after awaitTermination was woken
        with the error. It must not stop the engine on that thread (stop joins it)."""
        self.sc = sc
        self._clean_driver_streams = clean_driver_streams
        # Set by checkpointing: batches after this time must keep their data (the
        # oldest state a restart would restore); None = no such limit.
        self.keep_batches_after_ms: int | None = None
        self._clear_metadata = clear_metadata
        self.config = config
        self.receivers = dict(receivers)
        self.bus = ListenerBus()
        self.driver_wal = BatchedWriteAheadLog(KafkaWriteAheadLog(
            config.bootstrap_servers, f"{config.app_id}-driver", **config.wal_options))
        # Replays the driver WAL: a restarted driver gets its queues back here.
        self.tracker = ReceivedBlockTracker(
            sorted([*receivers, *(driver_stream_ids or [])]), self.driver_wal)
        _dump_recovered_state(self.tracker)
        self.receiver_tracker = ReceiverTracker(
            self.tracker, sorted(receivers), config.endpoint_host, config.endpoint_port,
            listener=self._on_receiver_event)
        self.scheduler = JobScheduler(self.bus, config.concurrent_jobs,
                                      on_batch_completed=self._on_batch_completed)
        self.generator = JobGenerator(self.tracker, config.batch_interval_ms, generate_jobs,
                                      self.scheduler, cleanup=self._cleanup,
                                      checkpointer=checkpointer,
                                      before_allocate=before_allocate,
                                      allocate_retries=config.allocate_retries,
                                      allocate_backoff_ms=config.allocate_backoff_ms,
                                      on_fatal=on_fatal)
        self.rate_controller: RateController | None = None
        if config.backpressure and receivers:
            self.rate_controller = RateController(
                PIDRateEstimator.from_conf(config.pid, config.batch_interval_ms),
                self._publish_rate, config.max_rate)
        self._started = False
        self._stopped = threading.Event()
        self._wake = threading.Event()  # stopped, or a job failed
        threading.Thread(target=self._watch_errors, name="job-error-watch", daemon=True).start()

    # -- listeners and rates ---------------------------------------------------------

    def add_listener(self, listener: StreamingListener) -> None:
        self.bus.add(listener)

    def _on_receiver_event(self, kind: type[ReceiverEvent], stream_id: int,
                           detail: str) -> None:
        info = self.receiver_tracker.receivers.get(stream_id)
        rinfo = ReceiverInfo(stream_id, type(self.receivers.get(stream_id)).__name__,
                             kind is StreamingListenerReceiverStarted,
                             info.host if info else "", info.executor_id if info else "",
                             detail if kind is StreamingListenerReceiverError else "")
        self.bus.post(kind(rinfo))

    def _publish_rate(self, rate: float) -> None:
        for s in self.receivers:
            self.receiver_tracker.update_rate_limit(s, rate)

    def _on_batch_completed(self, info: BatchInfo) -> None:
        if self.rate_controller is not None:
            self.rate_controller.on_batch_completed(
                info.batch_time_ms, info.numRecords(), max(0, info.processingDelay()),
                max(0, info.schedulingDelay()))
        self.generator.on_batch_completed(info)

    def _cleanup(self, t: int) -> None:
        """After batch ``t`` (and its checkpoint): drop what no batch needs any more."""
        if self._clear_metadata is not None:
            self._clear_metadata(t)
        thresh = t - max(self.config.remember_ms, self.config.batch_interval_ms)
        floor = self.keep_batches_after_ms
        if floor is not None:
            thresh = min(thresh, floor + 1)  # batches after the restored state stay
        pending = self.generator.pending_times()
        if pending:
            # A batch not completed (running, or failed: it never completes) keeps its
            # data. Its blocks were stored after the previous batch was allocated, at
            # or after that batch's time, and cleanup removes only what is older than
            # the threshold: one interval before the oldest pending batch keeps them.
            thresh = min(thresh, pending[0] - self.config.batch_interval_ms)
        self.tracker.cleanup_old_batches(thresh, wait_for_completion=False)
        self.receiver_tracker.cleanup_old_blocks(thresh)
        if self._clean_driver_streams is not None:
            self._clean_driver_streams(thresh)

    # -- lifecycle ---------------------------------------------------------------

    def start(self, first_time_ms: int | None = None, resubmit: list[int] | None = None) -> int:
        self.bus.start()
        initial_rate = self.config.backpressure_initial_rate or self.config.max_rate
        specs = []
        for s, r in sorted(self.receivers.items()):
            if initial_rate > 0:
                self.receiver_tracker.receivers[s].rate_limit = initial_rate
            specs.append(ReceiverTaskSpec(
                s, r, self.receiver_tracker.address, self.config.bootstrap_servers,
                f"{self.config.app_id}-receiver-{s}",
                self.config.generator_config(), SupervisorConfig(), self.config.wal_options))
        self.receiver_tracker.start_all_receivers(self.sc, specs, self.config.relaunch_delay_s)
        if resubmit:
            self.generator.resubmit(resubmit)
        first = self.generator.start(first_time_ms)
        self._started = True
        self.bus.post(StreamingListenerStreamingStarted(first))
        return first

    def stop(self, graceful: bool = False, timeout_s: float = 120.0,
             before_close: Callable[[], None] | None = None) -> None:
        """Stop (see the module docstring). ``before_close`` runs after the job
        generator's loop ended and before the WALs close: the context drains its
        checkpoint writer there, so the cleanups queued behind the last checkpoints
        still log to an open WAL. It runs even when stopping failed before it."""
        if self._stopped.is_set():
            return
        try:
            if self._started:
                self.receiver_tracker.stop_all_receivers(timeout_s)
                if graceful:
                    self.generator.stop(drain=lambda: not self.tracker.has_unallocated_blocks(),
                                        timeout_s=timeout_s)
                    self.scheduler.wait_idle(timeout_s)
                else:
                    self.generator.stop(timeout_s=10)
            self.scheduler.stop(wait_for_jobs=graceful)
        finally:
            try:
                if before_close is not None:
                    # Safe now: the generator's loop has ended, so every completion it
                    # handled has queued its checkpoint (and cleanup) already, and no
                    # new one comes; the WALs below are still open.
                    before_close()
            finally:
                self._close()

    def _close(self) -> None:
        """Stop the endpoint and the bus, close the driver WAL; the engine is stopped."""
        try:
            self.receiver_tracker.stop()
            self.bus.stop()
            self.tracker.stop()
        finally:
            self._stopped.set()
            self._wake.set()

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait until stopped or a job failed; raise that job's error (original text).

        Returns True when the engine stopped, False when the timeout passed.
        """
        self._wake.wait(timeout_s)
        err = self.scheduler.await_error(0)
        if err is not None:
            raise err
        return self._stopped.is_set()

    def _watch_errors(self) -> None:
        if self.scheduler.await_error(None) is not None:
            self._wake.set()
