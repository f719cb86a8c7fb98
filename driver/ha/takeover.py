"""The StreamingContext's side of high availability
(driver/ha/high_availability.py): how ``start()`` becomes a leader or a hot
standby, and what a new leader does before its first batch.

A ``StreamingContext`` started with ``spark.walstream.ha.enabled=true`` holds one
:class:`Takeover`, which it gives what a takeover needs of it (its SparkContext and
graph, its checkpoint directory, how to run the engine from a checkpoint); nothing
here runs without high availability.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
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
    from walstream.driver.dstream.recovery import ContextView
    from walstream.driver.engine import StreamingEngine

log = logging.getLogger(__name__)

#: How often a standby reads the newest checkpoint while standing by.
CHECKPOINT_RELOAD_S = 5.0


class Takeover:
    """Leader-or-standby start and the takeover steps 2-5 of
    driver/ha/high_availability.py, for one StreamingContext.

    ``recovered`` is the checkpoint the context would restore (a restart's); while
    standing by, :attr:`recovered` follows the leader's newest compatible one.
    ``run_engine(data, conf)`` restores ``data`` and starts the engine;
    ``use_checkpoint_writer(writer)`` gives the context the new leader's writer;
    ``on_lost(error)`` stops the context because it no longer leads."""

    def __init__(self, sc: Any, graph: DStreamGraph, checkpoint_dir: str | None,
                 recovered: CheckpointData | None, *,
                 recovery_view: Callable[[], ContextView],
                 run_engine: Callable[[CheckpointData | None, dict[str, str]], None],
                 use_checkpoint_writer: Callable[[CheckpointWriter], None],
                 on_checkpoint_error: Callable[[BaseException], None],
                 on_lost: Callable[[BaseException], None]) -> None:
        self._sc = sc
        self._graph = graph
        self._checkpoint_dir = checkpoint_dir
        self.recovered = recovered
        self._recovery_view = recovery_view
        self._run_engine = run_engine
        self._use_checkpoint_writer = use_checkpoint_writer
        self._on_checkpoint_error = on_checkpoint_error
        self._on_lost = on_lost
        self._engine: StreamingEngine | None = None
        self.ha: HighAvailability | None = None
        self._lock = threading.Lock()
        self._standing_by: threading.Event | None = None

    @property
    def role(self) -> str:
        """``leader`` or ``standby`` once started (``none`` before)."""
        return self.ha.role if self.ha is not None else "none"

    def start(self, engine: StreamingEngine, cfg: EngineConfig, conf: dict[str, str]) -> None:
        """Lead over ``engine`` (takeover steps run now) or stand by."""
        assert cfg.ha is not None
        self._engine = engine
        self.ha = HighAvailability(
            cfg.ha, cfg.bootstrap_servers, conf,
            lead=lambda epoch: self._lead(epoch, conf), stand_by=engine.stand_by,
            on_lost=self._on_lost, floor=self._epoch_floor)
        role = self.ha.start()
        log.info("high availability: this driver is the %s", role)
        if role == "standby":
            stop = self._standing_by = threading.Event()
            keep_warm(self._sc, conf, stop)
            if self._checkpoint_dir is not None:
                threading.Thread(target=self.reload_checkpoints, args=(stop,),
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

    def reload_checkpoints(self, stop: threading.Event) -> None:
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
            with self._lock:
                if stop.is_set():
                    return
                try:
                    self.adopt(data)
                except Exception as exc:
                    error = exc
            if error is not None:
                log.error("standby: this application cannot restore the leader's "
                          "checkpoint of %d: %s", data.checkpoint_time_ms, error)
                self._on_lost(error)
                return

    def adopt(self, data: CheckpointData) -> None:
        """Make ``data`` the checkpoint to restore, once checked against this graph
        (raises if it cannot be restored); the one held already is not checked again.

        Held means the same content, not the same name: a batch time is
        checkpointed twice under one name (generated, then completed, with fewer
        pending batches and newer state), and a takeover must restore the newest
        content the fence admits, or it re-runs done batches on state that is not
        theirs."""
        have = self.recovered
        if have is not None and have == data:
            return
        check_compatible(self._recovery_view(), data)
        self.recovered = data

    def _lead(self, epoch: int, conf: dict[str, str]) -> None:
        """Takeover steps 2-5 of driver/ha/high_availability.py for ``epoch`` (won in step 1)."""
        engine, ha = self._engine, self.ha
        assert engine is not None and ha is not None
        if self._standing_by is not None:
            self._standing_by.set()  # no more keep-warm jobs or checkpoint reads
        with self._lock:
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
            data = self.recovered
            if self._checkpoint_dir is not None:                                # 3
                write_fence(self._checkpoint_dir, epoch)
                self._use_checkpoint_writer(CheckpointWriter(
                    self._checkpoint_dir, on_error=self._on_checkpoint_error, epoch=epoch))
                # The newest checkpoint the fence admits: the old leader may have
                # written several since this process read one at its start.
                data = read_latest(self._checkpoint_dir)
                if data is not None:
                    self.adopt(data)
                    data = self.recovered
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

    def stop(self) -> None:
        """Stop standing by, or release the lease (once)."""
        if self._standing_by is not None:
            self._standing_by.set()
        ha, self.ha = self.ha, None
        if ha is not None:
            ha.stop()
