"""Segment topics: how a named log is laid out over Kafka topics.

A log named ``N`` is a sequence of single-partition *segment topics*
``<prefix>N--<start_ms>-<end_ms>`` (13-digit, zero-padded, like Spark's rolling
``log-<start>-<end>`` files; the end is in the name so that a reader configured
with another rolling interval still knows it). A record with time ``t`` goes to
the writer's current segment while ``t < end``; otherwise the writer rolls to a
new segment starting at ``t`` rounded down to the rolling interval.
Hence every record in a segment has a time below the segment's end, and
``clean(thresh)`` may delete every segment whose end is ``<= thresh`` whole, which
reclaims space on any broker (Tansu has no ``delete_records``; Apache Kafka could
use it, but whole-topic deletion works on both and needs no retention tuning).

The threshold of the last clean is kept in an empty *marker topic*
``<prefix>N--cleaned--<thresh_ms>``, so that ``read_all`` in any process also
skips the records older than it that sit in the segment straddling the threshold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DIGITS = 13


@dataclass(frozen=True, order=True)
class Segment:
    start_ms: int
    end_ms: int
    topic: str


def segment_topic(prefix: str, name: str, start_ms: int, end_ms: int) -> str:
    return f"{prefix}{name}--{start_ms:0{_DIGITS}d}-{end_ms:0{_DIGITS}d}"


def marker_topic(prefix: str, name: str, thresh_ms: int) -> str:
    return f"{prefix}{name}--cleaned--{thresh_ms:0{_DIGITS}d}"


def parse_topics(
    topics: list[str], prefix: str, name: str
) -> tuple[list[Segment], dict[int, str]]:
    """Return (segments sorted by start, {clean threshold: marker topic})."""
    base = re.escape(f"{prefix}{name}--")
    seg_re = re.compile(rf"^{base}(\d{{{_DIGITS}}})-(\d{{{_DIGITS}}})$")
    mark_re = re.compile(rf"^{base}cleaned--(\d{{{_DIGITS}}})$")
    segments: list[Segment] = []
    markers: dict[int, str] = {}
    for t in topics:
        m = seg_re.match(t)
        if m:
            segments.append(Segment(int(m.group(1)), int(m.group(2)), t))
            continue
        m = mark_re.match(t)
        if m:
            markers[int(m.group(1))] = t
    segments.sort()
    return segments, markers


def aligned_start(time_ms: int, interval_ms: int) -> int:
    return time_ms - time_ms % interval_ms


_ANY_SEGMENT_RE = re.compile(rf"--(\d{{{_DIGITS}}})-(\d{{{_DIGITS}}})$")


def segment_start_of(topic: str) -> int | None:
    """The start (ms) of the segment topic ``topic`` of any log; None when ``topic``
    is not a segment topic. Every record in it has a time at or after the start, so
    a clean below the start never removes it."""
    m = _ANY_SEGMENT_RE.search(topic)
    return int(m.group(1)) if m else None
