"""What the engine asks of the inputs the driver reads itself (direct Kafka streams,
file streams): prepare a batch, clean, and the source ends the metrics show."""

from __future__ import annotations

from typing import Any


def before_allocate(streams: list[Any], t: int) -> None:
    for stream in streams:
        stream.before_allocate(t)


def clean_driver_streams(streams: list[Any], thresh_ms: int) -> None:
    for stream in streams:
        if hasattr(stream, "clean"):
            stream.clean(thresh_ms)


def log_ends(streams: list[Any]) -> dict[tuple[str, int], int]:
    """The direct streams' source partitions and their log ends, as last probed."""
    return {k: v for stream in streams if hasattr(stream, "log_ends")
            for k, v in stream.log_ends().items()}
