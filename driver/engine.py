"""StreamingEngine: the driver's moving parts wired together (what Spark's
JobScheduler owns): ReceivedBlockTracker over the driver WAL, ReceiverTracker
(gRPC endpoint + receivers as Spark jobs), JobGenerator, JobScheduler, the
listener bus and, with backpressure on, the rate controller.

The public ``driver.StreamingContext`` builds the DStream graph and drives this
engine; the engine knows nothing of DStreams: it asks ``generate_jobs(t)`` for a
batch's jobs.

Start protocol: construction builds objects only; :meth:`StreamingEngine.recover`
replays the driver WAL; :meth:`StreamingEngine.start` binds the endpoint, starts
the bus, launches the receivers and starts the job generator, in the order its
docstring numbers and justifies.

Stop protocol (graceful): (1) stop the receivers (each flushes its last blocks,
stored and reported); (2) keep generating batches until no block is unallocated;
(3) wait for the running batches; (4) stop the timer and the scheduler; (5) let
the context drain its checkpoint writer (the cleanups behind the last
checkpoints log to the driver WAL); (6) stop the endpoint and close the WAL.
Ungraceful: skip (2) and (3).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from walstream.driver.engine_config import EngineConfig
from walstream.driver.ha.errors import LeaseReleasedError
from walstream.driver.ha.output_gate import OutputGate
from walstream.driver.ha.tracker_tail import StandbyTracker
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.batch_info import BatchInfo, ReceiverInfo
from walstream.driver.scheduler.driver_wal import driver_wal_name, open_driver_wal
from walstream.driver.scheduler.job_generator import Checkpointer, JobGenerator
from walstream.driver.scheduler.job_scheduler import Job, JobScheduler
from walstream.driver.scheduler.listener import (
    ListenerBus,
    ReceiverEvent,
    StreamingListener,
    StreamingListenerReceiverError,
    StreamingListenerReceiverStarted,
    StreamingListenerStreamingStarted,
)
from walstream.driver.scheduler.rate_controller import PIDRateEstimator, RateController
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.scheduler.tracker_state import dump_recovered_state
from walstream.driver.ui.metrics import (
    EngineMetrics,
    Live,
    ReceiverFigures,
    record_recovery,
)
from walstream.driver.ui.status_server import StatusServer, serve_status
from walstream.receiver.block_info import BlockFigures, ReceivedBlockInfo
from walstream.receiver.receiver import Receiver
from walstream.receiver.supervisor_config import SupervisorConfig
from walstream.receiver.task import ReceiverTaskSpec
from walstream.wal import WriteAheadLog

log = logging.getLogger(__name__)

#: The longest a restart or takeover holds the receivers back for the first
#: resubmitted batch to complete (:meth:`StreamingEngine.start`, step 6).
RECEIVERS_AFTER_FIRST_BATCH_S = 2.0


class StreamingEngine:
    """The engine's life: construct, :meth:`recover`, :meth:`start`, :meth:`stop`.

    Construction only builds objects (the listener bus, the scheduler, the rate
    controller) and keeps the callbacks: no WAL is opened, no thread started, no
    port bound, so building an engine can neither fail on Kafka nor leave
    anything running. :meth:`recover` replays the driver WAL; :meth:`start` runs
    the remaining steps in the order its docstring gives.
    """

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
        self.config = config
        self.receivers = dict(receivers)
        self._stream_ids = sorted([*receivers, *(driver_stream_ids or [])])
        self._generate_jobs = generate_jobs
        self._checkpointer = checkpointer
        self._clear_metadata = clear_metadata
        self._before_allocate = before_allocate
        self._clean_driver_streams = clean_driver_streams
        self._on_fatal = on_fatal
        # Set by checkpointing: batches after this time must keep their data (the
        # oldest state a restart would restore); None = no such limit.
        self.keep_batches_after_ms: int | None = None
        self.bus = ListenerBus()
        # First on the bus: the metrics count every event a user's listener sees.
        self.metrics = EngineMetrics(config.app_id)
        if config.metrics_enabled:
            self.bus.add(self.metrics)
        self.status_server: StatusServer | None = None
        self.scheduler = JobScheduler(self.bus, config.concurrent_jobs,
                                      on_batch_completed=self._on_batch_completed)
        self.scheduler.output_gate = self._gate_output
        self.rate_controller: RateController | None = None
        if config.backpressure and receivers:
            self.rate_controller = RateController(
                PIDRateEstimator.from_conf(config.pid, config.batch_interval_ms),
                self._publish_rate, config.max_rate)
        # Built by recover() (they need the replayed tracker) and start() (the port).
        self._recover_lock = threading.Lock()
        self._tracker: ReceivedBlockTracker | None = None
        self._generator: JobGenerator | None = None
        self._receiver_tracker: ReceiverTracker | None = None
        # High availability: the lease epoch this engine leads (0 without HA), a
        # standby's tracker and tail, the lease check run before each WAL clean and
        # the lease's validity left (s), which bounds a receiver's clean grant.
        self.epoch = 0
        self._standby = StandbyTracker(self._driver_wal, self._stream_ids)
        self.lease_check: Callable[[], None] | None = None
        self.lease_validity: Callable[[], float] | None = None
        self.output_gate: OutputGate | None = None  # under HA: outputs only while leading
        self._started = False
        self._receiver_launch: threading.Thread | None = None  # after a restart (start, 6)
        self._stopped = threading.Event()
        self._wake = threading.Event()  # stopped, or a job failed

    # -- the parts recover() and start() build --------------------------------------

    @property
    def tracker(self) -> ReceivedBlockTracker:
        """The block tracker over the driver WAL. Read before :meth:`recover`, it
        recovers first: what it answers is always the replayed state."""
        if self._tracker is None:
            self.recover()
        assert self._tracker is not None
        return self._tracker

    @property
    def generator(self) -> JobGenerator:
        """The job generator over :attr:`tracker` (built with it by :meth:`recover`)."""
        if self._generator is None:
            self.recover()
        assert self._generator is not None
        return self._generator

    @property
    def receiver_tracker(self) -> ReceiverTracker:
        """The receiver endpoint; it exists once :meth:`start` bound its port."""
        if self._receiver_tracker is None:
            raise RuntimeError("StreamingEngine.start() has not bound the receiver endpoint yet")
        return self._receiver_tracker

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

    def receiver_wal_name(self, stream_id: int) -> str:
        """The WAL of stream ``stream_id``'s receiver (the metrics' ``log`` label)."""
        return f"{self.config.app_id}-receiver-{stream_id}"

    def _on_receiver_figures(self, info: ReceivedBlockInfo, figures: BlockFigures) -> None:
        """A receiver's figures, sent with a block the endpoint logged: the metrics'
        (under the WAL name the driver gave that stream, never one a receiver sent)."""
        if info.stream_id in self.receivers:
            self.metrics.receiver_reported(self.receiver_wal_name(info.stream_id),
                                           info.handle, figures)

    def _publish_rate(self, rate: float) -> None:
        for s in self.receivers:
            self.receiver_tracker.update_rate_limit(s, rate)

    def _on_batch_completed(self, info: BatchInfo) -> None:
        if self.rate_controller is not None:
            self.rate_controller.on_batch_completed(
                info.batch_time_ms, info.numRecords(), max(0, info.processingDelay()),
                max(0, info.schedulingDelay()))
        if self.config.metrics_enabled:
            self.metrics.batch_sources(self.tracker.get_blocks_of_batch(info.batch_time_ms))
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
        if self.lease_check is not None:
            # A clean deletes topics, which no epoch cut can undo: only while this
            # driver still holds the lease (checked right before; it raises if not).
            try:
                self.lease_check()
            except LeaseReleasedError:
                log.info("not cleaning below %d: this driver released its lease", thresh)
                return
        self.tracker.cleanup_old_batches(thresh, wait_for_completion=False)
        self.receiver_tracker.cleanup_old_blocks(thresh)
        if self.config.metrics_enabled:
            for s in self.receivers:
                self.metrics.wal_cleaned(self.receiver_wal_name(s), thresh)
        if self._clean_driver_streams is not None:
            self._clean_driver_streams(thresh)

    # -- lifecycle ---------------------------------------------------------------

    def recover(self) -> None:
        """Open the driver WAL and replay it into the block tracker, then build the job
        generator over that tracker; once (later calls return at once).

        A restarted driver gets its queues, its allocated batches and its receivers'
        source positions back here. Between this and :meth:`start` nothing adds a
        block or allocates a batch, so a caller may read :attr:`tracker` (a restart
        chooses the batches to resubmit from its allocations).

        A driver without high availability on a log that an earlier leader left at
        epoch ``e`` >= 1 (the app ran with HA before) continues epoch ``e``: it writes
        that epoch's log (in an older epoch's log its records would lie beyond the
        cut every reader stops at) and stamps ``e`` on its events, and
        :attr:`epoch` is ``e`` for the checkpoints and sinks, whose fences of ``e``
        would void epoch 0. No leader runs alongside it: HA is off for the app.
        """
        with self._recover_lock:
            if self._tracker is not None:
                return
            wal = self._driver_wal()
            tracker = ReceivedBlockTracker(self._stream_ids, wal)  # replays
            # The newest link, not only the replayed cut: a cleanup that passed the
            # cut's record removed it from the replay, while the link, never
            # cleaned, still names the epoch whose log is the one read whole.
            epoch = max(tracker.fence_epoch, wal.newest_epoch()) if self.config.ha is None else 0
            if epoch > 0:
                wal.resume_epoch(epoch)  # before anything is logged in this run
                tracker.start_epoch(epoch)  # its cut adopted, or logged again if cleaned
                self.epoch = epoch
                log.warning("driver WAL %s-driver was last led in epoch %d (high "
                            "availability is off now): this driver continues epoch %d",
                            self.config.app_id, epoch, epoch)
            record_recovery(self.metrics, tracker, self._stream_ids)
            dump_recovered_state(tracker.state())
            self._build_generator(tracker)

    def _driver_wal(self) -> WriteAheadLog:
        """The driver WAL (driver/scheduler/driver_wal.py): one log per lease epoch chained by
        the cut each new leader writes, where an old leader's late writes can never
        land before the cut; without HA and without links exactly the plain log. A
        chain all the same, so that a driver without HA reads what leaders of an
        earlier HA run logged (:meth:`recover`)."""
        return open_driver_wal(self.config.bootstrap_servers, self.config.app_id,
                               self.config.wal_options,
                               self.metrics if self.config.metrics_enabled else None,
                               delete_guard=self._check_leadership)

    def _build_generator(self, tracker: ReceivedBlockTracker) -> None:
        self._generator = JobGenerator(
            tracker, self.config.batch_interval_ms, self._generate_jobs, self.scheduler,
            cleanup=self._cleanup, checkpointer=self._checkpointer,
            before_allocate=self._before_allocate,
            allocate_retries=self.config.allocate_retries,
            allocate_backoff_ms=self.config.allocate_backoff_ms,
            on_fatal=self._on_fatal,
            driver_streams=[s for s in self._stream_ids if s not in self.receivers])
        self._tracker = tracker

    # -- high availability (driver/ha/high_availability.py drives these) ---------------------------

    def stand_by(self) -> None:
        """A hot standby's tracker: the driver WAL's chain replayed and then followed
        as the leader appends (driver/ha/tracker_tail.py); no generator, no endpoint.
        The driver WAL's epoch writer is connected meanwhile, in the background, so
        that a takeover does not wait for it."""
        self._follow()
        ha = self.config.ha
        threading.Thread(target=self._standby.prepare_epoch,
                         args=(ha.takeover_timeout_s if ha is not None else 30.0,),
                         name="driver-wal-prepare", daemon=True).start()

    def _follow(self) -> None:
        with self._recover_lock:
            if self._tracker is None:
                self._standby.follow()

    def take_over(self, epoch: int, timeout_s: float, claimed_at_s: float | None = None,
                  old_leader_last_seen_s: float | None = None) -> None:
        """Lead epoch ``epoch`` (won, sinks and checkpoints fenced by the caller):

        1. Stop following and read the driver WAL to its end: the tracker holds
           every event the old leader logged so far.
        2. Begin this epoch's log, its first record the cut: the end offsets of
           the log read in 1. An old leader's later writes land in its own log
           beyond those ends, which no reader takes.
        3. Log ``EpochStarted(epoch)`` in it; every event from now carries the epoch.
        4. Build the job generator over this tracker (its first batch timed from
           ``claimed_at_s``, wall seconds, when given, and from the old leader's last
           renewal read, ``old_leader_last_seen_s``); :meth:`start` follows.

        Steps 1-3 are :meth:`StandbyTracker.lead`."""
        self._follow()  # a leader from the start replays through the same path
        tracker = self._standby.lead(epoch, timeout_s)                         # 1-3
        self.epoch = epoch
        record_recovery(self.metrics, tracker, self._stream_ids)
        with self._recover_lock:
            self._build_generator(tracker)                                     # 4
        if claimed_at_s is not None:
            self.generator.restart_log.took_over(claimed_at_s, old_leader_last_seen_s)

    def live(self) -> Live:
        """What the metrics read when scraped: batches not done, receivers now."""
        pending = self.scheduler.pending_times()
        unprocessed = len(pending) - len(self.scheduler.failed_times())
        running = max(0, unprocessed - self.scheduler.waiting_count())
        rows = []
        endpoint = self._receiver_tracker
        if endpoint is not None:
            for s, info in sorted(endpoint.receivers.items()):
                rows.append(ReceiverFigures(s, type(self.receivers.get(s)).__name__,
                                            str(info.state), info.host, info.executor_id,
                                            info.rate_limit))
        return Live(max(0, unprocessed), running, tuple(rows))

    def _start_status_server(self) -> None:
        """Serve /metrics and the status page, unless the port is -1."""
        self.metrics.set_live(self.live)
        if self.config.ui_port >= 0 and self.config.metrics_enabled:
            self.status_server = serve_status(
                self.metrics, self.config.ui_host, self.config.ui_port,
                extra=lambda: {"batch_interval_ms": self.config.batch_interval_ms},
                state_dir=self.config.status_dir or None)

    def start(self, first_time_ms: int | None = None, resubmit: list[int] | None = None) -> int:
        """Start at ``first_time_ms`` (default: the next batch boundary) after
        regenerating the ``resubmit`` times; returns the first new batch time.

        The steps run in the order the durability protocol needs:

        1. Recover (:meth:`recover`, unless it ran): replay the driver WAL into the
           block tracker. Log-before-mutate holds across a restart only if the
           queues and allocations are the logged ones before anything can add a
           block or allocate a batch, and every later step can.
        2. Bind the receiver endpoint, with the application's credentials (and TLS
           when configured). After 1: it answers a registering receiver with the
           source positions the replay restored (where the receiver resumes) and
           logs the receiver's blocks to the replayed tracker. Before 4: the
           receivers' task specs carry its address and credentials.
        3. Start the listener bus and the job-error watch. Before 4 and 5 post
           events: an unstarted bus only queues, and drops what its bounded queue
           cannot hold. Before 5 submits jobs: a failing job wakes
           :meth:`await_termination`. With them the status server
           (:mod:`walstream.driver.ui.status_server`), after 2: its figures read the endpoint.
        4. Set each receiver's initial rate limit. Before 5: a completed batch may
           publish the rate controller's limit, which the initial one must not
           overwrite.
        5. Start the job generator: its loop regenerates the ``resubmit`` times in
           time order (from the allocations the replay restored), and only then
           does the timer post the first new batch, so it follows every resubmitted
           one. After 2: a completed batch's cleanup reaches the receivers through
           the endpoint.
        6. Launch the receivers. After 2 (the address) and 4. After a restart or a
           takeover, once the first resubmitted batch completed (waiting at most
           :data:`RECEIVERS_AFTER_FIRST_BATCH_S`): receivers starting at once keep
           the driver's threads and the cores busy for a few hundred milliseconds,
           which the first recovered batch would otherwise share. It needs none of
           their blocks (its own were stored before the crash), and nothing waits
           on them meanwhile: they resume from the positions the replay restored.
        7. Post StreamingStarted with the first new batch time (known only after 5).
        """
        self.recover()                                                          # 1
        endpoint = self._receiver_tracker = ReceiverTracker(                     # 2
            self.tracker, sorted(self.receivers),
            self.config.endpoint_bind_host or self.config.endpoint_host,
            self.config.endpoint_port, listener=self._on_receiver_event,
            advertised_host=self.config.endpoint_host,
            credentials=self.config.endpoint_credentials(self.epoch),
            tls=self.config.endpoint_tls,
            on_figures=self._on_receiver_figures if self.config.metrics_enabled else None)
        endpoint.leadership = self._check_leadership
        endpoint.leadership_validity = self._leadership_validity
        self.bus.start()                                                        # 3
        self._start_status_server()
        threading.Thread(target=self._watch_errors, name="job-error-watch", daemon=True).start()
        initial_rate = self.config.backpressure_initial_rate or self.config.max_rate
        if initial_rate > 0:                                                    # 4
            for s in self.receivers:
                endpoint.receivers[s].rate_limit = initial_rate
        if resubmit:                                                            # 5
            self.generator.resubmit(resubmit)
        first = self.generator.start(first_time_ms)
        self._started = True
        if resubmit:                                                            # 6
            self._receiver_launch = threading.Thread(
                target=self._launch_after_first_batch, args=(endpoint,),
                name="receiver-launch", daemon=True)
            self._receiver_launch.start()
        else:
            self._launch_receivers(endpoint)
        self.bus.post(StreamingListenerStreamingStarted(first))                 # 7
        return first

    def newest_wal_epoch(self) -> int:
        """The newest linked epoch of the driver WAL chain (0: no link), as a claim's
        floor: read from Kafka's topic list, not from this engine's state."""
        from walstream.wal.epoch_chain import EpochChainLog

        chain = EpochChainLog(self.config.bootstrap_servers, driver_wal_name(self.config.app_id),
                              **self.config.wal_options)
        try:
            return chain.newest_epoch()
        finally:
            chain.close()

    def _check_leadership(self) -> None:
        """Raise unless this engine may act for the application now: under HA the
        lease check (held, not released, fenced or run out); without HA, always."""
        check = self.lease_check
        if check is not None:
            check()

    def _gate_output(self, what: str) -> None:
        gate = self.output_gate
        if gate is not None:
            gate(what)

    def _leadership_validity(self) -> float | None:
        """Seconds this engine is certain to keep leading; None without HA."""
        validity = self.lease_validity
        return None if validity is None else validity()

    def _launch_after_first_batch(self, endpoint: ReceiverTracker) -> None:
        self.generator.first_batch_done.wait(RECEIVERS_AFTER_FIRST_BATCH_S)
        self._launch_receivers(endpoint)  # after stop_all_receivers: each ends at once

    def _launch_receivers(self, endpoint: ReceiverTracker) -> None:
        """One long-running Spark job per receiver, each registering at ``endpoint`` with
        its credentials (and the rate limit set on it); the endpoint binds each stream
        to the WAL named here."""
        specs = []
        for s, r in sorted(self.receivers.items()):
            specs.append(ReceiverTaskSpec(
                s, r, endpoint.address, self.config.bootstrap_servers,
                self.receiver_wal_name(s),
                self.config.generator_config(),
                SupervisorConfig(send_figures=self.config.metrics_enabled),
                self.config.wal_options,
                endpoint.credentials))
        endpoint.start_all_receivers(self.sc, specs, self.config.relaunch_delay_s)

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
                if self._receiver_launch is not None:  # launched (or not) before they stop
                    self.generator.first_batch_done.set()
                    self._receiver_launch.join(timeout_s)
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
            # The private fields: stopping an engine that never recovered or started
            # must not replay the WAL or bind the port only to close them.
            if self.status_server is not None:
                self.status_server.stop()
            if self._receiver_tracker is not None:
                self._receiver_tracker.stop()
            self.bus.stop()
            if self._tracker is not None:
                if self._standby.tail is not None:
                    self._standby.tail.close()
                self._tracker.stop()  # closes the WAL a takeover continued
            else:
                self._standby.close()
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
