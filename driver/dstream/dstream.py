"""DStream: a stream of PySpark RDDs, one per batch, with PySpark's DStream API.

Each operation returns a new DStream in the graph; on every batch time the
output operations ask their parents for that batch's RDD (``get_or_compute``),
which is built from real ``pyspark.RDD`` operations. RDDs are remembered per
DStream for as long as a window or state needs them, then unpersisted.
"""

from __future__ import annotations

import inspect
import operator
import os
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pyspark.rdd import portable_hash

from walstream.driver.dstream.block_rdd import union_rdds
from walstream.driver.durations import check_multiple, ms_of, time_of, to_ms
from walstream.errors import ConfigError

if TYPE_CHECKING:
    from walstream.driver.dstream.streaming_context import StreamingContext


def _arity(func: Callable[..., Any]) -> int:
    code = getattr(func, "__code__", None)
    if code is not None and not inspect.ismethod(func):
        return int(code.co_argcount)
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return 1
    return sum(1 for p in params if p.default is inspect.Parameter.empty
               and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def with_time(func: Callable[..., Any], plain_args: int) -> Callable[..., Any]:
    """Accept PySpark's two shapes: ``f(rdd...)`` or ``f(time, rdd...)``."""
    if _arity(func) == plain_args:
        return lambda t, *rdds: func(*rdds)
    return func


class DStream:
    """A discretized stream (PySpark's ``pyspark.streaming.DStream`` API)."""

    def __init__(self, ssc: StreamingContext, slide_ms: int, parents: list[DStream],
                 kind: str) -> None:
        ssc._check_can_add_streams()
        self._ssc = ssc
        self._slide_ms = slide_ms
        self._parents = parents
        self._kind = kind
        self._generated: dict[int, Any] = {}
        self._storage_level: Any = None
        self._checkpoint_ms: int | None = None
        self._must_checkpoint = False
        self._remember_ms = 0
        self._zero_ms: int | None = None
        #: The oldest state time restored from a checkpoint (stateful streams).
        self._restored_floor_ms: int | None = None
        self._id = ssc._graph.register(self)

    # -- checkpointing of the graph (walstream.driver.dstream.graph_pickle) ---------------------

    def __getstate__(self) -> dict[str, Any]:
        # The context belongs to the process; generated RDDs cannot leave it (state
        # RDDs come back from their reliable checkpoint files).
        state = self.__dict__.copy()
        state["_ssc"] = None
        state["_generated"] = {}
        state["_restored_floor_ms"] = None  # this process's restore, not the next one's
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Graphs pickled before a stream kept its restored floor have no such entry.
        state.setdefault("_restored_floor_ms", None)
        self.__dict__.update(state)

    # -- engine side -------------------------------------------------------------

    def compute(self, t: int) -> Any:
        raise NotImplementedError

    def _valid(self, t: int) -> bool:
        return self._zero_ms is not None and t > self._zero_ms and \
            (t - self._zero_ms) % self._slide_ms == 0

    def get_or_compute(self, t: int) -> Any:
        if t in self._generated:
            return self._generated[t]
        if not self._valid(t):
            return None
        rdd = self.compute(t)
        if rdd is None:
            return None
        if self._storage_level is not None:
            rdd.persist(self._storage_level)
        if self._checkpoint_ms and (t - (self._zero_ms or 0)) % self._checkpoint_ms == 0:
            rdd.checkpoint()  # reliable checkpoint: cuts the lineage (SPARK-6847)
        self._generated[t] = rdd
        return rdd

    def _initialize(self, zero_ms: int) -> None:
        if self._zero_ms is not None:
            return
        self._zero_ms = zero_ms
        if self._must_checkpoint and self._checkpoint_ms is None:
            # Spark's default: the slide, but at least 10 s, as a multiple of the slide.
            self._checkpoint_ms = self._slide_ms * max(1, -(-10_000 // self._slide_ms))
        for p in self._parents:
            p._initialize(zero_ms)

    def _parent_remember_ms(self) -> int:
        return self._remember_ms

    def _set_remember(self, ms: int) -> None:
        # As Spark (DStream.initialize): a checkpointed stream remembers twice its
        # checkpoint interval, and so do its parents. After a restart its state is
        # the last checkpointed RDD, and the batches since then are recomputed from
        # the inputs' blocks, which cleanup must not have dropped yet.
        twice = 2 * self._checkpoint_ms if self._checkpoint_ms else 0
        self._remember_ms = max(self._remember_ms, ms, twice)
        for p in self._parents:
            p._set_remember(self._parent_remember_ms())

    def _clear_metadata(self, t: int) -> None:
        keep_after = t - max(self._remember_ms, self._slide_ms)
        # list(): batches are generated on another thread while this cleans up.
        for old in [x for x in list(self._generated) if x <= keep_after]:
            rdd = self._generated.pop(old, None)
            if rdd is not None and self._storage_level is not None:
                rdd.unpersist(False)
        for p in self._parents:
            p._clear_metadata(t)

    def _fingerprint(self) -> str:
        return f"{self._kind}#{self._id}({','.join(str(p._id) for p in self._parents)})"

    # -- PySpark API: basics -----------------------------------------------------

    def context(self) -> StreamingContext:
        return self._ssc

    def transform(self, func: Callable[..., Any]) -> DStream:
        from walstream.driver.dstream.dstream_kinds import TransformedDStream

        return TransformedDStream(self, with_time(func, 1))

    def transformWith(self, func: Callable[..., Any], other: DStream,  # noqa: N802
                      keepSerializer: bool = False) -> DStream:  # noqa: N803
        from walstream.driver.dstream.dstream_kinds import MultiTransformedDStream

        return MultiTransformedDStream([self, other], with_time(func, 2))

    def mapPartitionsWithIndex(self, f: Callable[[int, Iterable[Any]], Iterable[Any]],  # noqa: N802
                               preservesPartitioning: bool = False) -> DStream:  # noqa: N803
        return self.transform(lambda rdd: rdd.mapPartitionsWithIndex(f, preservesPartitioning))

    def mapPartitions(self, f: Callable[[Iterable[Any]], Iterable[Any]],  # noqa: N802
                      preservesPartitioning: bool = False) -> DStream:  # noqa: N803
        return self.transform(lambda rdd: rdd.mapPartitions(f, preservesPartitioning))

    def map(self, f: Callable[[Any], Any], preservesPartitioning: bool = False) -> DStream:  # noqa: N803
        return self.transform(lambda rdd: rdd.map(f, preservesPartitioning))

    def flatMap(self, f: Callable[[Any], Iterable[Any]],  # noqa: N802
                preservesPartitioning: bool = False) -> DStream:  # noqa: N803
        return self.transform(lambda rdd: rdd.flatMap(f, preservesPartitioning))

    def filter(self, f: Callable[[Any], bool]) -> DStream:
        return self.transform(lambda rdd: rdd.filter(f))

    def glom(self) -> DStream:
        return self.transform(lambda rdd: rdd.glom())

    def mapValues(self, f: Callable[[Any], Any]) -> DStream:  # noqa: N802
        return self.transform(lambda rdd: rdd.mapValues(f))

    def flatMapValues(self, f: Callable[[Any], Iterable[Any]]) -> DStream:  # noqa: N802
        return self.transform(lambda rdd: rdd.flatMapValues(f))

    def repartition(self, numPartitions: int) -> DStream:  # noqa: N803
        return self.transform(lambda rdd: rdd.repartition(numPartitions))

    def partitionBy(self, numPartitions: int,  # noqa: N802, N803
                    partitionFunc: Callable[[Any], int] = portable_hash) -> DStream:  # noqa: N803
        return self.transform(lambda rdd: rdd.partitionBy(numPartitions, partitionFunc))

    def reduce(self, func: Callable[[Any, Any], Any]) -> DStream:
        return self.map(lambda x: (None, x)).reduceByKey(func, 1).map(lambda kv: kv[1])

    def count(self) -> DStream:
        return self.mapPartitions(lambda it: [sum(1 for _ in it)]).reduce(operator.add)

    def countByValue(self) -> DStream:  # noqa: N802
        return self.map(lambda x: (x, 1)).reduceByKey(operator.add)

    def combineByKey(self, createCombiner: Callable[[Any], Any],  # noqa: N802, N803
                     mergeValue: Callable[[Any, Any], Any],  # noqa: N803
                     mergeCombiners: Callable[[Any, Any], Any],  # noqa: N803
                     numPartitions: int | None = None) -> DStream:  # noqa: N803
        n = numPartitions or self._ssc._default_parallelism()
        return self.transform(
            lambda rdd: rdd.combineByKey(createCombiner, mergeValue, mergeCombiners, n))

    def reduceByKey(self, func: Callable[[Any, Any], Any],  # noqa: N802
                    numPartitions: int | None = None) -> DStream:  # noqa: N803
        return self.combineByKey(lambda x: x, func, func, numPartitions)

    def groupByKey(self, numPartitions: int | None = None) -> DStream:  # noqa: N802, N803
        n = numPartitions or self._ssc._default_parallelism()
        return self.transform(lambda rdd: rdd.groupByKey(n))

    def union(self, other: DStream) -> DStream:
        if self._slide_ms != other._slide_ms:
            raise ConfigError("the two DStreams to union must have the same slide duration")
        return self.transformWith(lambda a, b: union_rdds((a, b)), other)

    def cogroup(self, other: DStream, numPartitions: int | None = None) -> DStream:  # noqa: N803
        n = numPartitions or self._ssc._default_parallelism()
        return self.transformWith(lambda a, b: a.cogroup(b, n), other)

    def join(self, other: DStream, numPartitions: int | None = None) -> DStream:  # noqa: N803
        n = numPartitions or self._ssc._default_parallelism()
        return self.transformWith(lambda a, b: a.join(b, n), other)

    def leftOuterJoin(self, other: DStream,  # noqa: N802
                      numPartitions: int | None = None) -> DStream:  # noqa: N803
        n = numPartitions or self._ssc._default_parallelism()
        return self.transformWith(lambda a, b: a.leftOuterJoin(b, n), other)

    def rightOuterJoin(self, other: DStream,  # noqa: N802
                       numPartitions: int | None = None) -> DStream:  # noqa: N803
        n = numPartitions or self._ssc._default_parallelism()
        return self.transformWith(lambda a, b: a.rightOuterJoin(b, n), other)

    def fullOuterJoin(self, other: DStream,  # noqa: N802
                      numPartitions: int | None = None) -> DStream:  # noqa: N803
        n = numPartitions or self._ssc._default_parallelism()
        return self.transformWith(lambda a, b: a.fullOuterJoin(b, n), other)

    # -- persistence and checkpointing ----------------------------------------------

    def persist(self, storageLevel: Any) -> DStream:  # noqa: N803
        self._storage_level = storageLevel
        return self

    def cache(self) -> DStream:
        from pyspark import StorageLevel

        return self.persist(StorageLevel.MEMORY_ONLY)

    def checkpoint(self, interval: float) -> DStream:
        ms = to_ms(interval, "checkpoint interval")
        check_multiple(ms, self._slide_ms, "checkpoint interval")
        self._must_checkpoint = True
        self._checkpoint_ms = ms
        return self

    # -- output operations --------------------------------------------------------

    def foreachRDD(self, func: Callable[..., Any]) -> None:  # noqa: N802
        from walstream.driver.dstream.dstream_kinds import ForEachDStream

        fn = with_time(func, 1)
        ForEachDStream(self, lambda t, rdd: fn(time_of(t), rdd), "foreachRDD")

    def pprint(self, num: int = 10) -> None:
        def take_and_print(t: datetime, rdd: Any) -> None:
            taken = rdd.take(num + 1)
            print("-------------------------------------------")
            print(f"Time: {t}")
            print("-------------------------------------------")
            for record in taken[:num]:
                print(record)
            if len(taken) > num:
                print("...")
            print("", flush=True)

        self.foreachRDD(take_and_print)

    def saveAsTextFiles(self, prefix: str, suffix: str | None = None) -> None:  # noqa: N802
        """Save each batch as ``prefix-<time_ms>[.suffix]``; a re-run overwrites (SPARK-4835)."""
        from walstream.driver.dstream.rerun_safe_output import overwrite_text_file

        def save(t: datetime, rdd: Any) -> None:
            path = f"{prefix}-{ms_of(t)}" + (f".{suffix}" if suffix else "")
            overwrite_text_file(rdd, path)

        self.foreachRDD(save)

    # -- windows and state ----------------------------------------------------------

    def _window_durations(self, window: float, slide: float | None) -> tuple[int, int]:
        w = to_ms(window, "window duration")
        s = self._slide_ms if slide is None else to_ms(slide, "slide duration")
        check_multiple(w, self._slide_ms, "window duration")
        check_multiple(s, self._slide_ms, "slide duration")
        return w, s

    def window(self, windowDuration: float, slideDuration: float | None = None) -> DStream:  # noqa: N803
        from walstream.driver.dstream.dstream_kinds import WindowedDStream

        w, s = self._window_durations(windowDuration, slideDuration)
        return WindowedDStream(self, w, s)

    def reduceByWindow(self, reduceFunc: Callable[[Any, Any], Any],  # noqa: N802, N803
                       invReduceFunc: Callable[[Any, Any], Any] | None,  # noqa: N803
                       windowDuration: float, slideDuration: float) -> DStream:  # noqa: N803
        keyed = self.map(lambda x: (1, x))
        reduced = keyed.reduceByKeyAndWindow(reduceFunc, invReduceFunc, windowDuration,
                                             slideDuration, 1)
        return reduced.map(lambda kv: kv[1])

    def countByWindow(self, windowDuration: float, slideDuration: float) -> DStream:  # noqa: N802, N803
        return self.map(lambda x: 1).reduceByWindow(operator.add, operator.sub,
                                                    windowDuration, slideDuration)

    def countByValueAndWindow(self, windowDuration: float, slideDuration: float,  # noqa: N802, N803
                              numPartitions: int | None = None) -> DStream:  # noqa: N803
        counted = self.map(lambda x: (x, 1)).reduceByKeyAndWindow(
            operator.add, operator.sub, windowDuration, slideDuration, numPartitions)
        return counted.filter(lambda kv: kv[1] > 0)

    def groupByKeyAndWindow(self, windowDuration: float, slideDuration: float,  # noqa: N802, N803
                            numPartitions: int | None = None) -> DStream:  # noqa: N803
        from pyspark.resultiterable import ResultIterable

        def merge(a: list[Any], b: list[Any]) -> list[Any]:
            return a + b

        def unmerge(a: list[Any], b: list[Any]) -> list[Any]:
            return a[len(b):]

        grouped = self.mapValues(lambda x: [x]).reduceByKeyAndWindow(
            merge, unmerge, windowDuration, slideDuration, numPartitions)
        return grouped.filter(lambda kv: len(kv[1]) > 0).mapValues(ResultIterable)

    def reduceByKeyAndWindow(self, func: Callable[[Any, Any], Any],  # noqa: N802
                             invFunc: Callable[[Any, Any], Any] | None,  # noqa: N803
                             windowDuration: float,  # noqa: N803
                             slideDuration: float | None = None,  # noqa: N803
                             numPartitions: int | None = None,  # noqa: N803
                             filterFunc: Callable[[Any], bool] | None = None) -> DStream:  # noqa: N803
        w, s = self._window_durations(windowDuration, slideDuration)
        reduced = self.reduceByKey(func, numPartitions)
        if invFunc is None:
            out = reduced.window(w / 1000, s / 1000).reduceByKey(func, numPartitions)
            return out.filter(filterFunc) if filterFunc else out
        from walstream.driver.dstream.dstream_kinds import ReducedWindowedDStream

        return ReducedWindowedDStream(reduced, func, invFunc, w, s,
                                      numPartitions or self._ssc._default_parallelism(),
                                      filterFunc)

    def updateStateByKey(self, updateFunc: Callable[[list[Any], Any], Any],  # noqa: N802, N803
                         numPartitions: int | None = None,  # noqa: N803
                         initialRDD: Any = None) -> DStream:  # noqa: N803
        from walstream.driver.dstream.dstream_kinds import StateDStream

        initial = initialRDD
        if initial is not None and not hasattr(initial, "mapPartitions"):
            initial = self._ssc.sparkContext.parallelize(list(initial))
        return StateDStream(self, updateFunc, numPartitions or self._ssc._default_parallelism(),
                            initial)

    def slice(self, begin: datetime | float, end: datetime | float) -> list[Any]:
        """The RDDs of the batches from ``begin`` to ``end``, both included; times that
        are not batch times are floored to one (as Spark's ``DStream.slice``)."""
        if self._zero_ms is None:
            raise ConfigError("slice() needs a started StreamingContext")
        return self.slice_ms(ms_of(begin), ms_of(end))

    def slice_ms(self, begin_ms: int, end_ms: int) -> list[Any]:
        zero = self._zero_ms if self._zero_ms is not None else 0
        first = begin_ms - (begin_ms - zero) % self._slide_ms  # floored, as Spark
        out = []
        for t in range(first, end_ms + 1, self._slide_ms):
            rdd = self.get_or_compute(t)
            if rdd is not None:
                out.append(rdd)
        return out

    def __repr__(self) -> str:
        return f"<DStream {self._kind} #{self._id} slide={self._slide_ms}ms pid={os.getpid()}>"


class InputDStream(DStream):
    """An input of the graph (Spark's ``InputDStream``): its ``stream_id`` names it in
    the block tracker's events, whether receivers report its blocks or the driver
    reads it itself."""

    stream_id: int
