"""The checks by which a follower learns that its caller's state no longer matches
the log it follows (:mod:`walstream.wal.follow`): records behind it it never yielded, or
records it yielded that a bound now leaves out. Either way the caller replays."""

from __future__ import annotations

import time
from collections.abc import Mapping

from walstream.wal.config import KafkaWalConfig
from walstream.wal.errors import FollowGapError, FollowOverrunError, FollowTimeoutError
from walstream.wal.reader import WalReader

_PARTITION = 0


def raise_on_gaps(name: str, bootstrap_servers: str, config: KafkaWalConfig,
                  behind: Mapping[str, int], deadline: float) -> None:
    """Raise :class:`FollowGapError` when a segment of ``behind`` (topic -> the offset
    where the follower left it, 0 for one it never read) now ends after that offset;
    :class:`FollowTimeoutError` when an end is not learnt by ``deadline``."""
    if not behind:
        return
    probe = WalReader(bootstrap_servers, config.read_timeout_s,
                      {**config.client_config, **config.consumer_config},
                      config.max_record_bytes)
    try:
        topics = sorted(behind)
        extents = probe.segment_extents(
            topics, _PARTITION, max(0.1, deadline - time.monotonic()))
    finally:
        probe.close()
    for topic in topics:
        if topic not in extents:
            raise FollowTimeoutError(f"WAL {name!r}: no end of {topic} within the drain's bound")
        if extents[topic][1] > behind[topic]:
            raise FollowGapError(
                f"WAL {name!r}: {topic} ends at offset {extents[topic][1]}, after "
                f"offset {behind[topic]} where the follower left it: a write raced a "
                "segment roll; replay the log again")


def raise_on_bound_mismatch(name: str, bound: Mapping[str, int], yielded: Mapping[str, int],
                            passed: Mapping[str, int]) -> None:
    """Check a bound given to a follower against what it did so far.

    ``yielded``: live segment -> the offset after the last record yielded from it;
    ``passed``: live segment it left or passed -> the offset where it stopped.
    Raises :class:`FollowOverrunError` when it yielded a record at or beyond an end of
    ``bound`` (or of a segment ``bound`` leaves out), :class:`FollowGapError` when it
    stopped in a segment before the end ``bound`` gives it.
    """
    for topic, end in yielded.items():
        if end > bound.get(topic, 0):
            raise FollowOverrunError(
                f"WAL {name!r}: yielded {topic} up to offset {end}, beyond the end "
                f"{bound.get(topic, 0)} of the bound; replay the log again")
    for topic, pos in passed.items():
        if pos < bound.get(topic, 0):
            raise FollowGapError(
                f"WAL {name!r}: left {topic} at offset {pos}, before the end "
                f"{bound[topic]} of the bound; replay the log again")
