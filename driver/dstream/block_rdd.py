"""A batch's input as a PySpark RDD whose partitions read its WAL blocks.

Each partition holds the handles of a run of consecutive blocks; its task reads
them from Kafka by handle with one reader inside the Python worker
(:meth:`walstream.wal.reader.WalReader.read_many`) and yields their decoded items, block
after block. Reading by handle is deterministic, and the grouping depends only on
the blocks and the partition limit, so a batch re-run after a crash sees exactly
the same data in the same partitions.

Spark gives every block a partition of its own. A PySpark task costs tens of
milliseconds of scheduling and Python worker round trips, more than reading a
small block, so a batch of many small blocks (ten receivers, a backlog after a
restart) spends most of its time launching tasks. Here a stream's batch has at
most ``max_partitions`` partitions (``spark.walstream.blockRdd.maxPartitions``,
default Spark's default parallelism, at most the task slots the receivers leave
free: :func:`auto_max_partitions`; ``0`` keeps one partition per block), each a
contiguous run of the batch's items of equal counts (:func:`slice_blocks`): the
items come in the same order as with one partition per block, only the partition
boundaries differ. A block cut between two partitions is read by both, and each
yields its own part.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from walstream.errors import ConfigError
from walstream.receiver.block_info import ReceivedBlockInfo

CONF_MAX_PARTITIONS = "spark.walstream.blockRdd.maxPartitions"
#: The conf value for Spark's default parallelism (the default).
AUTO = "auto"


def max_partitions_from_conf(conf: Mapping[str, str]) -> int | None:
    """:data:`CONF_MAX_PARTITIONS` as an int: None for ``auto`` (Spark's default
    parallelism, read when a batch is made), ``0`` for one partition per block."""
    raw = str(conf.get(CONF_MAX_PARTITIONS, AUTO)).strip().lower()
    if raw == AUTO:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigError(f"{CONF_MAX_PARTITIONS} must be {AUTO!r} or an integer >= 0 "
                          f"(0: one partition per block), not {raw!r}")
    return value


def auto_max_partitions(sc: Any, receivers: int) -> int:
    """The ``auto`` limit: Spark's default parallelism, but no more than the task
    slots the application's ``receivers`` leave free (each holds one for good), so
    that a batch's partitions run in one wave."""
    from walstream.driver.warm_up import task_slots

    default = max(1, int(sc.defaultParallelism))
    free = task_slots(sc) - receivers
    return min(default, free) if free > 0 else default


def group_blocks(blocks: Sequence[ReceivedBlockInfo],
                 max_partitions: int) -> list[list[ReceivedBlockInfo]]:
    """``blocks`` cut, in order, into at most ``max_partitions`` non-empty runs of
    about equal record counts (``0``: one run per block)."""
    n = len(blocks)
    k = n if max_partitions <= 0 else min(n, max_partitions)
    if k == n:
        return [[b] for b in blocks]
    weights = [max(1, b.num_records) for b in blocks]
    total = sum(weights)
    groups: list[list[ReceivedBlockInfo]] = []
    done = 0
    start = 0
    for i in range(k - 1):
        # The i-th cut: where the running count passes (i + 1) / k of the total,
        # leaving at least one block for each run still to come.
        target = total * (i + 1) / k
        end = start + 1
        done += weights[start]
        while end < n - (k - 1 - i) and done + weights[end] / 2 < target:
            done += weights[end]
            end += 1
        groups.append(list(blocks[start:end]))
        start = end
    groups.append(list(blocks[start:]))
    return groups


#: A part of a block: the block, and its items ``[lo, hi)`` (``hi`` None: to its end).
Slice = tuple[ReceivedBlockInfo, int, int | None]


