"""RateLimiter: a token bucket in records/s, 0 = unlimited, updatable while running."""

from __future__ import annotations

import threading
import time

import pytest

from walstream.receiver.rate_limiter import RateLimiter
from walstream.testing import WAIT_S

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("rate", [0, 0.0, -5])
def test_zero_or_negative_rate_is_unlimited(rate: float) -> None:
    limiter = RateLimiter(rate)
    t0 = time.monotonic()
    for _ in range(20_000):
        limiter.acquire()
    limiter.acquire(10**9)
    assert time.monotonic() - t0 < 1.0


def test_a_rate_limits_throughput() -> None:
    limiter = RateLimiter(100)
    assert limiter.rate == 100
    t0 = time.monotonic()
    for _ in range(50):
        limiter.acquire()
    elapsed = time.monotonic() - t0
    assert 0.4 <= elapsed < 2.0, elapsed


def test_a_request_larger_than_the_rate_still_passes() -> None:
    limiter = RateLimiter(20)
    t0 = time.monotonic()
    limiter.acquire(30)  # more than one second of tokens: must not wait for ever
    assert time.monotonic() - t0 < 2.0
    t0 = time.monotonic()
    limiter.acquire(1)  # ... and the debt (10 tokens) is paid by later callers
    assert time.monotonic() - t0 >= 0.4


def test_update_rate_to_unlimited_releases_a_waiting_caller() -> None:
    limiter = RateLimiter(5)
    done = threading.Event()

    def take() -> None:
        for _ in range(100):  # 20 s at 5/s
            limiter.acquire()
        done.set()

    threading.Thread(target=take, daemon=True).start()
    time.sleep(0.3)
    assert not done.is_set()
    limiter.update_rate(0)
    assert limiter.rate == 0
    assert done.wait(1.0), "update_rate(0) did not lift the limit"


def test_update_rate_from_unlimited_to_a_limit() -> None:
    limiter = RateLimiter(0)
    for _ in range(10_000):
        limiter.acquire()  # no tokens banked while unlimited
    limiter.update_rate(50)
    assert limiter.rate == 50
    t0 = time.monotonic()
    for _ in range(25):
        limiter.acquire()
    assert time.monotonic() - t0 >= 0.4


def test_lowering_the_rate_drops_banked_tokens() -> None:
    limiter = RateLimiter(1000)
    time.sleep(0.3)  # banks ~300 tokens at 1000/s
    limiter.update_rate(20)
    t0 = time.monotonic()
    for _ in range(30):
        limiter.acquire()
    # at most 20 banked tokens survive the update; 10 more take >= 0.5 s at 20/s
    assert time.monotonic() - t0 >= 0.4


def test_rate_is_shared_by_concurrent_callers() -> None:
    limiter = RateLimiter(100)

    def take_20() -> None:
        for _ in range(20):
            limiter.acquire()

    threads = [threading.Thread(target=take_20, daemon=True) for _ in range(4)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
        assert not t.is_alive()
    assert time.monotonic() - t0 >= 0.7  # 80 records at 100/s
