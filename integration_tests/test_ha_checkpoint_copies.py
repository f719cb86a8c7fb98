"""A takeover restores the newest content of the newest checkpoint.

Each batch time is checkpointed twice under one name: when the batch is generated
(it is pending) and when it completed (nothing of it pending, newer state). Here a
batch takes longer than the standby's checkpoint reload period, so the standby
reads the first copy of a batch; the leader is SIGKILLed right after the second
copy is durable. The new leader runs again no batch the old one completed, and the
running totals and the KafkaSink output are exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from walstream.checkpoint.data import CheckpointData
from walstream.checkpoint.entries import checkpoint_files
from walstream.driver.ha.takeover import CHECKPOINT_RELOAD_S
from walstream.testing import wait_until
from walstream.testing.chaos_config import ChaosConfig
from walstream.testing.chaos_feeder import Feeder
from walstream.testing.chaos_process import HAPair, wait_for_exact

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]
TOTAL, RATE, SEED = 3000, 100, 11
#: A batch's output takes SLOW_S, longer than the standby's reload period, and the
#: next batch is generated BATCH_S after it: the leader can be killed in between.
BATCH_S, SLOW_S = 10.0, CHECKPOINT_RELOAD_S + 1.5
WAIT_S = 240


def newest_checkpoint(ckpt: Path) -> CheckpointData | None:
    files = checkpoint_files(ckpt)  # newest first
    if not files:
        return None
    _, path = files[0]
    try:
        return CheckpointData.decode(Path(path).read_bytes())
    except Exception:  # replaced while read: read again at the next poll
        return None


def test_a_takeover_after_a_batch_completed_does_not_run_it_again(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    pair = HAPair(tmp_path, bootstrap, topic_factory("sink"), total=TOTAL, rate=RATE,
                  seed=SEED, direct=topic_factory("direct"), batch_s=BATCH_S,
                  lease_timeout="2s", app_args=("--slow-output", str(SLOW_S)))
    feeder = Feeder(bootstrap, pair.direct, ChaosConfig(records=300, rate=10.0, seed=SEED))
    try:
        feeder.start()
        leader, standby = pair.leader_and_standby()
        stood_by = time.time()

        # A batch generated once the standby reads checkpoints: its first copy stays
        # the newest checkpoint for longer than a reload period, so the standby reads
        # it. Wait for its second copy, the leader's next batch not yet generated
        # (else follow that batch instead).
        seen: dict[str, int] = {}

        def completed_after_generated() -> bool:
            data = newest_checkpoint(pair.ckpt)
            if data is None:
                return False
            t = data.checkpoint_time_ms
            if t in data.pending_times_ms:
                if t / 1000 > stood_by:
                    seen["generated"] = t
                return False
            return seen.get("generated") == t

        wait_until(completed_after_generated, WAIT_S,
                   "a batch's completed checkpoint after its generated one", poll_s=0.02,
                   details=pair.details)
        t = seen["generated"]
        killed_at = time.time()
        assert pair.kill(leader), "the leader's processes survived SIGKILL"
        wait_until(lambda: bool(pair.batches(standby, killed_at)), WAIT_S,
                   "the new leader's first batch", details=pair.details)

        lost, doubled = wait_for_exact(pair, feeder, SEED, TOTAL, WAIT_S)
        again = sorted(b["batch"] for b in pair.batches(standby) if b["batch"] <= t)
        assert again == [], (
            f"the new leader ran batches the old one had completed: {again}\n"
            f"{pair.details()}")
        assert (lost, doubled) == (0, 0), (
            f"sink: {lost} words lost, {doubled} doubled\n{pair.details()}")
    finally:
        pair.close()
