"""PIDRateEstimator (the expectations of Spark's PIDRateEstimatorSuite) and RateController."""

from __future__ import annotations

import random

import pytest

from walstream.driver.scheduler.rate_controller import PIDRateEstimator, RateController
from walstream.errors import ConfigError


def default() -> PIDRateEstimator:
    return PIDRateEstimator(20)


@pytest.mark.parametrize("args", [
    (0, 1.0, 2.0, 3.0, 10.0),     # batch interval
    (-20, 1.0, 2.0, 3.0, 10.0),
    (20, -1.0, 2.0, 3.0, 10.0),   # proportional
    (20, 1.0, -2.0, 3.0, 10.0),   # integral
    (20, 1.0, 2.0, -3.0, 10.0),   # derivative
    (20, 1.0, 2.0, 3.0, 0.0),     # minRate
    (20, 1.0, 2.0, 3.0, -10.0),
])
def test_estimator_checks_ranges(args: tuple[int, float, float, float, float]) -> None:
    with pytest.raises(ConfigError):
        PIDRateEstimator(*args)
    with pytest.raises(ValueError):  # ConfigError is a ValueError, like Spark's
        PIDRateEstimator(*args)


def test_defaults_are_sparks() -> None:
    p = PIDRateEstimator(1000)
    assert (p.proportional, p.integral, p.derivative, p.min_rate) == (1.0, 0.2, 0.0, 100.0)


def test_first_estimate_is_none() -> None:
    assert default().compute(0, 10, 10, 0) is None


def test_second_estimate_is_not_none() -> None:
    p = default()
    p.compute(0, 10, 10, 0)
    assert p.compute(10, 10, 10, 0) == 1000  # 10 records in 10 ms


def test_no_estimate_when_no_time_difference_between_successive_calls() -> None:
    p = default()
    p.compute(0, 10, 10, 0)
    assert p.compute(10, 10, 10, 0) is not None
    assert p.compute(10, 10, 10, 0) is None
    assert p.compute(5, 10, 10, 0) is None  # going back in time
    assert p.compute(20, 10, 10, 0) is not None


def test_no_estimate_when_no_records_in_previous_batch() -> None:
    p = default()
    p.compute(0, 10, 10, 0)
    assert p.compute(10, 0, 10, 0) is None
    assert p.compute(20, -10, 10, 0) is None


def test_no_estimate_when_there_is_no_processing_delay() -> None:
    p = default()
    p.compute(0, 10, 10, 0)
    assert p.compute(10, 10, 0, 0) is None
    assert p.compute(20, 10, -10, 0) is None


def test_skipped_calls_do_not_count_as_the_first_run() -> None:
    p = default()
    assert p.compute(0, 0, 10, 0) is None
    assert p.compute(10, 10, 0, 0) is None
    assert p.compute(20, 10, 10, 0) is None  # this is the first real measurement
    assert p.compute(40, 10, 10, 0) == 1000


def test_estimate_is_never_less_than_min_rate() -> None:
    min_rate = 5.0
    p = PIDRateEstimator(20, 1.0, 1.0, 0.0, min_rate)
    # One update every 20 ms, 1 record, 20 ms of processing, a growing backlog: this
    # pushes the estimate down, but never below the minimum.
    res = [p.compute(i * 20, 1, 20, 100) for i in range(50)]
    assert res[0] is None
    assert res[1:] == [min_rate] * 49


def test_with_no_accumulated_or_positive_error_follows_the_processing_speed() -> None:
    p = PIDRateEstimator(20, 1.0, 1.0, 0.0, 10)
    # Increasing records per batch, constant processing time, no scheduling delay:
    # although the integral gain is > 0, the estimate follows the processing rate.
    res = [p.compute(i * 20, (i + 1) * 20, 20, 0) for i in range(50)]
    assert res[0] is None
    assert res[1:] == [(i + 1) * 1000.0 for i in range(1, 50)]


def test_with_no_accumulated_but_some_positive_error_follows_the_processing_speed() -> None:
    p = PIDRateEstimator(20, 1.0, 1.0, 0.0, 10)
    # Decreasing records per batch: the estimate asks for less and less.
    res = [p.compute(i * 20, (50 - i) * 20, 20, 0) for i in range(50)]
    assert res[0] is None
    assert res[1:] == [(50 - i) * 1000.0 for i in range(1, 50)]


def test_constant_processing_rate_converges_to_it() -> None:
    p = PIDRateEstimator(1000)
    # 2000 records processed in 500 ms every batch: 4000 records/s.
    res = [p.compute(1000 * (i + 1), 2000, 500, 0) for i in range(20)]
    assert res[0] is None
    assert all(r == pytest.approx(4000.0) for r in res[1:])


