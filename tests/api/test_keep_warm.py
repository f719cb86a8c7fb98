"""A standby's keep-warm job (driver/warm_up.py): it runs again and again on the
real SparkContext until told to stop, and not at all when warm-ups are off."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from walstream.driver.warm_up import CONF_WARM_UP, keep_warm

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


class _Sc:
    def __init__(self, master: str, parallelism: int = 7) -> None:
        self.master = master
        self.defaultParallelism = parallelism


def test_task_slots_count_a_local_masters_threads_else_the_default_parallelism() -> None:
    import os

    from walstream.driver.warm_up import task_slots

    assert task_slots(_Sc("local[12]", 3)) == 12  # receivers share these slots
    assert task_slots(_Sc("local[4,2]")) == 4
    assert task_slots(_Sc("local[*]")) == (os.cpu_count() or 1)
    assert task_slots(_Sc("local")) == 1
    assert task_slots(_Sc("spark://h:7077", 6)) == 6
