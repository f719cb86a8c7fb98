"""A takeover that dies half done: at each ``ha.*`` kill point a standby taking over
is SIGKILLed, and the next claimant of the lease takes over from what it left.

Every process of the app gets ``WALSTREAM_KILL_POINT_FILE``; the test writes one
point's name into the file just before it kills the leader, so the standby that
takes over dies at that point (the first crossing fires and removes the file).
Then two processes start at the same moment: one claims the next epoch and leads,
the other stands by. After a round per point the running totals and the KafkaSink
output are exact: nothing lost, nothing doubled.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from walstream.testing import wait_until
from walstream.testing.chaos_config import ChaosConfig
from walstream.testing.chaos_feeder import Feeder
from walstream.testing.chaos_process import HAPair, wait_for_exact

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]
TOTAL, RATE, SEED = 16000, 400, 5
DIRECT_RECORDS, DIRECT_RATE = 6000, 60.0
WAIT_S = 240  # bound on each wait, on a loaded 2-core machine
#: In takeover order: each leaves less of the takeover undone than the one before.
POINTS = ("ha.after_claim", "ha.after_sink_fence", "ha.after_checkpoint_fence",
          "ha.after_link", "ha.after_epoch_started")


def _exited(p: Any) -> bool:
    return p.poll() is not None


def _leader_and_standby(pair: HAPair, a: Any, b: Any, what: str) -> tuple[Any, Any]:
    """Wait until one of ``a``, ``b`` runs batches and the other stands by.

    The leader is the one that completes batches: a process that stood by at its
    start and then took over an expired lease still has the role ``standby`` in
    the role file, which records what ``start()`` returned.

    A process that exits meanwhile is started again, as a process supervisor would:
    two drivers starting Spark at once on a loaded machine can delay a renewal past
    the 1 s lease, and a leader that loses its lease stops and exits."""
    on = [a, b]

    def settled() -> bool:
        for i, p in enumerate(on):
            if p.poll() is not None:
                on[i] = pair.launch()
        ran = [p for p in on if pair.batches(p)]
        if len(ran) != 1:
            return False
        other = on[1] if ran[0] is on[0] else on[0]
        return pair.role(other) == "standby" and other.poll() is None

    wait_until(settled, WAIT_S, what, details=pair.details)
    return (on[0], on[1]) if pair.batches(on[0]) else (on[1], on[0])


def test_a_takeover_killed_at_each_step_is_finished_by_the_next_leader(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    armed = tmp_path / "kill-point"
    pair = HAPair(tmp_path, bootstrap, topic_factory("ha-kp-sink"), total=TOTAL, rate=RATE,
                  seed=SEED, direct=topic_factory("ha-kp-direct"),
                  env={"WALSTREAM_KILL_POINT_FILE": str(armed)})
    feeder = Feeder(bootstrap, pair.direct, ChaosConfig(records=DIRECT_RECORDS,
                                                        rate=DIRECT_RATE, seed=SEED))
    fired: list[str] = []
    try:
        feeder.start()
        leader, standby = _leader_and_standby(pair, pair.launch(), pair.launch(),
                                              "one process to lead, the other to stand by")
        for point in POINTS:
            started = time.time()
            wait_until(functools.partial(pair.ran, leader, started, 2), WAIT_S,
                       f"{point}: the leader to run batches", details=pair.details)
            armed.write_text(point)
            assert pair.kill(leader), "the leader's processes survived SIGKILL"
            wait_until(functools.partial(_exited, standby), WAIT_S,
                       f"{point}: the standby to take over and die there",
                       details=pair.details)
            log = pair.log_of(standby)
            assert f"kill point {point} reached" in log, log[-3000:]
            assert not armed.exists()
            assert not pair.batches(standby)  # it died taking over, before any batch
            fired.append(point)
            pair.kill(standby)  # whatever of its group is left (its JVM)
            # Both come back at once: one claims the next epoch, one stands by.
            leader, standby = _leader_and_standby(
                pair, pair.launch(), pair.launch(),
                f"after {point}: a new leader and a new standby")

        lost, doubled = wait_for_exact(pair, feeder, SEED, TOTAL, WAIT_S)
        assert (lost, doubled) == (0, 0), (
            f"sink: {lost} words lost, {doubled} doubled\n{pair.details()}")
    finally:
        print(f"\nkill points fired while taking over: {fired}")
        pair.close()
