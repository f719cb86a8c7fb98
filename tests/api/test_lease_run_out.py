"""A highly available leader acts only while its lease is certainly valid: when its
lease runs out (no renewal confirmed in time, as on a host cut off from the broker)
during an output operation, the operation's Spark job is cancelled at once and its
write after that job never happens; no later output operation starts; the context
stops and ``awaitTermination`` raises why."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from walstream.driver import StreamingContext
from walstream.driver.ha.errors import LeaseIOError, LeaseLostError
from walstream.testing import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.timeout(180)]

SLOW_S = 6.0  # the output's Spark job: far longer than the lease's 1 s timeout
#: What the output did: (event, batch ms, monotonic time). Module-level, so the
#: checkpointed graph pickles the output function by reference.
EVENTS: list[tuple[str, int, float]] = []
LOCK = threading.Lock()


def slow_output(t: Any, rdd: Any) -> None:
    ms = round(t.timestamp() * 1000)
    with LOCK:
        EVENTS.append(("started", ms, time.monotonic()))
    rdd.map(lambda x: (time.sleep(SLOW_S), x)[1]).collect()
    with LOCK:  # the user's own write, after the batch's Spark job
        EVENTS.append(("written", ms, time.monotonic()))


def test_a_lease_run_out_mid_output_cancels_its_job_and_its_write_never_happens(
        ssc: StreamingContext, tmp_path: Path, unique_name: Callable[[str], str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    conf = ssc._conf()
    app = unique_name("lease-out")
    monkeypatch.setattr(ssc, "_conf", lambda: {
        **conf, "spark.walstream.ha.enabled": "true", "spark.walstream.appId": app,
        "spark.walstream.ha.leaseTopic": f"{app}.lease",
        "spark.walstream.ha.leaseTimeout": "1s", "spark.walstream.ha.renewPeriod": "200ms"})
    ssc.checkpoint(str(tmp_path / "ckpt"))
    sc = ssc.sparkContext
    EVENTS.clear()
    ssc.queueStream([sc.parallelize([i], 1) for i in range(50)]).foreachRDD(slow_output)
    ssc.start()
    wait_until(lambda: any(e[0] == "started" for e in EVENTS), 60, "an output to start",
               poll_s=0.02)
    assert ssc._takeover is not None and ssc._takeover.ha is not None
    lease = ssc._takeover.ha.lease
    assert lease is not None and lease.held

    def cut(*_: object) -> None:
        raise LeaseIOError("lease topic: renewal not acknowledged within bound")

    monkeypatch.setattr(lease, "_renew_once", cut)  # the broker is out of reach
    wait_until(lambda: not lease.held, 5, "the lease to run out", poll_s=0.005)
    ran_out = time.monotonic()
    with pytest.raises(LeaseLostError, match="ran out"):
        ssc.awaitTermination(60)
    first = min(e[2] for e in EVENTS if e[0] == "started")
    # An output left running would have written by now, with seconds to spare.
    time.sleep(max(0.0, first + SLOW_S + 3.0 - time.monotonic()))
    with LOCK:
        written = [e for e in EVENTS if e[0] == "written"]
        late = [e for e in EVENTS if e[0] == "started" and e[2] > ran_out]
    assert written == [], f"an output wrote after its leader's lease ran out: {written}"
    assert late == [], f"outputs started after the lease ran out: {late}"
    assert sc.parallelize([1, 2]).count() == 2  # the SparkContext is usable still
