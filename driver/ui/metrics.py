"""The engine's metrics (Spark's ``StreamingSource``) in Prometheus form.

:class:`EngineMetrics` is a :class:`~walstream.driver.scheduler.listener.StreamingListener` on the
engine's bus: the batch and record figures are the listener's figures, counted
from the same ``BatchInfo`` a user's listener gets. What the bus carries no event
for comes through direct hooks: the driver WAL is wrapped in
:class:`MeteredWriteAheadLog`, the engine reports its replay
(:meth:`EngineMetrics.recovered`) and hands over the figures receivers send with
their block reports (:meth:`EngineMetrics.receiver_reported`: their WAL writes,
the source ends of the Kafka lag), and the figures that are a state rather than
an event (batches waiting or running, receivers per state, their rate limits)
are read when scraped, from a :data:`LiveFigures` callable the engine gives.

Each engine has its own ``CollectorRegistry`` (never the process's global one:
one process may run many engines, one after the other). The same object keeps
the recent batches and receiver errors the status page shows
(:meth:`EngineMetrics.snapshot`).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from walstream.driver.scheduler.batch_info import BatchInfo
from walstream.driver.scheduler.listener import StreamingListener
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.scheduler.tracker_events import AllocatedBlocks, event_kind_of
from walstream.receiver.block_info import BlockFigures
from walstream.wal.base import ForwardingWriteAheadLog, WriteAheadLog
from walstream.wal.handle import RecordHandle

#: Buckets of the batch total delay histogram, in seconds.
DELAY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
#: Buckets of a WAL write's duration, in seconds.
WAL_WRITE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
#: Batches the status page lists (newest last).
RECENT_BATCHES = 300
#: Source partitions whose end receivers reported that are kept (more are ignored).
MAX_RECEIVER_ENDS = 1 << 16


@dataclass(frozen=True)
class ReceiverFigures:
    """One receiver as the driver sees it now."""

    stream_id: int
    name: str
    state: str
    host: str
    executor_id: str
    rate_limit: float


@dataclass(frozen=True)
class Live:
    """The engine's state now: batches not completed and receivers."""

    unprocessed: int = 0
    running: int = 0
    receivers: tuple[ReceiverFigures, ...] = ()


LiveFigures = Callable[[], Live]
#: Each source partition's log end as the driver last saw it: (topic, partition) -> offset.
SourceEnds = Callable[[], dict[tuple[str, int], int]]


@dataclass
class BatchRecord:
    """One completed batch, as the status page lists it."""

    time_ms: int
    records: int
    records_per_stream: dict[int, int]
    scheduling_delay_ms: int
    processing_delay_ms: int
    total_delay_ms: int
    status: str
    error: str

    def to_json(self) -> dict[str, Any]:
        return {"time_ms": self.time_ms, "records": self.records,
                "records_per_stream": {str(s): n for s, n in
                                       sorted(self.records_per_stream.items())},
                "scheduling_delay_ms": self.scheduling_delay_ms,
                "processing_delay_ms": self.processing_delay_ms,
                "total_delay_ms": self.total_delay_ms, "status": self.status,
                "error": self.error}


@dataclass
class WalFigures:
    """What this driver wrote to one WAL and cleaned from it."""

    name: str
    records: int = 0
    bytes: int = 0
    clean_threshold_ms: int = -1
    last_topic: str = ""
    kinds: dict[str, int] = field(default_factory=dict)


