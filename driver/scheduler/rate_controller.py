"""Backpressure: a PID rate estimator fed by batch completions (Spark's PIDRateEstimator).

With ``spark.streaming.backpressure.enabled`` the controller computes, after
each batch, the rate the system processed at, corrects it by the scheduling
delay that queued up, and sends the new limit to every receiver
(UpdateRateLimit). Spark's conf names and defaults: pid.proportional 1.0,
pid.integral 0.2, pid.derived 0.0, pid.minRate 100; capped by
``spark.streaming.receiver.maxRate`` when set.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from walstream.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class PIDRateEstimator:
    batch_interval_ms: int
    proportional: float = 1.0
    integral: float = 0.2
    derivative: float = 0.0
    min_rate: float = 100.0

    def __post_init__(self) -> None:
        if self.batch_interval_ms <= 0 or self.proportional < 0 or self.integral < 0 \
                or self.derivative < 0 or self.min_rate <= 0:
            raise ConfigError("PID rate estimator: interval and minRate > 0, gains >= 0")
        self._lock = threading.Lock()  # batches may complete on several job threads
        self._first = True
        self._latest_time = -1
        self._latest_rate = -1.0
        self._latest_error = -1.0

    def compute(self, time_ms: int, elements: int, processing_delay_ms: int,
                scheduling_delay_ms: int) -> float | None:
        """A new rate (records/s), or None when there is nothing to learn from."""
        with self._lock:
            return self._compute(time_ms, elements, processing_delay_ms, scheduling_delay_ms)

    def _compute(self, time_ms: int, elements: int, processing_delay_ms: int,
                 scheduling_delay_ms: int) -> float | None:
        if time_ms <= self._latest_time or elements <= 0 or processing_delay_ms <= 0:
            return None
        delay_since_update = (time_ms - self._latest_time) / 1000
        processing_rate = elements / processing_delay_ms * 1000
        error = self._latest_rate - processing_rate
        historical_error = scheduling_delay_ms * processing_rate / self.batch_interval_ms
        d_error = (error - self._latest_error) / delay_since_update
        new_rate = max(self._latest_rate - self.proportional * error
                       - self.integral * historical_error - self.derivative * d_error,
                       self.min_rate)
        self._latest_time = time_ms
        if self._first:
            self._latest_rate, self._latest_error, self._first = processing_rate, 0.0, False
            return None
        self._latest_rate, self._latest_error = new_rate, error
        return new_rate

    @classmethod
    def from_conf(cls, conf: Mapping[str, str], batch_interval_ms: int) -> PIDRateEstimator:
        p = "spark.streaming.backpressure.pid."
        return cls(batch_interval_ms,
                   float(conf.get(p + "proportional", 1.0)),
                   float(conf.get(p + "integral", 0.2)),
                   float(conf.get(p + "derived", 0.0)),
                   float(conf.get(p + "minRate", 100)))


class RateController:
    """Feeds completed batches to the estimator and publishes new limits."""

    def __init__(self, estimator: PIDRateEstimator, publish: Callable[[float], None],
                 max_rate: float = 0.0) -> None:
        self.estimator = estimator
        self.publish = publish
        self.max_rate = max_rate
        self.latest_rate: float | None = None

    def on_batch_completed(self, time_ms: int, elements: int, processing_delay_ms: int,
                           scheduling_delay_ms: int) -> None:
        rate = self.estimator.compute(time_ms, elements, processing_delay_ms,
                                      scheduling_delay_ms)
        if rate is None:
            return
        if self.max_rate > 0:
            rate = min(rate, self.max_rate)
        self.latest_rate = rate
        log.info("backpressure: new receive rate %.0f records/s", rate)
        self.publish(rate)
