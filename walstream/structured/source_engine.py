"""SourceEngine: one ``walstream`` source's receivers, tracker and logs, in the
driver process of the query that reads it.

Protocol (each step logged before anything depends on it):

1. Replay ``<name>-driver`` into a :class:`ReceivedBlockTracker`: the blocks the
   receivers reported and the allocations earlier offsets named, as they were.
2. Bind the receiver endpoint over that tracker. A registering receiver is
   answered with the source positions the replay restored (a Kafka receiver
   resumes there) and its blocks are logged before they are acknowledged.
3. Launch the receivers as long-running Spark jobs (relaunched when they fail):
   each stores a block in its own log, then reports it, then acks its source.
4. ``latest``: log an allocation of reported blocks at a new time ``T``, then
   return ``T``; Spark writes it to its offset log only after that. A driver that
   dies in between replays the allocation, and ``latest`` from the same start
   answers it again.
5. ``partitions(start, end)``: the blocks of the allocations in ``(start, end]``,
   read from the replayed tracker: the same blocks in every incarnation.
6. ``commit(end)``: forget the allocations up to ``end`` and clean both logs below
   a threshold that keeps every block a later micro-batch reads
   (:func:`walstream.structured.offsets.clean_threshold`).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from walstream.driver.app_conf import CONF_BOOTSTRAP, resolve_bootstrap
from walstream.driver.engine_config import EngineConfig
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.driver_wal import open_driver_wal
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.scheduler.wal_conf import kafka_settings_of
from walstream.killpoints import kill_point
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.supervisor_config import SupervisorConfig
from walstream.receiver.task import ReceiverTaskSpec
from walstream.structured import offsets
from walstream.structured.errors import OffsetError
from walstream.structured.options import SourceOptions
from walstream.structured.receivers import build_receivers

log = logging.getLogger(__name__)

#: A stream's receiver job relaunch pause after it failed (s).
RELAUNCH_DELAY_S = 1.0


def engine_conf(spark_conf: dict[str, str], options: SourceOptions) -> dict[str, str]:
    """The Spark conf with the source's ``kafka.*`` options as the application's
    Kafka settings (``spark.walstream.kafka.*``): they win over the conf's."""
    conf = dict(spark_conf)
    if options.bootstrap_servers:
        conf[CONF_BOOTSTRAP] = options.bootstrap_servers
    for key, value in options.kafka_settings:
        conf[f"spark.walstream.kafka.{key}"] = value
    if options.block_interval_ms is not None:
        conf["spark.streaming.blockInterval"] = f"{options.block_interval_ms}ms"
    if options.max_rate_per_receiver:
        conf["spark.streaming.receiver.maxRate"] = str(options.max_rate_per_receiver)
    return conf