class _LiveCollector(Collector):
    def __init__(self, live: Callable[[], Live | None],
                 lag: Callable[[], dict[tuple[str, int], int]]) -> None:
        self._live = live
        self._lag = lag

    def collect(self) -> Iterator[GaugeMetricFamily]:
        live = self._live() or Live()
        yield GaugeMetricFamily("walstream_batches_unprocessed",
                                "Batches submitted and not completed (waiting or running)",
                                value=live.unprocessed)
        yield GaugeMetricFamily("walstream_batches_running",
                                "Batches whose first output operation started",
                                value=live.running)
        states = GaugeMetricFamily("walstream_receivers", "Receivers per state",
                                   labels=["state"])
        counts = collections.Counter(r.state for r in live.receivers)
        for state in ("inactive", "scheduled", "active", "deregistered", "failed"):
            states.add_metric([state], counts.get(state, 0))
        yield states
        lag = GaugeMetricFamily(
            "walstream_kafka_source_lag",
            "Log end (as a direct stream's probe or a receiver's report last found it) "
            "minus the next offset no completed batch processed, per source partition",
            labels=["topic", "partition"])
        for (topic, partition), n in sorted(self._lag().items()):
            lag.add_metric([topic, str(partition)], n)
        yield lag
        rates = GaugeMetricFamily(
            "walstream_receiver_rate_limit",
            "The rate limit in force per receiver stream, records/s (0: none)",
            labels=["stream"])
        for r in live.receivers:
            rates.add_metric([str(r.stream_id)], r.rate_limit)
        yield rates


