"""A planned handover: the leader of an HA pair is stopped gracefully (SIGTERM: its
receivers stopped, what they received processed, then its lease released) while the
standby takes over, twice; a third time it is SIGKILLed at the kill point between
its receivers' stop and its release, and the standby takes over when the lease runs
out. Input flows throughout into a generator receiver, a receiver-based Kafka
stream, a reliable custom receiver that acknowledges a consumer group's offsets
(its source forgets what it acknowledged) and a direct stream. The running totals
and the KafkaSink output are exact."""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from walstream.testing import wait_until
from walstream.testing.chaos_config import ChaosConfig
from walstream.testing.chaos_feeder import Feeder
from walstream.testing.chaos_process import HAPair, wait_for_exact

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]
TOTAL, RATE, SEED = 16000, 300, 7
DIRECT_RECORDS, DIRECT_RATE = 5000, 50.0
WAIT_S = 240  # bound on each wait, on a loaded 2-core machine
#: None: a graceful stop; else the kill point armed for that stop.
ROUNDS = (None, None, "ha.before_release")


def test_graceful_handovers_and_a_kill_before_the_release_lose_nothing(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    armed = tmp_path / "kill-point"
    pair = HAPair(tmp_path, bootstrap, topic_factory("handover-sink"), total=TOTAL, rate=RATE,
                  seed=SEED, direct=topic_factory("handover-direct"), lease_timeout="2s",
                  env={"WALSTREAM_KILL_POINT_FILE": str(armed),
                       # three receivers hold a task slot each; batches need more
                       "WALSTREAM_SPARK_MASTER": "local[5]"},
                  kafka_receiver=True)
    feeder = Feeder(bootstrap, pair.direct, ChaosConfig(records=DIRECT_RECORDS,
                                                        rate=DIRECT_RATE, seed=SEED))
    try:
        feeder.start()
        leader, standby = pair.leader_and_standby()
        for n, point in enumerate(ROUNDS):
            started = time.time()
            wait_until(functools.partial(pair.ran, leader, started, 3), WAIT_S,
                       f"round {n}: the leader to run batches", details=pair.details)
            if point is not None:
                armed.write_text(point)
            stopped_at = time.time()
            os.kill(leader.pid, signal.SIGTERM)  # the driver only: it stops its JVM itself
            wait_until(lambda leader=leader: leader.poll() is not None,  # type: ignore[misc]
                       WAIT_S, f"round {n}: the leader to stop", details=pair.details)
            log = pair.log_of(leader)
            if point is None:
                assert leader.returncode == 0 and "stopped gracefully" in log, log[-3000:]
            else:
                assert f"kill point {point} reached" in log, log[-3000:]
                assert not armed.exists()
            pair.kill(leader)  # whatever of its group is left
            pair.first_batch_after(standby, stopped_at, f"round {n}: the standby's first "
                                   "batch after the leader stopped")
            leader, standby = standby, pair.launch()
            pair.wait_role(standby, "standby", f"round {n}: a new standby")
        lost, doubled = wait_for_exact(pair, feeder, SEED, TOTAL, WAIT_S)
        assert (lost, doubled) == (0, 0), (
            f"sink: {lost} words lost, {doubled} doubled\n{pair.details()}")
    finally:
        pair.close()