class SourceEngine:
    """Build with :meth:`start` (steps 1-3), then answer the reader's calls."""

    def __init__(self, sc: Any, options: SourceOptions, config: EngineConfig) -> None:
        self.sc = sc
        self.options = options
        self.config = config
        self.receivers = build_receivers(options, config.bootstrap_servers)
        self._ids = sorted(self.receivers)
        self._lock = threading.Lock()
        self._tracker: ReceivedBlockTracker | None = None
        self._endpoint: ReceiverTracker | None = None
        self._cleaned_below = 0
        self._committed = offsets.BEFORE_FIRST
        self._stopped = False

    @classmethod
    def start(cls, sc: Any, options: SourceOptions) -> SourceEngine:
        conf = engine_conf(dict(sc.getConf().getAll()), options)
        config = EngineConfig.from_spark_conf(
            conf, app_id=options.name, batch_interval_ms=1000,
            bootstrap_servers=resolve_bootstrap(conf), metrics_enabled=False, ha=None)
        engine = cls(sc, options, config)
        try:
            engine._start()
        except BaseException:
            engine.stop()
            raise
        return engine

    def _start(self) -> None:
        cfg = self.config
        wal = open_driver_wal(cfg.bootstrap_servers, cfg.app_id, cfg.wal_options)
        self._tracker = ReceivedBlockTracker(self._ids, wal)                    # 1
        endpoint = self._endpoint = ReceiverTracker(                             # 2
            self._tracker, self._ids, cfg.endpoint_bind_host or cfg.endpoint_host,
            cfg.endpoint_port, advertised_host=cfg.endpoint_host,
            credentials=cfg.endpoint_credentials(), tls=cfg.endpoint_tls)
        if cfg.max_rate > 0:
            for s in self._ids:
                endpoint.receivers[s].rate_limit = cfg.max_rate
        specs = [ReceiverTaskSpec(                                               # 3
            s, r, endpoint.address, cfg.bootstrap_servers, f"{cfg.app_id}-receiver-{s}",
            cfg.generator_config(), SupervisorConfig(send_figures=False), cfg.wal_options,
            endpoint.credentials) for s, r in sorted(self.receivers.items())]
        endpoint.start_all_receivers(self.sc, specs, RELAUNCH_DELAY_S)
        log.info("walstream source %r: %d receiver(s) launched; %d allocation(s) and %d "
                 "queued block(s) recovered", cfg.app_id, len(specs),
                 len(self.tracker.allocated_batch_times()),
                 sum(len(self.tracker.get_unallocated_blocks(s)) for s in self._ids))

    @property
    def tracker(self) -> ReceivedBlockTracker:
        if self._tracker is None:
            raise RuntimeError("the source engine has not started")
        return self._tracker

    @property
    def read_settings(self) -> tuple[str, dict[str, str]]:
        """How a task reads blocks: the logs' broker and the Kafka settings."""
        return self.config.bootstrap_servers, kafka_settings_of(self.config.wal_options)

    def _allocations_after(self, start: int) -> list[offsets.Allocation]:
        tracker = self.tracker
        return [(t, tracker.get_blocks_of_batch(t))
                for t in tracker.allocated_batch_times() if t > start]

    def _new_time(self, start: int) -> int:
        """A time after ``start`` and after the last allocation, and not after now:
        the allocation's log record (timed by the clock when written) is then at or
        after it, which :func:`offsets.clean_threshold` relies on."""
        last = self.tracker.last_allocated_batch_time_ms
        floor = max(start, last if last is not None else offsets.BEFORE_FIRST) + 1
        while True:
            now = int(time.time() * 1000)
            if now >= floor:
                return now
            time.sleep(min(1.0, (floor - now) / 1000))

    def latest(self, start: int, max_blocks: int | None, max_records: int | None) -> int:
        """Step 4: the end of the next micro-batch from ``start`` (``start`` itself when
        nothing new is reported). Allocations after ``start`` that an earlier
        incarnation logged are answered first, so a restarted driver names the same
        blocks; only when there are none is a new one logged."""
        with self._lock:
            pending = self._allocations_after(start)
            if pending:
                end = offsets.end_within(pending, max_blocks, max_records)
                assert end is not None
                return end
            tracker = self.tracker
            if not tracker.has_unallocated_blocks():
                return start
            t = self._new_time(start)
            tracker.allocate_blocks_to_batch(
                t, choose=lambda q: offsets.choose_blocks(q, max_blocks, max_records))
            return t

    def blocks(self, start: int, end: int) -> list[ReceivedBlockInfo]:
        """Step 5: the blocks of the micro-batch ``(start, end]``."""
        if end <= start:
            return []
        with self._lock:
            tracker = self.tracker
            if end not in tracker.allocated_batch_times():
                raise OffsetError(
                    f"source {self.options.name!r} has no allocation at {end}: its driver "
                    f"log {self.config.app_id}-driver does not hold the offsets this "
                    "query's checkpoint names (deleted logs, or another source name)")
            allocations = [(t, tracker.get_blocks_of_batch(t))
                           for t in tracker.allocated_batch_times()]
        return offsets.blocks_between(allocations, start, end)

    def commit(self, end: int) -> None:
        """Step 6 (idempotent): forget what ``end`` covered; clean the logs."""
        with self._lock:
            tracker = self.tracker
            pending = [b for _, streams in self._allocations_after(end)
                       for bs in streams.values() for b in bs]
            pending += [b for s in self._ids for b in tracker.get_unallocated_blocks(s)]
            thresh = offsets.clean_threshold(end, pending, int(time.time() * 1000),
                                             self.options.clean_margin_ms)
            if end <= self._committed and thresh <= self._cleaned_below:
                return
            # The allocations up to end are forgotten whatever the threshold: no
            # micro-batch reads them again (Spark commits an end only after its
            # batch is in its commit log). The logs are cleaned below the threshold.
            tracker.cleanup_old_batches(end + 1, wait_for_completion=False,
                                        clean_wal_below_ms=thresh)
            if self._endpoint is not None and thresh > self._cleaned_below:
                self._endpoint.cleanup_old_blocks(thresh)
            self._committed = max(self._committed, end)
            self._cleaned_below = max(self._cleaned_below, thresh)
        kill_point("structured.after_commit_clean")  # logs cleaned, next batch not begun

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop the receivers (each flushes its last blocks, stored and reported),
        then the endpoint, then close the driver log; idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        try:
            if self._endpoint is not None:
                try:
                    self._endpoint.stop_all_receivers(timeout_s)
                finally:
                    self._endpoint.stop()
        finally:
            if self._tracker is not None:
                self._tracker.stop()
            log.info("walstream source %r: stopped", self.config.app_id)
