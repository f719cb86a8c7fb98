"""The receiver tracker's log lines: one per meaningful event (started, refused,
stopped, relaunched with the reason, given up), at INFO, WARNING or ERROR."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from walstream.driver.receiver_tracker import tracker as rt
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver.driver_client import DriverClient

LOG = "walstream.driver.receiver_tracker.tracker"


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOG]


def test_a_registration_logs_started_or_refused(caplog: pytest.LogCaptureFixture) -> None:
    tracker = ReceiverTracker(ReceivedBlockTracker([0], None), [0])
    client = DriverClient(tracker.address, timeout_s=10)
    try:
        with caplog.at_level(logging.INFO, logger=LOG):
            assert client.register_receiver(0, "worker-1", "e1").accepted
            assert not client.register_receiver(0, "worker-2", "e2").accepted
    finally:
        client.close()
        tracker.stop()
    assert lines(caplog) == [
        (logging.INFO, "receiver 0 started on worker-1 (executor e1)"),
        (logging.WARNING, "receiver 0 refused a registration from worker-2: a receiver for "
                          "stream 0 is already registered (on e1)"),
    ]


class _Jobs:
    """Stands in for Spark: each receiver job ends with the next scripted status."""

    def __init__(self, statuses: list[str]) -> None:
        self.statuses = statuses

    def setJobGroup(self, *_: Any) -> None:  # noqa: N802 (SparkContext's name)
        pass

    def rdd(self, _sc: Any, _locations: list[str]) -> Any:
        status = self.statuses.pop(0)
        return SimpleNamespace(mapPartitions=lambda _f: SimpleNamespace(
            collect=lambda: [status]))


def test_a_receiver_job_logs_each_end_with_its_reason(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _Jobs(["failed: boom", "stopped", "retry-refused", "failed: again"])
    monkeypatch.setattr(rt, "located_single_partition_rdd", jobs.rdd)
    monkeypatch.setattr(rt, "executors_of", lambda _sc: [])
    monkeypatch.setattr(rt, "reschedule_receiver", lambda *_: [])
    tracker = ReceiverTracker(ReceivedBlockTracker([0], None), [0])
    spec: Any = SimpleNamespace(stream_id=0, receiver=SimpleNamespace(preferredLocation=None))
    try:
        with caplog.at_level(logging.INFO, logger=LOG):
            tracker._run_receiver_job(jobs, spec, 0.0, max_relaunches=1)
    finally:
        tracker.stop()
    assert lines(caplog) == [
        (logging.WARNING, "receiver 0 ended (failed: boom); relaunching in 0.0 s (failure 1 "
                          "in a row, at most 1)"),
        (logging.INFO, "receiver 0 stopped without an error; relaunching in 0.0 s"),
        (logging.WARNING, "receiver 0 ended (retry-refused); relaunching in 0.0 s (failure 1 "
                          "in a row, at most 1)"),
        (logging.ERROR, "receiver 0 ended (failed: again) 2 times in a row; not relaunched, "
                        "its stream receives nothing more"),
    ]
    assert tracker.receivers[0].state == "failed"


def test_a_receiver_stopped_by_the_context_logs_nothing_more(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = _Jobs(["stopped"])
    monkeypatch.setattr(rt, "located_single_partition_rdd", jobs.rdd)
    monkeypatch.setattr(rt, "executors_of", lambda _sc: [])
    monkeypatch.setattr(rt, "reschedule_receiver", lambda *_: [])
    tracker = ReceiverTracker(ReceivedBlockTracker([0], None), [0])
    spec: Any = SimpleNamespace(stream_id=0, receiver=SimpleNamespace(preferredLocation=None))
    original = jobs.rdd

    def rdd_then_stop(sc: Any, locations: list[str]) -> Any:
        tracker._stopping.set()  # the context stops while the job runs
        return original(sc, locations)

    monkeypatch.setattr(rt, "located_single_partition_rdd", rdd_then_stop)
    try:
        with caplog.at_level(logging.INFO, logger=LOG):
            tracker._run_receiver_job(jobs, spec, 0.0, max_relaunches=1)
    finally:
        tracker.stop()
    assert lines(caplog) == []