def slice_blocks(blocks: Sequence[ReceivedBlockInfo], max_partitions: int) -> list[list[Slice]]:
    """``blocks``' items cut, in order, into at most ``max_partitions`` runs of equal
    record counts (give or take one), never more runs than blocks (``0``: one run
    per block, uncut). A cut may fall inside a block: the block's first part ends one run
    and its rest begins the next, so a batch of five blocks on two task slots is
    two tasks of two and a half blocks each, not of two and of three.

    Every item is in exactly one run, in block order: a block's parts are
    contiguous, its first starts at item 0 and its last runs to the block's end
    (``hi`` None), whatever the count its info states. The cuts depend only on
    the blocks' record counts and the limit, so a re-run batch gets the same.
    """
    n = len(blocks)
    k = n if max_partitions <= 0 else min(n, max_partitions)
    counts = [max(0, b.num_records) for b in blocks]
    total = sum(counts)
    if max_partitions <= 0 or k <= 1 or total < k:
        return [[(b, 0, None) for b in run] for run in group_blocks(blocks, k)]
    # Where runs 2..k start, as indices into the batch's items: strictly rising
    # and inside (0, total), so no run is empty.
    cuts = [total * i // k for i in range(1, k)]
    runs: list[list[Slice]] = [[]]
    start = 0  # the batch index of the current block's first item
    c = 0
    for block, count in zip(blocks, counts, strict=True):
        lo = 0
        while c < len(cuts) and cuts[c] < start + count:
            at = cuts[c] - start
            if at > lo:
                runs[-1].append((block, lo, at))
                lo = at
            runs.append([])
            c += 1
        runs[-1].append((block, lo, None))
        start += count
    return runs


def _read_blocks(
    bootstrap_servers: str, timeout_s: float, kafka_settings: Mapping[str, str],
    groups: Iterable[list[dict[str, Any]]],
) -> Iterator[Any]:
    # Imported here: this runs in a PySpark Python worker.
    from walstream.receiver.block import block_items
    from walstream.wal.handle import RecordHandle
    from walstream.wal.reader import WalReader
    from walstream.worker_heap import freeze_once

    freeze_once()
    reader = WalReader(bootstrap_servers, timeout_s, dict(kafka_settings))
    try:
        parts = [part for run in groups for part in run]
        handles = [RecordHandle.from_dict(part["handle"]) for part in parts]
        for part, (data, _) in zip(parts, reader.read_many(handles), strict=True):
            items = block_items(data)
            lo, hi = part["lo"], part["hi"]
            yield from items if lo == 0 and hi is None else items[lo:hi]
    finally:
        reader.close()


@dataclass(frozen=True)
class _BlockSource:
    """How a block RDD was made, kept on it so that a union can read its blocks
    together with those of the other block RDDs (:func:`union_rdds`)."""

    blocks: tuple[ReceivedBlockInfo, ...]
    bootstrap_servers: str
    timeout_s: float
    kafka_settings: tuple[tuple[str, str], ...]
    max_partitions: int | None

    def same_reads(self, other: _BlockSource) -> bool:
        return (self.bootstrap_servers, self.timeout_s, self.kafka_settings,
                self.max_partitions) == (other.bootstrap_servers, other.timeout_s,
                                         other.kafka_settings, other.max_partitions)


#: The attribute of a block RDD that holds its :class:`_BlockSource`.
_SOURCE_ATTR = "_walstream_block_source"


def block_rdd(
    sc: Any,
    blocks: Sequence[ReceivedBlockInfo],
    bootstrap_servers: str,
    timeout_s: float = 60.0,
    kafka_settings: Mapping[str, str] | None = None,
    max_partitions: int | None = None,
) -> Any:
    """An RDD of the blocks' items (empty RDD for no blocks), in block order, with at
    most ``max_partitions`` partitions (``0``: one per block; None: Spark's default
    parallelism); its tasks read with the application's Kafka settings
    (``kafka_settings``: SASL, TLS, ...)."""
    settings = dict(kafka_settings or {})
    if not blocks:
        rdd = sc.emptyRDD()
    else:
        limit = int(sc.defaultParallelism) if max_partitions is None else max_partitions
        groups = [[{"handle": b.handle.to_dict(), "lo": lo, "hi": hi} for b, lo, hi in run]
                  for run in slice_blocks(blocks, limit)]
        reader = functools.partial(_read_blocks, bootstrap_servers, timeout_s, settings)
        # One element per slice: parallelize puts exactly one run in each partition.
        rdd = sc.parallelize(groups, len(groups)).mapPartitions(reader)
    setattr(rdd, _SOURCE_ATTR, _BlockSource(tuple(blocks), bootstrap_servers, timeout_s,
                                            tuple(sorted(settings.items())), max_partitions))
    return rdd


def union_rdds(rdds: Sequence[Any]) -> Any:
    """The union of ``rdds``, as ``SparkContext.union`` gives it (the items of the
    first, then of the second, ...).

    When every one is a block RDD read the same way and none is cached, the union
    is one block RDD over all their blocks in that order: the partition limit then
    holds for the union, so ten receivers' batch is not ten times the tasks."""
    sources = [getattr(r, _SOURCE_ATTR, None) for r in rdds]
    first = sources[0] if sources else None
    if (len(rdds) > 1 and first is not None
            and all(s is not None and s.same_reads(first) for s in sources)
            and not any(r.is_cached for r in rdds)):
        blocks = [b for s in sources if s is not None for b in s.blocks]
        return block_rdd(rdds[0].context, blocks, first.bootstrap_servers, first.timeout_s,
                         dict(first.kafka_settings), first.max_partitions)
    return rdds[0].context.union(list(rdds))
