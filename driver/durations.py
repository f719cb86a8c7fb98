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
