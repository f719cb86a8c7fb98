"""The source positions a receiver passes to ``store`` as metadata, checked and merged.

A block carries the source ranges of its records, and the driver's WAL is the
authority on how far a stream got: a relaunched receiver resumes there. So a
position the supervisor cannot read must not be ignored (the data would be
stored, the position lost, and exactly-once resumption broken with no error):
:func:`check_source_metadata` raises :class:`~walstream.receiver.errors.SourceMetadataError`
naming the shapes it accepts.
"""

from __future__ import annotations

from typing import Any

from walstream.receiver.block import SourceRange
from walstream.receiver.errors import SourceMetadataError

EXPECTED_SHAPES = (
    "None, a SourceRange(topic, partition, from_offset, until_offset), a "
    "(topic, partition, offset) tuple of (str, int, int), or a list or tuple of SourceRange"
)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_range(r: SourceRange) -> None:
    if not (isinstance(r.topic, str) and _is_int(r.partition) and _is_int(r.from_offset)
            and _is_int(r.until_offset)):
        raise SourceMetadataError(f"source metadata {r!r} has fields of the wrong types; "
                                  f"expected {EXPECTED_SHAPES}")
    if r.partition < 0 or not 0 <= r.from_offset <= r.until_offset:
        raise SourceMetadataError(
            f"source metadata {r!r} is not a range (needs 0 <= partition and "
            f"0 <= from_offset <= until_offset); expected {EXPECTED_SHAPES}")


def check_source_metadata(metadata: Any) -> None:
    """Return when ``metadata`` is one of the accepted shapes; raise
    :class:`SourceMetadataError` naming them otherwise. Cheap enough for once per
    stored record (a few ``isinstance`` checks for the tuple form)."""
    if metadata is None:
        return
    if type(metadata) is tuple and len(metadata) == 3 and isinstance(metadata[0], str):
        _, partition, offset = metadata
        if _is_int(partition) and _is_int(offset) and partition >= 0 and offset >= 0:
            return
        raise SourceMetadataError(
            f"source metadata {metadata!r}: a (topic, partition, offset) tuple needs "
            f"a str and two ints >= 0; expected {EXPECTED_SHAPES}")
    if isinstance(metadata, SourceRange):
        _check_range(metadata)
        return
    if isinstance(metadata, list | tuple) and all(isinstance(m, SourceRange) for m in metadata):
        for m in metadata:
            _check_range(m)
        return
    raise SourceMetadataError(
        f"cannot read source positions from metadata of type {type(metadata).__name__} "
        f"({_short_repr(metadata)}); expected {EXPECTED_SHAPES}")


def _short_repr(x: Any, limit: int = 200) -> str:
    r = repr(x)
    return r if len(r) <= limit else f"{r[:limit]}... ({len(r) - limit} more chars)"


class SourceTracker:
    """Source ranges of the data in the generator's current buffer, one merged range
    per (topic, partition). Takes metadata :func:`check_source_metadata` accepted."""

    def __init__(self) -> None:
        self.ranges: dict[tuple[str, int], list[int]] = {}

    def add(self, metadata: Any) -> None:
        if metadata is None:
            return
        if isinstance(metadata, SourceRange):
            self._merge((metadata.topic, metadata.partition), metadata.from_offset,
                        metadata.until_offset)
        elif type(metadata) is tuple and len(metadata) == 3 and isinstance(metadata[0], str):
            self._merge((metadata[0], metadata[1]), metadata[2], metadata[2] + 1)
        elif isinstance(metadata, list | tuple):
            for m in metadata:  # the ranges of a batch of items (push_many)
                self.add(m)
        else:
            # Unreachable through the supervisor, which checks first; never drop it.
            check_source_metadata(metadata)

    def _merge(self, key: tuple[str, int], lo: int, hi: int) -> None:
        cur = self.ranges.get(key)
        if cur is None:
            self.ranges[key] = [lo, hi]
        else:
            cur[0], cur[1] = min(cur[0], lo), max(cur[1], hi)

    def take(self) -> tuple[SourceRange, ...]:
        out = tuple(SourceRange(t, p, lo, hi) for (t, p), (lo, hi) in sorted(self.ranges.items()))
        self.ranges = {}
        return out
