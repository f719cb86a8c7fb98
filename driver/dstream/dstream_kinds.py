"""The DStream kinds behind the API: transforms, windows, state, outputs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from walstream.checkpoint.errors import CheckpointError
from walstream.driver.dstream.dstream import DStream
from walstream.driver.scheduler.job_scheduler import Job
from walstream.driver.sink.output_writer import output_writer, writing_as


class TransformedDStream(DStream):
    def __init__(self, parent: DStream, func: Callable[[datetime, Any], Any]) -> None:
        super().__init__(parent._ssc, parent._slide_ms, [parent], "transform")
        self._func = func

    def compute(self, t: int) -> Any:
        from walstream.driver.durations import time_of

        rdd = self._parents[0].get_or_compute(t)
        return None if rdd is None else self._func(time_of(t), rdd)


class MultiTransformedDStream(DStream):
    def __init__(self, parents: list[DStream], func: Callable[..., Any]) -> None:
        slides = {p._slide_ms for p in parents}
        if len(slides) != 1:
            from walstream.errors import ConfigError

            raise ConfigError("streams combined in one transform must have the same slide")
        super().__init__(parents[0]._ssc, parents[0]._slide_ms, parents, "transformWith")
        self._func = func

    def compute(self, t: int) -> Any:
        from walstream.driver.durations import time_of

        rdds = [p.get_or_compute(t) for p in self._parents]
        sc = self._ssc.sparkContext
        rdds = [r if r is not None else sc.emptyRDD() for r in rdds]
        return self._func(time_of(t), *rdds)


class WindowedDStream(DStream):
    """The union of the parent's RDDs in the window ``(t - window, t]``."""

    def __init__(self, parent: DStream, window_ms: int, slide_ms: int) -> None:
        super().__init__(parent._ssc, slide_ms, [parent], f"window({window_ms},{slide_ms})")
        self._window_ms = window_ms
        from pyspark import StorageLevel

        # The parent's RDDs are read by several windows: keep them (Spark does too).
        if parent._storage_level is None:
            parent.persist(StorageLevel.MEMORY_ONLY)

    def _parent_remember_ms(self) -> int:
        return self._remember_ms + self._window_ms

    def compute(self, t: int) -> Any:
        parent = self._parents[0]
        rdds = parent.slice_ms(t - self._window_ms + parent._slide_ms, t)
        sc = self._ssc.sparkContext
        return sc.union(rdds) if rdds else sc.emptyRDD()


class ReducedWindowedDStream(DStream):
    """reduceByKeyAndWindow with an inverse function: incremental windows.

    New window = previous window - (old slices, via ``inv``) + (new slices), when
    the window is at least 5 slides long (for shorter ones reducing the window
    again is cheaper); otherwise the whole window is reduced.
    """

    def __init__(self, reduced: DStream, func: Callable[[Any, Any], Any],
                 inv: Callable[[Any, Any], Any], window_ms: int, slide_ms: int,
                 partitions: int, filter_func: Callable[[Any], bool] | None) -> None:
        super().__init__(reduced._ssc, slide_ms, [reduced],
                         f"reduceByKeyAndWindow({window_ms},{slide_ms})")
        self._window_ms = window_ms
        self._func = func
        self._inv = inv
        self._n = partitions
        self._filter = filter_func
        self._must_checkpoint = True
        from pyspark import StorageLevel

        self._storage_level = StorageLevel.MEMORY_ONLY
        if reduced._storage_level is None:
            reduced.persist(StorageLevel.MEMORY_ONLY)

    def _parent_remember_ms(self) -> int:
        return self._remember_ms + self._window_ms

    def _set_remember(self, ms: int) -> None:
        super()._set_remember(max(ms, self._slide_ms))

    def _add(self, a: Any, b: Any) -> Any:
        func, n = self._func, self._n
        b = b.reduceByKey(func, n)
        r = a.union(b).reduceByKey(func, n) if a is not None else b
        return r.filter(self._filter) if self._filter else r

    def _subtract(self, a: Any, b: Any) -> Any:
        func, inv, n = self._func, self._inv, self._n
        b = b.reduceByKey(func, n)
        return a.leftOuterJoin(b, n).mapValues(
            lambda kv: inv(kv[0], kv[1]) if kv[1] is not None else kv[0])

    def compute(self, t: int) -> Any:
        parent = self._parents[0]
        sc = self._ssc.sparkContext
        prev_end = t - self._slide_ms
        previous = self.get_or_compute(prev_end) if self._valid(prev_end) else None
        if previous is not None and self._window_ms >= 5 * self._slide_ms:
            old = parent.slice_ms(prev_end - self._window_ms + parent._slide_ms,
                                  t - self._window_ms)
            subtracted = self._subtract(previous, sc.union(old)) if old else previous
            new = parent.slice_ms(prev_end + parent._slide_ms, t)
            return self._add(subtracted, sc.union(new)) if new else subtracted
        current = parent.slice_ms(t - self._window_ms + parent._slide_ms, t)
        return self._add(None, sc.union(current)) if current else None