def test_with_some_accumulated_and_some_positive_error_stays_below_the_processing_speed() -> None:
    min_rate = 10.0
    p = PIDRateEstimator(20, 1.0, 0.01, 0.0, min_rate)
    rng = random.Random(1234)
    proc_ms = 20
    elements = [rng.randint(1000, 1999) for _ in range(50)]
    sched = [rng.randint(1, 19) for _ in range(50)]  # always some scheduling delay
    speeds = [e / proc_ms * 1000 for e in elements]
    res = [p.compute(i * 20, elements[i], proc_ms, sched[i]) for i in range(50)]
    assert res[0] is None
    for n in range(1, 50):
        r = res[n]
        assert r is not None
        assert r < speeds[n]
        assert r >= min_rate


def test_scheduling_delay_lowers_the_rate_below_the_processing_rate() -> None:
    a, b = PIDRateEstimator(1000), PIDRateEstimator(1000)
    for p in (a, b):
        p.compute(1000, 2000, 500, 0)
    no_delay = a.compute(2000, 2000, 500, 0)
    delayed = b.compute(2000, 2000, 500, 300)
    assert no_delay == pytest.approx(4000.0)
    assert delayed is not None and delayed < 4000.0
    # integral 0.2 * (300 ms * 4000/s / 1000 ms) = 240 below.
    assert delayed == pytest.approx(4000.0 - 0.2 * 300 * 4000 / 1000)


def test_derivative_term() -> None:
    p = PIDRateEstimator(1000, proportional=1.0, integral=0.0, derivative=0.5, min_rate=1)
    p.compute(1000, 1000, 1000, 0)  # 1000/s: latest rate 1000, latest error 0
    # 2000/s measured 1 s later: error = 1000 - 2000 = -1000, dError = -1000/s.
    r = p.compute(2000, 2000, 1000, 0)
    assert r == pytest.approx(1000 + 1000 + 0.5 * 1000)


def test_from_conf_reads_the_pid_keys() -> None:
    conf = {
        "spark.streaming.backpressure.pid.proportional": "0.5",
        "spark.streaming.backpressure.pid.integral": "0.1",
        "spark.streaming.backpressure.pid.derived": "0.3",
        "spark.streaming.backpressure.pid.minRate": "42",
        "spark.streaming.backpressure.enabled": "true",
    }
    p = PIDRateEstimator.from_conf(conf, 2000)
    assert p.batch_interval_ms == 2000
    assert (p.proportional, p.integral, p.derivative, p.min_rate) == (0.5, 0.1, 0.3, 42.0)
    d = PIDRateEstimator.from_conf({}, 500)
    assert (d.batch_interval_ms, d.proportional, d.integral, d.derivative, d.min_rate) == \
        (500, 1.0, 0.2, 0.0, 100.0)
    with pytest.raises(ConfigError):
        PIDRateEstimator.from_conf({"spark.streaming.backpressure.pid.minRate": "0"}, 500)


# -- RateController ---------------------------------------------------------------------------


def test_rate_controller_publishes_each_new_rate() -> None:
    published: list[float] = []
    rc = RateController(PIDRateEstimator(1000), published.append)
    rc.on_batch_completed(1000, 2000, 500, 0)
    assert published == [] and rc.latest_rate is None  # first run: nothing to publish
    rc.on_batch_completed(2000, 2000, 500, 0)
    assert published == [pytest.approx(4000.0)]
    assert rc.latest_rate == pytest.approx(4000.0)
    rc.on_batch_completed(3000, 0, 500, 0)  # no records: no new rate
    rc.on_batch_completed(1500, 2000, 500, 0)  # earlier than the last update: no new rate
    assert len(published) == 1


def test_rate_controller_caps_at_max_rate() -> None:
    published: list[float] = []
    rc = RateController(PIDRateEstimator(1000), published.append, max_rate=1500)
    rc.on_batch_completed(1000, 2000, 500, 0)
    rc.on_batch_completed(2000, 2000, 500, 0)  # estimate 4000/s
    assert published == [1500]
    assert rc.latest_rate == 1500
    rc.on_batch_completed(3000, 1000, 1000, 0)  # estimate 1000/s, under the cap
    assert published == [1500, pytest.approx(1000.0)]


def test_rate_controller_without_max_rate_does_not_cap() -> None:
    published: list[float] = []
    rc = RateController(PIDRateEstimator(1000), published.append, max_rate=0)
    rc.on_batch_completed(1000, 100_000, 100, 0)
    rc.on_batch_completed(2000, 100_000, 100, 0)
    assert published == [pytest.approx(1_000_000.0)]
