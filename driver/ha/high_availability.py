"""High availability: a leader and a hot standby of one application.

With ``spark.walstream.ha.enabled=true`` (:mod:`walstream.driver.ha.ha_conf`), ``start()`` takes
part in the application's lease (:mod:`walstream.driver.ha.lease`). The first process to claim
it leads; any other becomes a hot standby and ``start()`` returns without running
batches. A standby keeps warm what a cold restart would have to build: its
SparkContext and executors (warmed at start), the block tracker, which follows
the driver WAL as the leader appends to it (:mod:`walstream.driver.ha.tracker_tail`), the
newest checkpoint, read and checked against its graph as the leader writes them
(:mod:`walstream.driver.ha.takeover`), and the driver WAL's connection for its epoch link.
Its receivers do not run.

When the leader's lease expires (no renewal for ``leaseTimeout``), a standby claims
the next epoch and, having won it, takes over in this order; each step's reason is
in docs/decisions/ha-lease-and-fencing.md:

1. Claim epoch ``e`` in the lease log: the old leader's next renewal finds it
   fenced, and it stops.
2. Fence the graph's Kafka sinks for ``e``: an old leader's attempt that starts
   after this fence is void for readers.
3. Fence the checkpoint directory for ``e``: an old leader's later checkpoint is
   never read.
4. Read the driver WAL to its end, begin epoch ``e``'s own log with the cut, and
   log ``EpochStarted(e)`` (:meth:`~walstream.driver.engine.StreamingEngine.take_over`).
5. Restore the state and the batches to run from the newest checkpoint the fence
   admits, then start: endpoint (keys of epoch ``e``: the old leader's receivers
   are refused), receivers (they resume from the replayed source positions), and
   the pending and down-time batches under the down-time policy.

A leader that loses its lease (fenced by a newer epoch, or unable to renew) stops
at once and ``awaitTermination`` raises why. A stopped leader releases the lease,
so a standby takes over without waiting for the timeout. The process that led
before, started again, finds the lease held and becomes the next standby.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from walstream.driver.ha.errors import LeaseError, LeaseIOError, LeaseReleasedError
from walstream.driver.ha.ha_conf import HaConfig
from walstream.driver.ha.lease import Lease
from walstream.driver.ha.lease_log import LeaseConfig, ensure_lease_topic
from walstream.kafka_settings import settings_from_conf

log = logging.getLogger(__name__)

#: How long one watch of the lease log waits before the standby checks for a stop.
WATCH_SLICE_S = 1.0


class HighAvailability:
    """One participant of the application's lease, as leader or standby.

    ``lead(epoch)`` runs takeover steps 2-5 (the context owns the graph, the
    checkpoints and the engine); ``stand_by()`` makes the engine a hot standby;
    ``on_lost(error)`` is told once when a lease this process held ended (it must
    stop the context, on a thread of its own). ``floor()`` is the highest epoch the
    application used outside the lease log (driver WAL chain, checkpoint fences),
    read before every claim: a claim is always above it. Thread-safe.
    """

    def __init__(self, config: HaConfig, bootstrap_servers: str, conf: dict[str, str],
                 lead: Callable[[int], None], stand_by: Callable[[], None],
                 on_lost: Callable[[BaseException], None],
                 floor: Callable[[], int] | None = None) -> None:
        self.config = config
        self._floor = floor or (lambda: 0)
        self._lead = lead
        self._stand_by = stand_by
        self._on_lost = on_lost
        self.lease_config = LeaseConfig.create(
            bootstrap_servers, config.lease_topic, settings_from_conf(conf),
            renew_period_s=config.renew_period_s, timeout_s=config.lease_timeout_s)
        self.lease: Lease | None = None
        self.role = "none"
        self.took_over_s: float | None = None  # expiry seen -> leading, the last takeover
        #: Wall seconds of the last renewal read from the leader this process took over
        #: from (None: it did not take over).
        self.old_leader_last_seen_s: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        """Claim the lease or stand by; returns ``"leader"`` or ``"standby"``. As the
        leader, :meth:`lead` has run when this returns."""
        ensure_lease_topic(self.lease_config)
        self.lease = Lease(self.lease_config, on_lost=self._lost)
        try:
            if self.lease.try_acquire(self._floor()):
                self._become_leader(time.monotonic())
                return self.role
            held = self.lease.view().state  # one read of the lease log, not one per field
            log.info("high availability: the lease of %s is held (epoch %d, by %s): "
                     "standing by", self.lease_config.topic, held.epoch, held.holder)
        except LeaseIOError as exc:
            # The log exists but did not answer in time (a loaded or restarting
            # broker): stand by and keep trying, as a watch that fails does. No claim
            # was confirmed, so this process does not lead; a claim needs the log.
            log.warning("high availability: reading the lease of %s failed: %s; standing "
                        "by", self.lease_config.topic, exc)
        self.role = "standby"
        self._stand_by()
        self._thread = threading.Thread(target=self._watch, name="ha-standby", daemon=True)
        self._thread.start()
        return self.role

    def check(self) -> None:
        """Raise unless this process leads now (run right before each WAL clean)."""
        if self.lease is None:
            if self._stop.is_set():
                raise LeaseReleasedError("high availability: the lease was released")
            raise LeaseError("high availability: no lease")
        self.lease.check()

    def valid_for(self) -> float:
        """Seconds this process is certain to lead from now (0: it does not lead)."""
        lease = self.lease
        return 0.0 if lease is None or self._stop.is_set() else lease.valid_for()

    def _watch(self) -> None:
        assert self.lease is not None
        while not self._stop.is_set():
            try:
                view = self.lease.watch(WATCH_SLICE_S)
                if not view.expired:
                    continue
                seen = time.monotonic()
                # Wall time of the old leader's last renewal read: its fault came after.
                self.old_leader_last_seen_s = time.time() - self.lease.silent_s()
                if self.lease.try_acquire(self._floor()):
                    self._become_leader(seen)
                    return
            except LeaseError as exc:
                # The lease log unreachable: keep standing by; the leader, if alive,
                # is no better off, and a claim needs the log anyway.
                log.warning("high availability: watching the lease failed: %s", exc)
                self._stop.wait(WATCH_SLICE_S)
            except Exception as exc:
                log.exception("high availability: the takeover failed")
                self._on_lost(exc)
                return

    def _become_leader(self, seen: float) -> None:
        assert self.lease is not None and self.lease.epoch is not None
        epoch = self.lease.epoch
        was = self.role
        self.role = "leader"
        log.info("high availability: leading epoch %d of %s%s", epoch,
                 self.lease_config.topic, " (taking over)" if was == "standby" else "")
        self._lead(epoch)
        self.took_over_s = time.monotonic() - seen
        if was == "standby":
            log.info("high availability: took over epoch %d in %.2f s", epoch,
                     self.took_over_s)

    def _lost(self, exc: BaseException) -> None:
        if self._stop.is_set():
            return  # released by stop(): not a loss
        log.error("high availability: this driver no longer leads: %s; stopping", exc)
        self._on_lost(exc)

    def stop(self) -> None:
        """Stop standing by, or release the lease (a standby takes over at once)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(WATCH_SLICE_S + self.lease_config.io_timeout_s)
        lease, self.lease = self.lease, None
        if lease is not None:
            lease.close()

    def describe(self) -> dict[str, Any]:
        lease = self.lease
        return {"role": self.role, "epoch": lease.epoch if lease is not None else None,
                "lease_topic": self.lease_config.topic, "took_over_s": self.took_over_s}
