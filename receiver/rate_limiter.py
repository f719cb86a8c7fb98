"""A token-bucket rate limiter in records per second, updatable while running."""

from __future__ import annotations

import threading
import time


class RateLimiter:
    """Blocks callers so that on average at most ``rate`` records/s pass.

    ``rate <= 0`` means unlimited. The bucket holds at most one second of
    tokens, so a pause does not allow a burst larger than the rate.
    """

    def __init__(self, rate: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._rate = float(rate)
        self._tokens = 0.0
        self._last = time.monotonic()

    @property
    def rate(self) -> float:
        return self._rate

    def update_rate(self, rate: float) -> None:
        """Change the limit at run time (the driver's UpdateRateLimit)."""
        with self._lock:
            self._refill()
            self._rate = float(rate)
            self._tokens = min(self._tokens, max(self._rate, 1.0))

    def _refill(self) -> None:
        now = time.monotonic()
        if self._rate > 0:
            self._tokens = min(self._rate, self._tokens + (now - self._last) * self._rate)
        self._last = now

    def acquire(self, n: int = 1) -> None:
        """Wait until ``n`` records may pass."""
        while True:
            with self._lock:
                if self._rate <= 0:
                    return
                self._refill()
                # Let a request larger than the bucket through once the bucket is full.
                need = min(float(n), self._rate)
                if self._tokens >= need:
                    self._tokens -= n
                    return
                wait = (need - self._tokens) / self._rate
            time.sleep(min(wait, 0.1))
