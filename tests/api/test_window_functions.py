"""PySpark's WindowFunctionTests (and the state tests), 0.5 s batches."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pytest

from tests.api.helpers import collect, run_func, sort_by_key
from walstream.driver import DStream, StreamingContext

pytestmark = pytest.mark.spark

FIVE = [range(1), range(2), range(3), range(4), range(5)]
SIX = [*FIVE, range(6)]


@pytest.fixture
def cssc(ssc: StreamingContext, tmp_path: Any) -> StreamingContext:
    """A context with a checkpoint directory (inverse windows and state need one)."""
    ssc.checkpoint(str(tmp_path / "checkpoint"))
    return ssc


def test_window(ssc: StreamingContext) -> None:
    run_func(ssc, FIVE, lambda d: d.window(1.5, 0.5).count(),
             [[1], [3], [6], [9], [12], [9], [5]])


def test_window_default_slide_is_the_parent_slide(ssc: StreamingContext) -> None:
    run_func(ssc, [[1], [2], [3]], lambda d: d.window(1.0), [[1], [1, 2], [2, 3], [3]])


def test_window_of_a_window_slides_by_the_outer_slide(ssc: StreamingContext) -> None:
    # window(1.0, 1.0) slides by 2 batches: [1, 2], [3, 4], then [5].
    run_func(ssc, [[1], [2], [3], [4], [5]], lambda d: d.window(1.0, 1.0).reduce(operator.add),
             [[3], [7], [5]])


def test_count_by_window(cssc: StreamingContext) -> None:
    run_func(cssc, FIVE, lambda d: d.countByWindow(1.5, 0.5),
             [[1], [3], [6], [9], [12], [9], [5]])


def test_count_by_window_large(cssc: StreamingContext) -> None:
    # A window of 5 slides is computed incrementally (previous - old + new).
    run_func(cssc, SIX, lambda d: d.countByWindow(2.5, 0.5),
             [[1], [3], [6], [10], [15], [20], [18], [15], [11], [6]])


def test_count_by_value_and_window(cssc: StreamingContext) -> None:
    expected = [[(0, 1)],
                [(0, 2), (1, 1)],
                [(0, 3), (1, 2), (2, 1)],
                [(0, 4), (1, 3), (2, 2), (3, 1)],
                [(0, 5), (1, 4), (2, 3), (3, 2), (4, 1)],
                [(0, 5), (1, 5), (2, 4), (3, 3), (4, 2), (5, 1)],
                [(0, 4), (1, 4), (2, 4), (3, 3), (4, 2), (5, 1)],
                [(0, 3), (1, 3), (2, 3), (3, 3), (4, 2), (5, 1)],
                [(0, 2), (1, 2), (2, 2), (3, 2), (4, 2), (5, 1)],
                [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]]
    run_func(cssc, SIX, lambda d: d.countByValueAndWindow(2.5, 0.5), expected, sort=True)


def test_group_by_key_and_window(cssc: StreamingContext) -> None:
    inputs = [[("a", i)] for i in range(5)]
    expected = [[("a", [0])], [("a", [0, 1])], [("a", [0, 1, 2])], [("a", [1, 2, 3])],
                [("a", [2, 3, 4])], [("a", [3, 4])], [("a", [4])]]
    run_func(cssc, inputs, lambda d: d.groupByKeyAndWindow(1.5, 0.5).mapValues(list), expected)


def test_group_by_key_and_window_large(cssc: StreamingContext) -> None:
    inputs = [[("a", i)] for i in range(6)]
    expected = [[("a", [0])], [("a", [0, 1])], [("a", [0, 1, 2])], [("a", [0, 1, 2, 3])],
                [("a", [0, 1, 2, 3, 4])], [("a", [1, 2, 3, 4, 5])], [("a", [2, 3, 4, 5])],
                [("a", [3, 4, 5])], [("a", [4, 5])], [("a", [5])]]
    run_func(cssc, inputs,
             lambda d: d.groupByKeyAndWindow(2.5, 0.5).mapValues(lambda vs: sorted(vs)),
             expected)


# Batch sums of FIVE: 0, 1, 3, 6, 10.
def test_reduce_by_window_without_inverse(ssc: StreamingContext) -> None:
    run_func(ssc, FIVE, lambda d: d.reduceByWindow(operator.add, None, 1.5, 0.5),
             [[0], [1], [4], [10], [19], [16], [10]])


def test_reduce_by_window_with_inverse(cssc: StreamingContext) -> None:
    run_func(cssc, FIVE, lambda d: d.reduceByWindow(operator.add, operator.sub, 2.5, 0.5),
             [[0], [1], [4], [10], [20], [20], [19], [16], [10], [0]])


def _pairs(d: DStream) -> DStream:
    return d.map(lambda x: (x % 2, x))


def test_reduce_by_key_and_window_without_inverse(ssc: StreamingContext) -> None:
    # Keys x % 2; per batch: {0: 0}, {0: 0, 1: 1}, {0: 2, 1: 1}, {0: 2, 1: 4}, {0: 6, 1: 4}.
    expected = [[(0, 0)], [(0, 0), (1, 1)], [(0, 2), (1, 2)], [(0, 4), (1, 6)],
                [(0, 10), (1, 9)], [(0, 8), (1, 8)], [(0, 6), (1, 4)]]
    run_func(ssc, FIVE,
             lambda d: _pairs(d).reduceByKeyAndWindow(operator.add, None, 1.5, 0.5),
             expected, sort=True)


def test_reduce_by_key_and_window_with_inverse(cssc: StreamingContext) -> None:
    # A window of 5 slides: computed incrementally; a key whose value went back to 0
    # stays (as Spark), unless filterFunc drops it.
    expected = [[(0, 0)], [(0, 0), (1, 1)], [(0, 2), (1, 2)], [(0, 4), (1, 6)],
                [(0, 10), (1, 10)], [(0, 10), (1, 10)], [(0, 10), (1, 9)],
                [(0, 8), (1, 8)], [(0, 6), (1, 4)], [(0, 0), (1, 0)]]
    sc = cssc.sparkContext
    pairs = _pairs(cssc.queueStream([sc.parallelize(list(r), 1) for r in FIVE]))
    plain = pairs.reduceByKeyAndWindow(operator.add, operator.sub, 2.5, 0.5)
    filtered = pairs.reduceByKeyAndWindow(operator.add, operator.sub, 2.5, 0.5,
                                          filterFunc=lambda kv: kv[1] > 0)
    got_filtered: list[list[Any]] = []
    filtered.foreachRDD(lambda rdd: got_filtered.append(sorted(rdd.collect())))
    got = collect(cssc, plain, len(expected))
    assert sort_by_key(got) == expected
    # Batch by batch: the same windows without the zero values (the first window's
    # key 0 has value 0 as well), the last window empty.
    assert got_filtered[:len(expected)] == [[kv for kv in w if kv[1] > 0] for w in expected]


def test_reduce_by_key_and_window_with_none_inv_func(ssc: StreamingContext) -> None:
    def func(d: DStream) -> DStream:
        return d.map(lambda x: (x, 1)).reduceByKeyAndWindow(operator.add, None, 5, 1) \
            .filter(lambda kv: kv[1] > 0).count()

    run_func(ssc, SIX, func, [[2], [4], [6], [6], [6], [6]])


def test_reduce_by_invalid_window(ssc: StreamingContext) -> None:
    d1 = ssc.queueStream([range(3), range(5), range(1), range(6)])
    with pytest.raises(ValueError, match=r"window duration .* must be a multiple"):
        d1.reduceByKeyAndWindow(None, None, 0.1, 0.1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"slide duration .* must be a multiple"):
        d1.reduceByKeyAndWindow(None, None, 1, 0.1)  # type: ignore[arg-type]


@pytest.mark.parametrize(("window", "slide"), [(0.7, None), (1.0, 0.3), (0.25, 0.5)])
def test_window_not_a_multiple_of_the_batch_raises(ssc: StreamingContext, window: float,
                                                   slide: float | None) -> None:
    stream = ssc.queueStream([[1]])
    with pytest.raises(ValueError, match=r"must be a multiple of the slide duration .*0\.5 s"):
        stream.window(window, slide)
    with pytest.raises(ValueError, match="must be a multiple"):
        stream.countByWindow(window, slide or 0.5)
    with pytest.raises(ValueError, match="must be a multiple"):
        stream.map(lambda x: (x, 1)).groupByKeyAndWindow(window, slide or 0.5)


def _updater(vs: list[int], s: list[int] | None) -> list[int]:
    if not s:
        s = []
    s.extend(vs)
    return s


def test_update_state_by_key(cssc: StreamingContext) -> None:
    inputs = [[("k", i)] for i in range(5)]
    expected = [[("k", v)] for v in
                [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4]]]
    run_func(cssc, inputs, lambda d: d.updateStateByKey(_updater), expected)


def test_update_state_by_key_initial_rdd(cssc: StreamingContext) -> None:
    initial = cssc.sparkContext.parallelize([("k", [0, 1])], 1)
    inputs = [[("k", i)] for i in range(2, 5)]
    expected = [[("k", v)] for v in [[0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3, 4]]]
    run_func(cssc, inputs, lambda d: d.updateStateByKey(_updater, initialRDD=initial),
             expected)


def _running_total(values: list[int], state: int | None) -> int:
    return sum(values) + (state or 0)


def test_update_state_by_key_running_totals(cssc: StreamingContext) -> None:
    inputs = [[("a", 1), ("b", 2)], [("a", 3)], [("b", 5), ("c", 1), ("a", 1)], []]
    expected = [[("a", 1), ("b", 2)], [("a", 4), ("b", 2)], [("a", 5), ("b", 7), ("c", 1)],
                [("a", 5), ("b", 7), ("c", 1)]]
    run_func(cssc, inputs, lambda d: d.updateStateByKey(_running_total), expected, sort=True)


def test_update_state_by_key_running_totals_from_an_initial_list(
        cssc: StreamingContext) -> None:
    inputs = [[("a", 1)], [("b", 5)]]
    expected = [[("a", 11), ("z", 100)], [("a", 11), ("b", 5), ("z", 100)]]
    run_func(cssc, inputs,
             lambda d: d.updateStateByKey(_running_total, 2, [("a", 10), ("z", 100)]),
             expected, sort=True)


def test_update_state_by_key_state_none_removes_the_key(cssc: StreamingContext) -> None:
    def update(values: list[int], state: int | None) -> int | None:
        total = sum(values) + (state or 0)
        return None if total >= 3 else total

    inputs = [[("a", 1), ("b", 3)], [("a", 1)], [("a", 1), ("c", 1)]]
    expected = [[("a", 1)], [("a", 2)], [("c", 1)]]
    run_func(cssc, inputs, lambda d: d.updateStateByKey(update), expected, sort=True)


@pytest.fixture
def no_checkpoint_dir(sc: Any) -> Any:
    """The shared SparkContext without a checkpoint directory (an earlier test's
    ``ssc.checkpoint()`` set one on it); there is no public way to unset it."""
    getattr(sc._jsc.sc(), "checkpointDir_$eq")(sc._jvm.scala.Option.empty())
    assert sc.getCheckpointDir() is None
    return sc


@pytest.mark.parametrize("make", [
    lambda d: d.map(lambda x: (x, 1)).updateStateByKey(_running_total),
    lambda d: d.map(lambda x: (x, 1)).reduceByKeyAndWindow(operator.add, operator.sub, 1, 0.5),
    lambda d: d.countByWindow(1, 0.5),
], ids=["updateStateByKey", "reduceByKeyAndWindow-inverse", "countByWindow"])
def test_missing_checkpoint_directory_fails_at_start(no_checkpoint_dir: Any,
                                                     ssc: StreamingContext,
                                                     make: Callable[[DStream], DStream]) -> None:
    make(ssc.queueStream([[1]])).pprint()
    with pytest.raises(ValueError, match=r"checkpoint directory has not been set.*"
                                         r"StreamingContext\.checkpoint\(\)"):
        ssc.start()
    assert StreamingContext.getActive() is None


def test_windows_without_inverse_do_not_need_a_checkpoint(ssc: StreamingContext) -> None:
    assert collect(ssc, ssc.queueStream([[1, 2]]).window(1.0, 0.5).count(), 1) == [[2]]


def test_the_spark_context_checkpoint_directory_is_enough(no_checkpoint_dir: Any,
                                                          ssc: StreamingContext,
                                                          tmp_path: Any) -> None:
    # As Spark (and PySpark's own test base, which only calls sc.setCheckpointDir).
    no_checkpoint_dir.setCheckpointDir(str(tmp_path / "sc-checkpoints"))
    inputs = [[("a", 1)], [("a", 2)]]
    run_func(ssc, inputs, lambda d: d.updateStateByKey(_running_total),
             [[("a", 1)], [("a", 3)]])
