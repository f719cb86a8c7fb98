"""Durations: PySpark's API takes seconds (floats); inside everything is milliseconds."""

from __future__ import annotations

from datetime import datetime

from walstream.errors import ConfigError


def to_ms(seconds: float | int, what: str = "duration") -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ConfigError(f"{what} must be a number of seconds, got {seconds!r}")
    ms = round(float(seconds) * 1000)
    if ms <= 0:
        raise ConfigError(f"{what} must be positive, got {seconds!r} s")
    return ms


_TIME_UNITS_MS = (("ms", 1), ("s", 1000), ("min", 60_000), ("m", 60_000), ("h", 3_600_000),
                  ("d", 86_400_000))


def conf_time_ms(raw: str, key: str, bare_unit_ms: int) -> int:
    """A Spark time setting ("200ms", "30s", "5min", "1h"; a bare number is in the
    setting's own unit, ``bare_unit_ms``) in milliseconds, as Spark's timeStringAs."""
    text = raw.strip().lower()
    for suffix, mult in _TIME_UNITS_MS:
        if text.endswith(suffix) and text[: -len(suffix)].strip().isdigit():
            return int(text[: -len(suffix)]) * mult
    if text.isdigit():
        return int(text) * bare_unit_ms
    raise ConfigError(f"{key} must be a time such as 200ms, 30s or 5min, not {raw!r}")


def check_multiple(ms: int, of_ms: int, what: str) -> None:
    if ms % of_ms != 0:
        raise ConfigError(
            f"{what} ({ms / 1000:g} s) must be a multiple of the slide duration "
            f"of its parent stream ({of_ms / 1000:g} s)")


def time_of(ms: int) -> datetime:
    """A batch time as PySpark gives it to foreachRDD/transform functions."""
    return datetime.fromtimestamp(ms / 1000.0)


def ms_of(t: datetime | float | int) -> int:
    if isinstance(t, datetime):
        return round(t.timestamp() * 1000)
    return round(float(t) * 1000)