class EngineMetrics(StreamingListener):
    """The engine's metrics and recent history; add it to the engine's bus."""

    def __init__(self, app_id: str) -> None:
        self.app_id = app_id
        self.started_at = time.time()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.batches_completed = Counter(
            "walstream_batches_completed", "Batches completed (every job succeeded)",
            registry=r)
        self.batches_failed = Counter(
            "walstream_batches_failed", "Batches with a failed output operation", registry=r)
        self.records_received = Counter(
            "walstream_records_received", "Records in submitted batches, per input stream",
            ["stream"], registry=r)
        self.records_processed = Counter(
            "walstream_records_processed", "Records of completed batches", registry=r)
        self.last_processing = Gauge(
            "walstream_last_batch_processing_delay_seconds",
            "Processing delay of the last completed batch", registry=r)
        self.last_scheduling = Gauge(
            "walstream_last_batch_scheduling_delay_seconds",
            "Scheduling delay of the last completed batch", registry=r)
        self.last_total = Gauge(
            "walstream_last_batch_total_delay_seconds",
            "Total delay of the last completed batch", registry=r)
        self.total_delay = Histogram(
            "walstream_batch_total_delay_seconds", "Total delay of completed batches",
            buckets=DELAY_BUCKETS, registry=r)
        self.wal_write = Histogram(
            "walstream_wal_write_seconds", "Duration of one WAL write, until durable",
            ["log"], buckets=WAL_WRITE_BUCKETS, registry=r)
        self.wal_bytes = Counter(
            "walstream_wal_bytes_written", "Bytes written to a WAL", ["log"], registry=r)
        self.wal_events = Counter(
            "walstream_wal_events", "Tracker events written to the driver WAL", ["kind"],
            registry=r)
        self.replayed_events = Gauge(
            "walstream_recovery_replayed_events",
            "Driver WAL events replayed when this driver started", registry=r)
        self.replay_seconds = Gauge(
            "walstream_recovery_replay_seconds",
            "Duration of the driver WAL replay when this driver started", registry=r)
        self.first_batch_seconds = Gauge(
            "walstream_recovery_first_batch_seconds",
            "From this driver's start to its first completed batch", registry=r)
        self._live: LiveFigures | None = None
        self._first_batch_seen = False
        self._source_ends: SourceEnds | None = None
        self._receiver_ends: dict[tuple[str, int], int] = {}
        self._processed: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._batches: collections.deque[BatchRecord] = collections.deque(
            maxlen=RECENT_BATCHES)
        self._receiver_errors: dict[int, tuple[str, float]] = {}
        self._wals: dict[str, WalFigures] = {}
        self.restart: dict[str, Any] = {"restarted": False, "replayed_events": None,
                                        "replay_seconds": None, "first_batch_seconds": None}
        r.register(_LiveCollector(lambda: self._live() if self._live is not None else None,
                                  self.kafka_lag))

    def set_live(self, live: LiveFigures) -> None:
        """Where the scrape-time figures come from (the engine, once started)."""
        self._live = live

    def set_source_ends(self, ends: SourceEnds) -> None:
        """Where the log ends of the Kafka lag come from (the direct streams' probes)."""
        self._source_ends = ends

    def batch_sources(self, blocks: AllocatedBlocks) -> None:
        """A batch completed with ``blocks``: their source ranges are processed."""
        with self._lock:
            for stream_blocks in blocks.values():
                for block in stream_blocks:
                    for r in block.source:
                        key = (r.topic, r.partition)
                        if r.until_offset > self._processed.get(key, -1):
                            self._processed[key] = r.until_offset

    def receiver_reported(self, log: str, handle: RecordHandle,
                          figures: BlockFigures) -> None:
        """A receiver's block report, stored at ``handle`` in its WAL ``log``, came
        with ``figures``: its WAL write, and the source ends it learnt."""
        self.wal_written(log, figures.wal_bytes, figures.wal_write_seconds, None, handle)
        with self._lock:
            ends = self._receiver_ends
            for e in figures.source_ends:
                key = (e.topic, e.partition)
                if key in ends or len(ends) < MAX_RECEIVER_ENDS:
                    ends[key] = max(ends.get(key, 0), e.end_offset)

    def kafka_lag(self) -> dict[tuple[str, int], int]:
        """Per partition with a known log end (a direct stream's probe, a receiver's
        report) and a completed batch: the records between the next offset to
        process and that end."""
        ends = dict(self._source_ends()) if self._source_ends is not None else {}
        with self._lock:
            for k, end in self._receiver_ends.items():
                ends[k] = max(end, ends.get(k, end))
            return {k: max(0, end - self._processed[k]) for k, end in ends.items()
                    if k in self._processed}

    def live(self) -> Live:
        return self._live() if self._live is not None else Live()

    # -- hooks without a listener event ----------------------------------------------

    def recovered(self, replayed_events: int, seconds: float, restarted: bool,
                  began_at: float | None = None) -> None:
        """The driver WAL was replayed: ``replayed_events`` events in ``seconds``, from
        ``began_at`` (wall seconds; the time to the first batch counts from there, as
        the restart log's line does)."""
        if began_at is not None:
            self.started_at = began_at
        self.replayed_events.set(replayed_events)
        self.replay_seconds.set(seconds)
        with self._lock:
            self.restart.update(restarted=restarted, replayed_events=replayed_events,
                                replay_seconds=round(seconds, 3))

    def wal_written(self, log: str, nbytes: int, seconds: float, kind: str | None,
                    handle: RecordHandle | None) -> None:
        self.wal_write.labels(log).observe(seconds)
        self.wal_bytes.labels(log).inc(nbytes)
        if kind is not None:
            self.wal_events.labels(kind).inc()
        with self._lock:
            w = self._wals.setdefault(log, WalFigures(log))
            w.records += 1
            w.bytes += nbytes
            if handle is not None:
                w.last_topic = handle.topic
            if kind is not None:
                w.kinds[kind] = w.kinds.get(kind, 0) + 1

    def wal_cleaned(self, log: str, thresh_time_ms: int) -> None:
        with self._lock:
            w = self._wals.setdefault(log, WalFigures(log))
            w.clean_threshold_ms = max(w.clean_threshold_ms, thresh_time_ms)

    # -- listener events ---------------------------------------------------------

    def onBatchSubmitted(self, batchSubmitted: Any) -> None:  # noqa: N803
        info: BatchInfo = batchSubmitted.batchInfo()
        for s, n in info.num_records_per_stream.items():
            self.records_received.labels(str(s)).inc(n)

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803
        info: BatchInfo = batchCompleted.batchInfo()
        errors = [op.failure_reason for op in info.output_operations.values()
                  if op.failure_reason]
        if errors:
            self.batches_failed.inc()
        else:
            self.batches_completed.inc()
            self.records_processed.inc(info.numRecords())
            if not self._first_batch_seen:
                self._first_batch_seen = True
                first = max(0.0, time.time() - self.started_at)
                self.first_batch_seconds.set(first)
                with self._lock:
                    self.restart["first_batch_seconds"] = round(first, 3)
        total = info.totalDelay()
        self.last_processing.set(max(0, info.processingDelay()) / 1000)
        self.last_scheduling.set(max(0, info.schedulingDelay()) / 1000)
        self.last_total.set(max(0, total) / 1000)
        if total >= 0:
            self.total_delay.observe(total / 1000)
        record = BatchRecord(info.batch_time_ms, info.numRecords(),
                             dict(info.num_records_per_stream), info.schedulingDelay(),
                             info.processingDelay(), total,
                             "failed" if errors else "completed", "; ".join(errors)[:2000])
        with self._lock:
            self._batches.append(record)

    def onReceiverError(self, receiverError: Any) -> None:  # noqa: N803
        info = receiverError.receiverInfo()
        with self._lock:
            self._receiver_errors[info.streamId()] = (info.lastErrorMessage()[:2000],
                                                      time.time())

    # -- what the status page shows ----------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The status as JSON-ready data (``/api/status``)."""
        live = self.live()
        now = time.time()
        with self._lock:
            batches = [b.to_json() for b in self._batches]
            errors = dict(self._receiver_errors)
            wals = [{"name": w.name, "records": w.records, "bytes": w.bytes,
                     "clean_threshold_ms": w.clean_threshold_ms, "last_topic": w.last_topic,
                     "events": dict(sorted(w.kinds.items()))}
                    for w in sorted(self._wals.values(), key=lambda w: w.name)]
            restart = dict(self.restart)
        receivers = []
        for r in live.receivers:
            err, at = errors.get(r.stream_id, ("", 0.0))
            receivers.append({"stream": r.stream_id, "name": r.name, "state": r.state,
                              "host": r.host, "executor_id": r.executor_id,
                              "rate_limit": r.rate_limit, "last_error": err,
                              "last_error_time": at or None})
        return {
            "app_id": self.app_id, "started_at": self.started_at,
            "uptime_seconds": round(now - self.started_at, 3), "restart": restart,
            "totals": {"batches_completed": _value(self.batches_completed),
                       "batches_failed": _value(self.batches_failed),
                       "records_processed": _value(self.records_processed),
                       "batches_unprocessed": live.unprocessed,
                       "batches_running": live.running},
            "batches": batches, "receivers": receivers, "wal": wals,
            "kafka_lag": [{"topic": t, "partition": p, "lag": n}
                          for (t, p), n in sorted(self.kafka_lag().items())],
        }