class StateDStream(DStream):
    """updateStateByKey: state(t) = update(values(t), state(t - slide)) per key."""

    def __init__(self, parent: DStream, update: Callable[[list[Any], Any], Any],
                 partitions: int, initial: Any) -> None:
        super().__init__(parent._ssc, parent._slide_ms, [parent], "updateStateByKey")
        self._update = update
        self._n = partitions
        self._initial = initial
        self._must_checkpoint = True
        from pyspark import StorageLevel

        self._storage_level = StorageLevel.MEMORY_ONLY

    def _set_remember(self, ms: int) -> None:
        super()._set_remember(max(ms, self._slide_ms))

    def __getstate__(self) -> dict[str, Any]:
        # initialRDD seeds the first batch only; a restored graph gets its state
        # from the checkpointed state RDDs instead (and an RDD cannot be pickled).
        state = super().__getstate__()
        state["_initial"] = None
        return state

    def compute(self, t: int) -> Any:
        prev_t = t - self._slide_ms
        floor = self._restored_floor_ms
        if floor is not None and prev_t < floor and prev_t not in self._generated:
            # Its state is in no checkpoint: recomputing it from the stream's start
            # would read inputs cleanup dropped, through a lineage whose scheduling
            # grows exponentially with its length.
            raise CheckpointError(
                f"updateStateByKey: batch {t} needs the state of {prev_t}, older than "
                f"the oldest state restored from the checkpoint ({floor})")
        prev = self.get_or_compute(prev_t) if self._valid(prev_t) else self._initial
        new = self._parents[0].get_or_compute(t)
        if new is None:
            new = self._ssc.sparkContext.emptyRDD()
        update, n = self._update, self._n
        if prev is None:
            grouped = new.groupByKey(n).mapValues(lambda vs: (list(vs), None))
        else:
            grouped = prev.cogroup(new.partitionBy(n), n).mapValues(
                lambda ab: (list(ab[1]), next(iter(ab[0]), None)))
        state = grouped.mapValues(lambda vs_s: update(vs_s[0], vs_s[1]))
        return state.filter(lambda kv: kv[1] is not None)


class ForEachDStream(DStream):
    """An output operation: one job per batch."""

    def __init__(self, parent: DStream, func: Callable[[int, Any], None], name: str) -> None:
        super().__init__(parent._ssc, parent._slide_ms, [parent], f"output:{name}")
        self._func = func
        self._name = name
        self._output_id = parent._ssc._graph.add_output(self)

    def compute(self, t: int) -> Any:
        return None

    def generate_job(self, t: int) -> Job | None:
        rdd = self._parents[0].get_or_compute(t)
        if rdd is None:
            return None
        func, writer = self._func, self._writer()

        def run() -> None:
            if writer is None:
                func(t, rdd)
                return
            with writing_as(writer):  # exactly-once sinks key their output by it
                func(t, rdd)

        return Job(t, self._output_id, self._name, run,
                   f"{self._name} at output {self._output_id}")

    def _writer(self) -> str | None:
        """This output operation's writer identity (driver/sink/output_writer.py): the
        running engine's app id and this operation's place in the graph."""
        engine = self._ssc._engine
        return output_writer(engine.config.app_id, self._output_id) if engine else None
