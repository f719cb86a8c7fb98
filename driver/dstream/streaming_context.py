"""StreamingContext with PySpark's API, running on this project's engine.

Port an app by changing ``from pyspark.streaming import StreamingContext`` to
``from walstream.driver import StreamingContext``. Receivers write to Kafka WALs, the
driver logs its tracker to Kafka, and every batch runs on the given
SparkContext. Kafka: ``spark.walstream.kafka.bootstrapServers`` (conf), else
``KAFKA_BOOTSTRAP_SERVERS``, else a running embedded broker, else one started
detached (it outlives this driver, so a restarted driver finds its WALs).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any, ClassVar

from pyspark.storagelevel import StorageLevel

from walstream.broker import default_home
from walstream.checkpoint.data import CheckpointData
from walstream.checkpoint.errors import CheckpointFencedError
from walstream.checkpoint.files import write_clean_mark
from walstream.checkpoint.storage import prepare_directory
from walstream.checkpoint.writer import CheckpointWriter
from walstream.driver.app_conf import app_id_for, resolve_bootstrap
from walstream.driver.driver_gc import PeriodicDriverGC
from walstream.driver.dstream.block_rdd import union_rdds
from walstream.driver.dstream.driver_read_inputs import (
    DriverReadInputDStream,
    before_allocate,
    clean_driver_streams,
    log_ends,
)
from walstream.driver.dstream.dstream import DStream, InputDStream
from walstream.driver.dstream.graph import DStreamGraph
from walstream.driver.dstream.graph_pickle import dumps_graph, pickle_graph
from walstream.driver.dstream.recovery import (
    POLICY_KEY,
    ContextView,
    build_checkpoint,
    get_or_create,
    restore_state,
    state_floor,
    times_to_resubmit,
)
from walstream.driver.durations import to_ms
from walstream.driver.engine import StreamingEngine
from walstream.driver.engine_config import EngineConfig
from walstream.driver.errors import JobFailedError
from walstream.driver.ha.takeover import Takeover
from walstream.driver.python_sockets import prefer_unix_sockets
from walstream.driver.scheduler.listener import StreamingListener
from walstream.driver.ui.status_server import state_file_dir
from walstream.driver.warm_up import warm_up_workers
from walstream.errors import ConfigError
from walstream.killpoints import kill_point
from walstream.log_format import apply_log_format

log = logging.getLogger(__name__)

#: How long awaitTermination lets a context stopping on an error finish stopping.
FATAL_STOP_WAIT_S = 30.0
#: How long it waits for that stop to begin (it begins right after the error).
FATAL_STOP_APPEARS_S = 2.0


class StreamingContextState(StrEnum):
    """Spark's ``StreamingContextState``: a context starts once and stops once."""

    INITIALIZED = "initialized"
    ACTIVE = "active"
    STOPPED = "stopped"