def record_recovery(metrics: EngineMetrics, tracker: ReceivedBlockTracker,
                    stream_ids: list[int]) -> None:
    """The replay's figures, from the tracker's ``recovery_stats``. A restart is a
    replay that found anything: events, allocated batches or source positions."""
    stats = tracker.recovery_stats
    restarted = stats.events_replayed > 0 or bool(tracker.allocated_batch_times()) or any(
        tracker.positions(s) for s in stream_ids)
    metrics.recovered(stats.events_replayed, stats.seconds, restarted, stats.started_at_s)


def _value(counter: Counter) -> float:
    return next(s.value for m in counter.collect() for s in m.samples
                if s.name.endswith("_total"))


class MeteredWriteAheadLog(ForwardingWriteAheadLog):
    """A WAL whose writes and cleans are counted in ``metrics`` under ``log``."""

    def __init__(self, wrapped: WriteAheadLog, log: str, metrics: EngineMetrics) -> None:
        super().__init__(wrapped)
        self.log = log
        self.metrics = metrics

    def write(self, record: bytes, time_ms: int) -> RecordHandle:
        start = time.perf_counter()
        handle = super().write(record, time_ms)
        self.metrics.wal_written(self.log, len(record), time.perf_counter() - start,
                                 event_kind_of(record), handle)
        return handle

    def clean(self, thresh_time_ms: int, wait_for_completion: bool) -> None:
        super().clean(thresh_time_ms, wait_for_completion)
        self.metrics.wal_cleaned(self.log, thresh_time_ms)

