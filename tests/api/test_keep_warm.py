"""A standby's keep-warm job (driver/warm_up.py): it runs again and again on the
real SparkContext until told to stop, and not at all when warm-ups are off."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from driver.warm_up import CONF_WARM_UP, keep_warm

pytestmark = pytest.mark.spark


def _jobs(sc: Any) -> int:
    return len(sc.statusTracker().getJobIdsForGroup())


def test_keep_warm_runs_a_job_each_period_until_stopped(sc: Any) -> None:
    before = _jobs(sc)
    stop = threading.Event()
    thread = keep_warm(sc, {}, stop, period_s=0.2)
    assert thread is not None
    deadline = time.monotonic() + 60
    while _jobs(sc) < before + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _jobs(sc) >= before + 2
    stop.set()
    thread.join(60)
    assert not thread.is_alive()
    after = _jobs(sc)
    time.sleep(0.6)
    assert _jobs(sc) == after  # no job once stopped


def test_keep_warm_is_off_with_the_warm_ups(sc: Any) -> None:
    stop = threading.Event()
    assert keep_warm(sc, {CONF_WARM_UP: "false"}, stop, period_s=0.01) is None