class StreamingContext:
    """PySpark's StreamingContext: ``StreamingContext(sparkContext, batchDuration)``."""

    _active: ClassVar[StreamingContext | None] = None
    _active_lock: ClassVar[threading.RLock] = threading.RLock()

    def __init__(self, sparkContext: Any, batchDuration: float | None = None,  # noqa: N803
                 jssc: Any = None) -> None:
        if batchDuration is None:
            raise ConfigError("batchDuration (seconds) is required")
        self._sc = sparkContext
        self._batch_ms = to_ms(batchDuration, "batchDuration")
        # Before the first batch's Python tasks: each of them would otherwise wait
        # on a delayed ACK (driver/python_sockets.py).
        prefer_unix_sockets(sparkContext)
        self._graph = DStreamGraph(self._batch_ms)
        self._checkpoint_dir: str | None = None
        self._state = StreamingContextState.INITIALIZED
        self._engine: StreamingEngine | None = None
        self._driver_gc: PeriodicDriverGC | None = None
        self._listeners: list[StreamingListener] = []
        self._receiver_count = 0
        self._recovered: CheckpointData | None = None  # set by getOrCreate (resume_from)
        self._checkpoint_writer: CheckpointWriter | None = None
        self._takeover: Takeover | None = None  # under high availability
        self._graph_bytes: bytes | bool | None = False  # False: not pickled yet
        self._stopped_on_error = False  # stopped by the engine's fatal error, not by stop()
        self._fatal_stops: dict[int, threading.Thread] = {}  # id(error) -> its stop

    def _pickled_graph(self) -> bytes | None:
        """The graph for checkpoints, pickled once: after start it no longer changes
        (generated RDDs are not part of it)."""
        if self._graph_bytes is False:
            self._graph_bytes = dumps_graph(self._graph)
        return self._graph_bytes if isinstance(self._graph_bytes, bytes) else None

    @classmethod
    def _around_graph(cls, sparkContext: Any, batch_ms: int,  # noqa: N803
                      graph: DStreamGraph) -> StreamingContext:
        """A context whose graph is one restored from a checkpoint."""
        ssc = cls(sparkContext, batch_ms / 1000)
        if graph.batch_ms != ssc._batch_ms:
            raise ConfigError(f"the graph's batch duration {graph.batch_ms} ms is not the "
                              f"context's {ssc._batch_ms} ms")
        for stream in graph.streams:
            stream._ssc = ssc
        ssc._graph = graph
        ids = [s.stream_id for s in graph.streams if isinstance(s, InputDStream)]
        ssc._receiver_count = max(ids, default=-1) + 1
        return ssc

    # -- what recovery sees of this context (recovery.RecoverableContext) --------------

    def recovery_view(self) -> ContextView:
        """The graph, batch duration, conf and checkpoint directory, for recovery."""
        return ContextView(self._graph, self._batch_ms, self._conf(), self._checkpoint_dir)

    def resume_from(self, data: CheckpointData) -> None:
        """Make the next ``start()`` a restart from checkpoint ``data``."""
        self._recovered = data

    # -- context management --------------------------------------------------------

    @classmethod
    def getOrCreate(cls, checkpointPath: str,  # noqa: N802, N803
                    setupFunc: Callable[[], StreamingContext]) -> StreamingContext:  # noqa: N803
        """The context from the checkpoint at ``checkpointPath``, else ``setupFunc()``."""
        ssc: StreamingContext = get_or_create(checkpointPath, setupFunc, cls._around_graph)
        return ssc

    @classmethod
    def getActive(cls) -> StreamingContext | None:  # noqa: N802
        with cls._active_lock:
            return cls._active

    @classmethod
    def getActiveOrCreate(cls, checkpointPath: str | None,  # noqa: N802, N803
                          setupFunc: Callable[[], StreamingContext]) -> StreamingContext:  # noqa: N803
        with cls._active_lock:
            if cls._active is not None:
                return cls._active
            if checkpointPath is not None:
                return cls.getOrCreate(checkpointPath, setupFunc)
            return setupFunc()

    @property
    def sparkContext(self) -> Any:  # noqa: N802
        return self._sc

    def _check_can_add_streams(self) -> None:
        if self._state is not StreamingContextState.INITIALIZED:
            done = "starting" if self._state is StreamingContextState.ACTIVE else "stopping"
            raise ConfigError("Adding new inputs, transformations, and output operations "
                              f"after {done} a context is not supported")

    def _default_parallelism(self) -> int:
        return int(self._sc.defaultParallelism)

    def _next_receiver_id(self) -> int:
        self._receiver_count += 1
        return self._receiver_count - 1

    def _conf(self) -> dict[str, str]:
        return {k: v for k, v in self._sc.getConf().getAll()}

    def _app_id(self, conf: dict[str, str]) -> str:
        return app_id_for(conf, self._checkpoint_dir, str(self._sc.appName))

    def start(self) -> None:
        """Start the streams. The steps run in the order the durability protocol needs:

        1. Check that this context may start: once, and one active context per driver.
        2. Validate the graph and, with checkpointing on, pickle it: a graph that could
           not recover fails here, before any WAL, port or thread exists.
        3. Build the engine's config from the Spark conf (bad settings fail here too) and
           warm the executors' Python workers (that overlaps the replay in step 6).
        4. Construct the checkpoint writer and the engine.
        5. Replay the driver WAL into the block tracker: the queues and allocations are
           the logged ones before anything can add to them.
        6. Initialize the graph at its zero time: the checkpoint's on a restart, so
           windows land on the same times as before the crash; the engine then
           remembers as long as the graph needs.
        7. On a restart, restore the state RDDs and choose the batches to resubmit.
           Step 5 comes first because a batch allocated (logged) after the last
           durable checkpoint is pending whatever the down-time policy says.
        8. Start the engine at the first new batch time: endpoint, receivers, timer.
        9. Start the periodic driver GC; the context is active.

        With ``spark.walstream.ha.enabled=true`` steps 5-8 run only once this process
        leads (driver/ha/high_availability.py): a standby builds the engine (4) and
        follows the driver WAL until it takes over; a leader runs 5-8 after fencing.
        """
        with StreamingContext._active_lock:
            self._check_can_start()                                     # 1
            self._validate_graph()                                      # 2
            conf = self._conf()
            apply_log_format(conf)  # the app's log format before anything logs
            cfg = self._engine_config(conf)                             # 3
            if cfg.ha is not None and self._checkpoint_dir is None:
                # A takeover re-runs the old leader's pending batches and restores its
                # state from checkpoints: without them it would silently drop both.
                raise ConfigError(
                    "spark.walstream.ha.enabled=true needs a checkpoint directory "
                    "(StreamingContext.checkpoint(dir) or getOrCreate(dir, setup)): a "
                    "standby takes over the leader's pending batches and state from it")
            warm_up_workers(self._sc, conf)
            if cfg.ha is not None:
                self._engine = self._build_engine(cfg)
                self._takeover = Takeover(
                    self._sc, self._graph, self._checkpoint_dir, self._recovered,
                    recovery_view=self.recovery_view, run_engine=self._run_engine,
                    use_checkpoint_writer=self._use_checkpoint_writer,
                    on_checkpoint_error=self._on_checkpoint_error,
                    on_lost=self._on_lease_lost)
                self._takeover.start(self._engine, cfg, conf)
            else:
                self._engine = self._build_engine(cfg)                  # 4
                self._engine.recover()                                  # 5
                self._continue_epoch(self._engine.epoch)
                self._run_engine(self._recovered, conf)                 # 6, 7, 8
            self._driver_gc = PeriodicDriverGC.start_for(self._sc, conf)  # 9
            self._state = StreamingContextState.ACTIVE
            StreamingContext._active = self

    def _continue_epoch(self, epoch: int) -> None:
        """Without HA: write checkpoints and sink output in ``epoch``, the one the
        driver WAL was last led in (0 if never), so that an app run with HA before
        is not voided by its own earlier fences. A checkpoint directory fenced by a
        newer epoch than the WAL's belongs to a takeover that never finished: that
        is an error, not something to write past."""
        from walstream.checkpoint.fence_files import highest_fence
        from walstream.driver.sink.kafka_sink import set_sink_epoch

        if self._checkpoint_dir is not None and self._checkpoint_writer is not None:
            fenced = highest_fence(self._checkpoint_dir)
            if fenced > epoch:
                raise ConfigError(
                    f"checkpoint directory {self._checkpoint_dir} is fenced by epoch "
                    f"{fenced}, but the driver WAL was last led in epoch {epoch}: a "
                    "takeover did not finish. Start the app once with "
                    "spark.walstream.ha.enabled=true to complete it")
            self._checkpoint_writer.epoch = epoch  # nothing is written before start
        set_sink_epoch(epoch)

    def _run_engine(self, data: CheckpointData | None, conf: dict[str, str]) -> None:
        """Steps 6, 7 and 8 of :meth:`start` over the recovered engine: the graph at
        its zero time (the checkpoint's on a restart), the restored state and the
        batches to resubmit, then the engine started at the next batch time."""
        engine = self._engine
        assert engine is not None
        first = (int(time.time() * 1000) // self._batch_ms + 1) * self._batch_ms
        self._graph.initialize(data.zero_time_ms if data else first - self._batch_ms)  # 6
        engine.config = dataclasses.replace(engine.config,
                                            remember_ms=self._graph.max_remember_ms())
        resubmit: list[int] = []
        if data is not None:                                            # 7
            restore_state(self._sc, self._graph, data)
            resubmit = times_to_resubmit(data, first, conf.get(POLICY_KEY, "all"),
                                         engine.tracker.allocated_batch_times())
        engine.start(first, resubmit=resubmit)                          # 8

    def _check_can_start(self) -> None:
        if self._state is StreamingContextState.ACTIVE:
            raise ConfigError("StreamingContext has already been started")
        if self._state is StreamingContextState.STOPPED:
            raise ConfigError("StreamingContext has already been stopped")
        if StreamingContext._active is not None:
            raise ConfigError("Only one StreamingContext may be started in this JVM. "
                              "Currently running StreamingContext was started at "
                              f"{StreamingContext._active}")

    def _validate_graph(self) -> None:
        # As Spark (DStream.validateAtStart): the SparkContext's checkpoint directory
        # is what state and inverse windows need; ssc.checkpoint() sets it too.
        self._graph.validate(self._checkpoint_dir or self._sc.getCheckpointDir())
        # As Spark's start() serializes its checkpoint: a graph that cannot go into
        # checkpoints raises here, naming the function. The bytes checkpoints hold
        # are pickled again after initialize() (what the streams set up there is part
        # of them); None (a queueStream, warned about) stays None.
        if self._checkpoint_dir is not None and pickle_graph(self._graph) is None:
            self._graph_bytes = None

    def _engine_config(self, conf: dict[str, str]) -> EngineConfig:
        return EngineConfig.from_spark_conf(
            conf, app_id=self._app_id(conf), batch_interval_ms=self._batch_ms,
            bootstrap_servers=resolve_bootstrap(conf), remember_ms=0,
            status_dir=state_file_dir(self._checkpoint_dir, str(default_home())))

    def _build_engine(self, cfg: EngineConfig) -> StreamingEngine:
        """The checkpoint writer and the engine, wired to the graph; nothing runs yet."""
        from walstream.driver.dstream.receiver_input_stream import ReceiverInputDStream

        receivers = {s.stream_id: s.receiver for s in self._graph.streams
                     if isinstance(s, ReceiverInputDStream)}
        direct = self._driver_streams()
        checkpointer = None
        if self._checkpoint_dir is not None:
            # A checkpoint that cannot be written stops the app like a failed job
            # (awaitTermination raises it): running on without checkpoints would
            # silently lose recoverability.
            self._checkpoint_writer = CheckpointWriter(
                self._checkpoint_dir, on_error=self._on_checkpoint_error)
            checkpointer = self._write_checkpoint
        engine = StreamingEngine(
            self._sc, cfg, receivers, self._graph.generate_jobs,
            clear_metadata=self._graph.clear_metadata, checkpointer=checkpointer,
            driver_stream_ids=[d.stream_id for d in direct],
            before_allocate=functools.partial(before_allocate, direct),
            clean_driver_streams=functools.partial(clean_driver_streams, direct),
            on_fatal=self._stop_on_fatal_error)
        engine.metrics.set_source_ends(functools.partial(log_ends, direct))
        for listener in self._listeners:
            engine.add_listener(listener)
        return engine

    def _stop_on_fatal_error(self, exc: BaseException) -> None:
        """The engine cannot go on (a batch could not be prepared): stop, as Spark
        stops a context whose Python side died. On a thread of its own, because the
        caller is the job generator's loop, which ``stop()`` joins. The SparkContext
        stays up until the application's own ``stop()`` (awaitTermination raised)."""
        def stop() -> None:
            log.error("stopping the StreamingContext: %s", exc)
            with StreamingContext._active_lock:
                if self._state is StreamingContextState.ACTIVE:
                    self._stopped_on_error = True
                    self.stop(stopSparkContext=False)

        thread = threading.Thread(target=stop, name="stop-streaming-context", daemon=True)
        thread.start()
        self._fatal_stops[id(exc)] = thread  # once started: awaitTermination joins it

    @property
    def ha_role(self) -> str:
        """``leader`` or ``standby`` under high availability once started, else ``none``."""
        return self._takeover.role if self._takeover is not None else "none"

    def _use_checkpoint_writer(self, writer: CheckpointWriter) -> None:
        self._checkpoint_writer = writer

    def _on_lease_lost(self, exc: BaseException) -> None:
        """This driver no longer leads (fenced, or it could not renew) or could not take
        over: ``awaitTermination`` raises ``exc`` and the context stops; nothing it
        would still write counts (the epoch cuts)."""
        engine = self._engine
        if engine is not None:
            # At once, on the thread that saw the lease end: a job in flight must not
            # complete its output operation after another leader may have run it.
            try:
                self._sc.cancelAllJobs()
            except Exception:
                log.exception("high availability: cancelling the running jobs failed")
            engine.scheduler.report_error("high availability", exc, original=True)
        self._stop_on_fatal_error(exc)

    def _stop_takeover(self) -> None:
        if self._takeover is not None:
            self._takeover.stop()

    def _on_checkpoint_error(self, exc: BaseException) -> None:
        if isinstance(exc, CheckpointFencedError):
            self._on_lease_lost(exc)  # a newer leader fenced the checkpoints
        elif self._engine is not None:
            self._engine.scheduler.report_error("checkpoint failed", exc)

    def _write_checkpoint(self, t: int, on_done: Callable[[], None] | None) -> None:
        """After generating batch ``t`` (pending) and after it completed (then clean)."""
        engine, writer = self._engine, self._checkpoint_writer
        if engine is None or writer is None:
            return
        pending = engine.generator.pending_times()
        if on_done is None and t not in pending:
            pending.append(t)  # generated, maybe not yet submitted
        data = build_checkpoint(self._graph, t, pending, app_id=engine.config.app_id,
                                conf=self._conf(), graph_bytes=self._pickled_graph())
        done = on_done
        if on_done is not None:
            floor = state_floor(self._graph, data)

            def done() -> None:
                # This checkpoint is durable: a restart restores state from its state
                # RDDs and recomputes the batches after them, so cleanup must keep
                # those batches' data (the engine caps its threshold at the floor).
                engine.keep_batches_after_ms = floor
                # The mark first: once the cleanup runs, no checkpoint older than this
                # one may be restored (a reader falling back past a damaged newest one
                # would find its blocks gone); a failed mark stops the cleanup.
                if self._checkpoint_dir is not None:
                    write_clean_mark(self._checkpoint_dir, t)
                on_done()

        writer.write(data, done)

    def awaitTermination(self, timeout: float | None = None) -> None:  # noqa: N802
        self._await_termination(timeout)

    def awaitTerminationOrTimeout(self, timeout: float) -> bool:  # noqa: N802
        return self._await_termination(timeout)

    def _await_termination(self, timeout: float | None) -> bool:
        """The engine's wait; an error that stops the context (not a failed job, which
        Spark's awaitTermination also raises while the context runs on) is raised
        only once that stop has finished, bounded by ``FATAL_STOP_WAIT_S``: a script
        that ends on it then finds the context stopped, nothing left running."""
        engine = self._engine
        if engine is None:
            raise ConfigError("the StreamingContext has not been started")
        try:
            return engine.await_termination(timeout)
        except JobFailedError:
            raise
        except BaseException as exc:
            self._wait_for_fatal_stop(exc)
            raise

    def _wait_for_fatal_stop(self, exc: BaseException) -> None:
        deadline = time.monotonic() + FATAL_STOP_WAIT_S
        # The stop starts right after the error is reported, on its own thread.
        appear_by = time.monotonic() + FATAL_STOP_APPEARS_S
        while id(exc) not in self._fatal_stops and time.monotonic() < appear_by:
            time.sleep(0.01)
        thread = self._fatal_stops.get(id(exc))
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.error("the StreamingContext did not stop within %.0f s of: %s",
                          FATAL_STOP_WAIT_S, exc)

    def stop(self, stopSparkContext: bool = True,  # noqa: N803
             stopGraceFully: bool = False) -> None:  # noqa: N803
        with StreamingContext._active_lock:
            if self._state is StreamingContextState.STOPPED:
                if stopSparkContext and self._stopped_on_error:
                    # As Spark's stop() of a stopped context: the SparkContext still stops.
                    self._stopped_on_error = False
                    self._sc.stop()
                return
            leading = self.ha_role == "leader"
            try:
                if not leading:
                    # A standby stops watching first: it must not take over while
                    # it stops.
                    self._stop_takeover()
                if self._driver_gc is not None:
                    self._driver_gc.stop()
                if self._engine is not None:
                    # The checkpoint writer drains before the engine closes the WAL:
                    # the queued checkpoints' cleanups log to it. The engine stops the
                    # receivers first, so their last blocks are logged (or refused)
                    # while this driver still leads.
                    self._engine.stop(graceful=stopGraceFully,
                                      before_close=self._stop_checkpoint_writer)
                self._stop_checkpoint_writer()
                if leading:
                    # A leader releases only now: its receivers are stopped and what
                    # they reported is in its epoch's log, before the next leader's
                    # cut. Released earlier, their last blocks would be logged past
                    # that cut and counted by no batch, yet acknowledged.
                    kill_point("ha.before_release")
            finally:
                if leading:
                    self._stop_takeover()
                self._close_direct_streams()
                self._state = StreamingContextState.STOPPED
                if StreamingContext._active is self:
                    StreamingContext._active = None
                if stopSparkContext:
                    self._sc.stop()

    def _stop_checkpoint_writer(self) -> None:
        """Write the queued checkpoints and run their cleanups, then stop the writer
        (once; a checkpoint asked for later is not written)."""
        writer, self._checkpoint_writer = self._checkpoint_writer, None
        if writer is not None:
            writer.stop()

    def _driver_streams(self) -> list[DriverReadInputDStream]:
        """Inputs whose batches the driver decides and logs itself (direct Kafka, files)."""
        return [s for s in self._graph.streams if isinstance(s, DriverReadInputDStream)]

    def _close_direct_streams(self) -> None:
        for stream in self._driver_streams():
            try:
                stream.close()
            except Exception:
                log.exception("closing the Kafka clients of %r failed", stream)

    def remember(self, duration: float) -> None:
        self._graph.remember_ms = to_ms(duration, "remember duration")

    def checkpoint(self, directory: str) -> None:
        prepare_directory(directory)  # 0700 (and rdds/), before Spark makes them 0755
        self._checkpoint_dir = directory
        self._sc.setCheckpointDir(os.path.join(directory, "rdds") if "://" not in directory
                                  else directory.rstrip("/") + "/rdds")

    def addStreamingListener(self, streamingListener: StreamingListener) -> None:  # noqa: N802, N803
        self._listeners.append(streamingListener)
        if self._engine is not None:
            self._engine.add_listener(streamingListener)

    # -- input streams -------------------------------------------------------------

    def receiverStream(self, receiver: Any) -> DStream:  # noqa: N802
        from walstream.driver.dstream.receiver_input_stream import ReceiverInputDStream

        return ReceiverInputDStream(self, receiver, type(receiver).__name__)

    def socketTextStream(self, hostname: str, port: int,  # noqa: N802
                         storageLevel: StorageLevel = StorageLevel.MEMORY_AND_DISK_2,  # noqa: N803
                         ) -> DStream:
        """Lines from TCP; ``storageLevel`` is accepted for compatibility (the Kafka WAL
        replaces Spark's replicated block storage)."""
        from walstream.receiver.socket_receiver import SocketTextReceiver

        return self.receiverStream(SocketTextReceiver(hostname, port))

    def textFileStream(self, directory: str) -> DStream:  # noqa: N802
        from walstream.driver.dstream.file_stream import FileInputDStream

        return FileInputDStream(self, directory)

    def binaryRecordsStream(self, directory: str, recordLength: int) -> DStream:  # noqa: N802, N803
        from walstream.driver.dstream.file_stream import FileInputDStream

        if recordLength <= 0:
            raise ConfigError("recordLength must be positive")
        return FileInputDStream(self, directory, recordLength)

    def queueStream(self, rdds: list[Any], oneAtATime: bool = True,  # noqa: N802, N803
                    default: Any = None) -> DStream:
        from walstream.driver.dstream.receiver_input_stream import QueueInputDStream

        sc = self._sc
        rdds = [r if hasattr(r, "mapPartitions") else sc.parallelize(list(r)) for r in rdds]
        if default is not None and not hasattr(default, "mapPartitions"):
            default = sc.parallelize(list(default))
        return QueueInputDStream(self, rdds, oneAtATime, default)

    def transform(self, dstreams: list[DStream],
                  transformFunc: Callable[..., Any]) -> DStream:  # noqa: N803
        from walstream.driver.dstream.dstream import _arity
        from walstream.driver.dstream.dstream_kinds import MultiTransformedDStream

        if _arity(transformFunc) == 1:
            return MultiTransformedDStream(list(dstreams), lambda t, *rdds: transformFunc(
                list(rdds)))
        return MultiTransformedDStream(list(dstreams), lambda t, *rdds: transformFunc(
            t, list(rdds)))

    def union(self, *dstreams: DStream) -> DStream:
        from walstream.driver.dstream.dstream_kinds import MultiTransformedDStream

        if not dstreams:
            raise ConfigError("should have at least one DStream to union")
        if len(dstreams) == 1:
            return dstreams[0]
        if len({d._slide_ms for d in dstreams}) != 1:
            raise ConfigError("All DStreams should have same slide duration")
        # The RDDs' own context, not a captured SparkContext: the function goes into
        # checkpoints with the graph.
        return MultiTransformedDStream(list(dstreams), lambda t, *rdds: union_rdds(rdds))
