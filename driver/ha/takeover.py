"""The StreamingContext's side of high availability
(driver/ha/high_availability.py): how ``start()`` becomes a leader or a hot
standby, and what a new leader does before its first batch.

Kept apart from driver/dstream/streaming_context.py, whose ``StreamingContext`` mixes
:class:`HighAvailabilityMixin` in; nothing here runs without
``spark.walstream.ha.enabled=true``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from walstream.checkpoint.data import CheckpointData
from walstream.checkpoint.fence_files import highest_fence, write_fence
from walstream.checkpoint.files import read_latest
from walstream.checkpoint.writer import CheckpointWriter
from walstream.driver.dstream.recovery import check_compatible
from walstream.driver.engine_config import EngineConfig
from walstream.driver.ha.high_availability import HighAvailability
from walstream.driver.ha.output_gate import OutputGate
from walstream.driver.sink.kafka_sink import fence_sinks, graph_sink_writers, set_sink_epoch
from walstream.driver.warm_up import keep_warm
from walstream.kafka_settings import settings_from_conf
from walstream.killpoints import kill_point

if TYPE_CHECKING:
    from walstream.driver.dstream.graph import DStreamGraph
    from walstream.driver.engine import StreamingEngine

log = logging.getLogger(__name__)

#: How often a standby reads the newest checkpoint while standing by.
CHECKPOINT_RELOAD_S = 5.0


class HighAvailabilityMixin:
    """Leader-or-standby start and the takeover steps 2-5 of driver/ha/high_availability.py."""

    _engine: StreamingEngine | None
    _graph: DStreamGraph
    _checkpoint_dir: str | None
    _checkpoint_writer: CheckpointWriter | None
    _recovered: CheckpointData | None
    _ha: HighAvailability | None = None
    _ha_lock: threading.Lock
    _ha_standing_by: threading.Event | None = None
    _sc: Any

    if TYPE_CHECKING:  # provided by StreamingContext
        def _build_engine(self, cfg: EngineConfig) -> StreamingEngine: ...
        def _run_engine(self, data: CheckpointData | None, conf: dict[str, str]) -> None: ...
        def _on_checkpoint_error(self, exc: BaseException) -> None: ...
        def _stop_on_fatal_error(self, exc: BaseException) -> None: ...
        def recovery_view(self) -> Any: ...

    def _start_highly_available(self, cfg: EngineConfig, conf: dict[str, str]) -> None:
        """Build the engine, then lead (takeover steps run now) or stand by."""
        assert cfg.ha is not None
        self._ha_lock = threading.Lock()
        engine = self._engine = self._build_engine(cfg)
        self._ha = HighAvailability(
            cfg.ha, cfg.bootstrap_servers, conf,
            lead=lambda epoch: self._lead(epoch, conf), stand_by=engine.stand_by,
            on_lost=self._on_lease_lost, floor=self._epoch_floor)
        role = self._ha.start()
        log.info("high availability: this driver is the %s", role)
        if role == "standby":
            stop = self._ha_standing_by = threading.Event()
            keep_warm(self._sc, conf, stop)
            if self._checkpoint_dir is not None:
                threading.Thread(target=self._reload_checkpoints, args=(stop,),
                                 daemon=True, name="ha-checkpoint-reload").start()

    def _epoch_floor(self) -> int:
        """The highest epoch this application used that its lease log may have lost:
        the newest linked epoch of its driver WAL chain and the newest checkpoint
        fence. (Its sink fences are written by the same takeover before either, so
        they are at most one above: a claim above the floor is at least as high.)"""
        engine = self._engine
        assert engine is not None
        floor = engine.newest_wal_epoch()
        if self._checkpoint_dir is not None:
            floor = max(floor, highest_fence(self._checkpoint_dir))
        return floor

    def _reload_checkpoints(self, stop: threading.Event) -> None:
        """While standing by, keep the newest checkpoint the leader wrote read and
        checked against this process's graph: a standby whose code cannot restore
        the leader's checkpoints stops now, with the reason, instead of failing at
        its takeover; and the takeover finds the files it reads again warm. Only the
        takeover's own read, after the fence, decides what is restored."""
        assert self._checkpoint_dir is not None
        while not stop.wait(CHECKPOINT_RELOAD_S):
            try:
                data = read_latest(self._checkpoint_dir)
            except Exception as exc:  # unreadable now; the takeover reads it again
                log.warning("standby: reading the newest checkpoint failed: %s", exc)
                continue
            if data is None:
                continue
            error: BaseException | None = None
            with self._ha_lock:
                if stop.is_set():
                    return
                try:
                    self._adopt(data)
                except Exception as exc:
                    error = exc
            if error is not None:
                log.error("standby: this application cannot restore the leader's "
                          "checkpoint of %d: %s", data.checkpoint_time_ms, error)
                self._on_lease_lost(error)
                return

    def _adopt(self, data: CheckpointData) -> None:
        """Make ``data`` the checkpoint to restore, once checked against this graph
        (raises if it cannot be restored); the one held already is not checked again.

        Held means the same content, not the same name: a batch time is
        checkpointed twice under one name (generated, then completed, with fewer
        pending batches and newer state), and a takeover must restore the newest
        content the fence admits, or it re-runs done batches on state that is not
        theirs."""
        have = self._recovered
        if have is not None and have == data:
            return
        check_compatible(self.recovery_view(), data)
        self._recovered = data

    def _lead(self, epoch: int, conf: dict[str, str]) -> None:
        """Takeover steps 2-5 of driver/ha/high_availability.py for ``epoch`` (won in step 1)."""
        engine, ha = self._engine, self._ha
        assert engine is not None and ha is not None
        if self._ha_standing_by is not None:
            self._ha_standing_by.set()  # no more keep-warm jobs or checkpoint reads
        with self._ha_lock:
            # Each kill point below leaves a takeover half done; the next claimant
            # takes over from there (integration_tests/test_ha_kill_points.py).
            kill_point("ha.after_claim")
            claimed_at_s = time.time()
            timeout_s = ha.config.takeover_timeout_s
            engine.lease_check = ha.check
            engine.lease_validity = ha.valid_for
            engine.output_gate = OutputGate(ha.check, ha.valid_for, ha.config.output_margin)
            set_sink_epoch(epoch)
            steps = [time.monotonic()]
            sinks = graph_sink_writers([out._func for out in self._graph.outputs],
                                       engine.config.app_id)
            if sinks:                                                           # 2
                fence_sinks(sinks, epoch, kafka_conf=settings_from_conf(conf),
                            timeout_s=timeout_s)
            steps.append(time.monotonic())
            kill_point("ha.after_sink_fence")
            data = self._recovered
            if self._checkpoint_dir is not None:                                # 3
                write_fence(self._checkpoint_dir, epoch)
                self._checkpoint_writer = CheckpointWriter(
                    self._checkpoint_dir, on_error=self._on_checkpoint_error, epoch=epoch)
                # The newest checkpoint the fence admits: the old leader may have
                # written several since this process read one at its start.
                data = read_latest(self._checkpoint_dir)
                if data is not None:
                    self._adopt(data)
                    data = self._recovered
            steps.append(time.monotonic())
            kill_point("ha.after_checkpoint_fence")
            engine.take_over(epoch, timeout_s, claimed_at_s,                     # 4
                             old_leader_last_seen_s=ha.old_leader_last_seen_s)
            steps.append(time.monotonic())
            self._run_engine(data, conf)                                         # 5
            steps.append(time.monotonic())
            log.info("high availability: epoch %d steps: sinks fenced %.2f s, checkpoints "
                     "fenced %.2f s, driver WAL read and cut %.2f s, state restored and "
                     "started %.2f s", epoch, *(b - a for a, b in itertools.pairwise(steps)))

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

    def _stop_highly_available(self) -> None:
        if self._ha_standing_by is not None:
            self._ha_standing_by.set()
        ha, self._ha = self._ha, None
        if ha is not None:
            ha.stop()
