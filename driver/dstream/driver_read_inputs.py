"""Inputs the driver reads itself (direct Kafka streams, file streams): the driver
decides and logs each batch's input, instead of receivers reporting blocks.

:class:`DriverReadInputDStream` is what the engine asks of them: prepare a batch
before its allocation is logged, clean what a checkpoint no longer needs, the source
ends the metrics show, and close the clients when the context stops.
"""

from __future__ import annotations

from abc import abstractmethod

from walstream.driver.dstream.dstream import InputDStream


class DriverReadInputDStream(InputDStream):
    """An input DStream whose batches the driver allocates (its ``stream_id`` names it
    in the tracker's events as a receiver's stream would be named)."""

    @abstractmethod
    def before_allocate(self, t: int) -> None:
        """Report batch ``t``'s input to the tracker, before ``t``'s allocation is
        logged; a retriable failure is retried by the job generator."""

    def clean(self, thresh_ms: int) -> None:
        """Forget what only batches older than ``thresh_ms`` needed (nothing here)."""
        return None

    def log_ends(self) -> dict[tuple[str, int], int]:
        """The source partitions read and their log ends, as last probed (none here)."""
        return {}

    def close(self) -> None:
        """Close this input's clients; the context is stopping (nothing here)."""
        return None


def before_allocate(streams: list[DriverReadInputDStream], t: int) -> None:
    for stream in streams:
        stream.before_allocate(t)


def clean_driver_streams(streams: list[DriverReadInputDStream], thresh_ms: int) -> None:
    for stream in streams:
        stream.clean(thresh_ms)


def log_ends(streams: list[DriverReadInputDStream]) -> dict[tuple[str, int], int]:
    """The direct streams' source partitions and their log ends, as last probed."""
    return {k: v for stream in streams for k, v in stream.log_ends().items()}
