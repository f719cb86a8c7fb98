"""High availability: the same app (a receiver stream and a direct Kafka stream)
started twice leads once and stands by once; the leader SIGKILLed (its whole process
group, JVM included) three times, each time restarted as the next standby, and once
paused with SIGSTOP until the standby took over, after which it wakes fenced and
exits. The running totals and the KafkaSink output are exact: nothing lost, nothing
doubled."""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from walstream.testing import wait_until
from walstream.testing.chaos_config import ChaosConfig
from walstream.testing.chaos_feeder import Feeder
from walstream.testing.chaos_process import FENCED, HAPair, wait_for_exact

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
TOTAL, RATE, SEED = 24000, 400, 5
DIRECT_RECORDS, DIRECT_RATE = 12000, 150.0
WAIT_S = 240  # bound on each wait, on a loaded 2-core machine


def has_role(pair: HAPair, p: Any, role: str) -> bool:
    return pair.role(p) == role


def test_leader_killed_three_times_and_paused_once_counts_exactly(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    pair = HAPair(tmp_path, bootstrap, topic_factory("ha-sink"), total=TOTAL, rate=RATE,
                  seed=SEED, direct=topic_factory("ha-direct"))
    # The direct stream's input, fed while the takeovers happen (bad records among it).
    feeder = Feeder(bootstrap, pair.direct, ChaosConfig(records=DIRECT_RECORDS,
                                                        rate=DIRECT_RATE, seed=SEED))
    figures: dict[str, Any] = {}
    try:
        feeder.start()
        leader = pair.launch()
        wait_until(lambda: pair.role(leader) == "leader" and bool(pair.batches(leader)),
                   WAIT_S, "the first process to lead and complete a batch",
                   details=pair.details)
        standby = pair.launch()
        wait_until(lambda: pair.role(standby) == "standby", WAIT_S,
                   "the second process to stand by", details=pair.details)

        failovers = []
        for round_ in range(3):
            # Let the leader run a few batches of its own first.
            started = time.time()
            wait_until(functools.partial(pair.ran, leader, started, 3), WAIT_S,
                       f"round {round_}: the leader to run batches", details=pair.details)
            killed_at = time.time()
            assert pair.kill(leader), "the leader's processes survived SIGKILL"
            wait_until(functools.partial(pair.ran, standby, killed_at, 1), WAIT_S,
                       f"round {round_}: the standby's first batch after the kill",
                       details=pair.details)
            failovers.append(pair.batches(standby, killed_at)[0]["wall"] - killed_at)
            leader, standby = standby, pair.launch()  # the killed one comes back
            wait_until(functools.partial(has_role, pair, standby, "standby"), WAIT_S,
                       f"round {round_}: the restarted process to stand by",
                       details=pair.details)
        figures["SIGKILL -> the standby's first batch (s)"] = [round(f, 2) for f in failovers]

        # A leader paused past its lease wakes fenced and exits; the standby leads.
        paused_at = time.time()
        logged = len(pair.log_of(leader))
        os.killpg(leader.pid, signal.SIGSTOP)
        wait_until(lambda: bool(pair.batches(standby, paused_at)), WAIT_S,
                   "the standby's first batch while the leader is paused",
                   details=pair.details)
        time.sleep(max(0.0, 5.0 - (time.time() - paused_at)))
        os.killpg(leader.pid, signal.SIGCONT)
        wait_until(lambda: leader.poll() is not None, WAIT_S,
                   "the paused leader to exit once woken", details=pair.details)
        woke = pair.log_of(leader)[logged:]  # what it logged once paused
        assert FENCED.search(woke), woke[-3000:]
        figures["SIGSTOP -> the standby's first batch (s)"] = round(
            pair.batches(standby, paused_at)[0]["wall"] - paused_at, 2)

        lost, doubled = wait_for_exact(pair, feeder, SEED, TOTAL, WAIT_S)
        figures["sink words lost / doubled"] = f"{lost} / {doubled}"
        assert (lost, doubled) == (0, 0), (
            f"sink: {lost} words lost, {doubled} doubled\n{pair.details()}")
    finally:
        print("\nhigh availability:")
        for k, v in figures.items():
            print(f"  {k}: {v}")
        pair.close()
