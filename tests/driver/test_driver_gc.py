"""The driver JVM's periodic full GC: when it runs, how often, and that it stops."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from walstream.driver.driver_gc import PeriodicDriverGC, gc_interval_s
from walstream.driver.durations import conf_time_ms
from walstream.errors import ConfigError
from walstream.testing import wait_until


class FakeJvm:
    """What ``sc._jvm.java.lang.System.gc`` reaches: counts the requests."""

    def __init__(self, fail: bool = False) -> None:
        self.calls = 0
        self.fail = fail
        self.called = threading.Event()
        self.java = SimpleNamespace(lang=SimpleNamespace(System=SimpleNamespace(gc=self.gc)))

    def gc(self) -> None:
        self.calls += 1
        self.called.set()
        if self.fail:
            raise RuntimeError("the Py4J gateway is closed")


def test_five_minutes_by_default_and_spark_notation_accepted() -> None:
    assert gc_interval_s({}) == 300.0
    assert gc_interval_s({"spark.walstream.driver.periodicGC.interval": "90s"}) == 90.0
    assert gc_interval_s({"spark.walstream.driver.periodicGC.interval": "2min"}) == 120.0
    assert gc_interval_s({"spark.walstream.driver.periodicGC.interval": "45"}) == 45.0  # seconds


def test_zero_turns_it_off_and_an_application_setting_of_spark_s_own_wins() -> None:
    assert gc_interval_s({"spark.walstream.driver.periodicGC.interval": "0"}) is None
    assert gc_interval_s({"spark.cleaner.periodicGC.interval": "30min"}) is None
    assert PeriodicDriverGC.start_for(SimpleNamespace(_jvm=FakeJvm()),
                                      {"spark.walstream.driver.periodicGC.interval": "0s"}) \
        is None


def test_a_bad_interval_is_a_config_error_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"spark\.walstream\.driver\.periodicGC\.interval"):
        gc_interval_s({"spark.walstream.driver.periodicGC.interval": "soon"})


def test_conf_time_ms_reads_spark_s_units() -> None:
    assert conf_time_ms("200ms", "k", bare_unit_ms=1) == 200
    assert conf_time_ms(" 3s ", "k", bare_unit_ms=1) == 3000
    assert conf_time_ms("1m", "k", bare_unit_ms=1) == 60_000
    assert conf_time_ms("1h", "k", bare_unit_ms=1) == 3_600_000
    assert conf_time_ms("250", "k", bare_unit_ms=1) == 250
    assert conf_time_ms("250", "k", bare_unit_ms=1000) == 250_000


def _sc(jvm: FakeJvm) -> Any:
    return SimpleNamespace(_jvm=jvm)


def test_it_requests_a_gc_every_interval_until_stopped() -> None:
    jvm = FakeJvm()
    gc = PeriodicDriverGC(_sc(jvm), interval_s=0.05)
    gc._thread.start()
    try:
        wait_until(lambda: jvm.calls >= 3, 5, "3 GC requests", poll_s=0.01,
                   details=lambda: f"{jvm.calls} GC requests")
    finally:
        gc.stop()
    assert jvm.calls >= 3 and gc.collections == jvm.calls
    assert gc.last_pause_s is not None
    after_stop = jvm.calls
    time.sleep(0.2)
    assert jvm.calls == after_stop and not gc._thread.is_alive()


def test_a_failed_request_ends_the_thread_quietly() -> None:
    jvm = FakeJvm(fail=True)
    gc = PeriodicDriverGC(_sc(jvm), interval_s=0.01)
    gc._thread.start()
    assert jvm.called.wait(5)
    gc._thread.join(5)
    assert not gc._thread.is_alive() and jvm.calls == 1 and gc.collections == 0
    gc.stop()
