"""driver/scheduler/daemon_pool.py: calls run in order on daemon threads, a failing call does
not end its worker, nothing runs after shutdown, and queued calls can be dropped."""

from __future__ import annotations

import threading

import pytest

from walstream.driver.scheduler.daemon_pool import DaemonThreadPool


def test_calls_run_in_order_on_daemon_threads_and_a_failure_is_survived(
        caplog: pytest.LogCaptureFixture) -> None:
    pool = DaemonThreadPool(1, "t")
    ran: list[tuple[int, bool]] = []
    done = threading.Event()

    def boom() -> None:
        raise ValueError("boom")

    pool.submit(lambda: ran.append((1, threading.current_thread().daemon)))
    pool.submit(boom)
    pool.submit(lambda: ran.append((2, threading.current_thread().daemon)))
    pool.submit(done.set)
    assert done.wait(10)
    pool.shutdown(wait=True, timeout_s=10)
    assert ran == [(1, True), (2, True)]
    assert "a pooled call failed" in caplog.text
    with pytest.raises(RuntimeError):
        pool.submit(done.set)


def test_shutdown_can_drop_the_queued_calls() -> None:
    pool = DaemonThreadPool(1, "t")
    release = threading.Event()
    started = threading.Event()
    ran: list[int] = []

    def first() -> None:
        started.set()
        release.wait(10)
        ran.append(1)

    pool.submit(first)
    pool.submit(lambda: ran.append(2))
    assert started.wait(10)
    pool.shutdown(wait=False, cancel_pending=True)
    release.set()
    pool.shutdown(wait=True, timeout_s=10)  # a second shutdown only joins
    assert ran == [1]


def test_a_pool_needs_a_worker() -> None:
    with pytest.raises(ValueError):
        DaemonThreadPool(0, "t")


def test_no_thread_runs_before_the_first_call() -> None:
    before = threading.active_count()
    pool = DaemonThreadPool(3, "lazy")
    assert threading.active_count() == before
    pool.shutdown(wait=True, timeout_s=1)  # never started: nothing to join
    assert threading.active_count() == before
