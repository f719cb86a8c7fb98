"""PySpark's BasicOperationTests, on driver.StreamingContext (queue streams, 0.5 s batches)."""

from __future__ import annotations

import contextlib
import io
import operator
import os
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import reduce
from itertools import chain, pairwise
from typing import Any

import pytest

from tests.api.helpers import TIMEOUT, collect, run_func
from walstream.driver import DStream, StreamingContext
from walstream.testing import wait_until

pytestmark = pytest.mark.spark

RANGES = [range(1, 5), range(5, 9), range(9, 13)]


def test_map(ssc: StreamingContext) -> None:
    expected = [list(map(str, x)) for x in RANGES]
    run_func(ssc, RANGES, lambda d: d.map(str), expected)


def test_flat_map(ssc: StreamingContext) -> None:
    expected = [list(chain.from_iterable([y, y * 2] for y in x)) for x in RANGES]
    run_func(ssc, RANGES, lambda d: d.flatMap(lambda x: (x, x * 2)), expected)


def test_filter(ssc: StreamingContext) -> None:
    expected = [[y for y in x if y % 2 == 0] for x in RANGES]
    run_func(ssc, RANGES, lambda d: d.filter(lambda x: x % 2 == 0), expected)


def test_count(ssc: StreamingContext) -> None:
    inputs = [range(5), range(10), range(20)]
    run_func(ssc, inputs, lambda d: d.count(), [[len(x)] for x in inputs])


def test_reduce(ssc: StreamingContext) -> None:
    run_func(ssc, RANGES, lambda d: d.reduce(operator.add),
             [[reduce(operator.add, x)] for x in RANGES])


def test_reduce_by_key(ssc: StreamingContext) -> None:
    inputs = [[("a", 1), ("a", 1), ("b", 1), ("b", 1)],
              [("", 1), ("", 1), ("", 1), ("", 1)],
              [(1, 1), (1, 1), (2, 1), (2, 1), (3, 1)]]
    expected = [[("a", 2), ("b", 2)], [("", 4)], [(1, 2), (2, 2), (3, 1)]]
    run_func(ssc, inputs, lambda d: d.reduceByKey(operator.add), expected, sort=True)


def test_map_values(ssc: StreamingContext) -> None:
    inputs = [[("a", 2), ("b", 2), ("c", 1), ("d", 1)],
              [(0, 4), (1, 1), (2, 2), (3, 3)],
              [(1, 1), (2, 1), (3, 1), (4, 1)]]
    expected = [[("a", 12), ("b", 12), ("c", 11), ("d", 11)],
                [(0, 14), (1, 11), (2, 12), (3, 13)],
                [(1, 11), (2, 11), (3, 11), (4, 11)]]
    run_func(ssc, inputs, lambda d: d.mapValues(lambda x: x + 10), expected, sort=True)


def test_flat_map_values(ssc: StreamingContext) -> None:
    inputs = [[("a", 2), ("b", 2), ("c", 1), ("d", 1)],
              [(0, 4), (1, 1), (2, 1), (3, 1)],
              [(1, 1), (2, 1), (3, 1), (4, 1)]]
    expected = [[("a", 2), ("a", 12), ("b", 2), ("b", 12),
                 ("c", 1), ("c", 11), ("d", 1), ("d", 11)],
                [(0, 4), (0, 14), (1, 1), (1, 11), (2, 1), (2, 11), (3, 1), (3, 11)],
                [(1, 1), (1, 11), (2, 1), (2, 11), (3, 1), (3, 11), (4, 1), (4, 11)]]
    run_func(ssc, inputs, lambda d: d.flatMapValues(lambda x: (x, x + 10)), expected)


def test_glom(ssc: StreamingContext) -> None:
    rdds = [ssc.sparkContext.parallelize(r, 2) for r in RANGES]
    expected = [[[1, 2], [3, 4]], [[5, 6], [7, 8]], [[9, 10], [11, 12]]]
    run_func(ssc, rdds, lambda d: d.glom(), expected)


def test_map_partitions(ssc: StreamingContext) -> None:
    rdds = [ssc.sparkContext.parallelize(r, 2) for r in RANGES]

    def f(iterator: Any) -> Any:
        yield sum(iterator)

    run_func(ssc, rdds, lambda d: d.mapPartitions(f), [[3, 7], [11, 15], [19, 23]])


def test_map_partitions_with_index(ssc: StreamingContext) -> None:
    rdds = [ssc.sparkContext.parallelize(r, 2) for r in RANGES]

    def f(index: int, iterator: Any) -> Any:
        yield (index, sum(iterator))

    run_func(ssc, rdds, lambda d: d.mapPartitionsWithIndex(f),
             [[(0, 3), (1, 7)], [(0, 11), (1, 15)], [(0, 19), (1, 23)]])


def test_count_by_value(ssc: StreamingContext) -> None:
    inputs = [list(range(1, 5)) * 2, list(range(5, 7)) + list(range(5, 9)), ["a", "a", "b", ""]]
    expected = [[(1, 2), (2, 2), (3, 2), (4, 2)], [(5, 2), (6, 2), (7, 1), (8, 1)],
                [("a", 2), ("b", 1), ("", 1)]]
    run_func(ssc, inputs, lambda d: d.countByValue(), expected, sort=True)


GROUP_INPUT = [[(1, 1), (2, 1), (3, 1), (4, 1)],
               [(1, 1), (1, 1), (1, 1), (2, 1), (2, 1), (3, 1)],
               [("a", 1), ("a", 1), ("b", 1), ("", 1), ("", 1), ("", 1)]]


def test_group_by_key(ssc: StreamingContext) -> None:
    expected = [[(1, [1]), (2, [1]), (3, [1]), (4, [1])],
                [(1, [1, 1, 1]), (2, [1, 1]), (3, [1])],
                [("a", [1, 1]), ("b", [1]), ("", [1, 1, 1])]]
    run_func(ssc, GROUP_INPUT, lambda d: d.groupByKey().mapValues(list), expected, sort=True)


def test_combine_by_key(ssc: StreamingContext) -> None:
    def add(a: str, b: Any) -> str:
        return a + str(b)

    expected = [[(1, "1"), (2, "1"), (3, "1"), (4, "1")],
                [(1, "111"), (2, "11"), (3, "1")],
                [("a", "11"), ("b", "1"), ("", "111")]]
    run_func(ssc, GROUP_INPUT, lambda d: d.combineByKey(str, add, add), expected, sort=True)


def test_repartition(ssc: StreamingContext) -> None:
    rdds = [ssc.sparkContext.parallelize(r, 2) for r in [range(1, 5), range(5, 9)]]
    run_func(ssc, rdds, lambda d: d.repartition(1).glom(), [[[1, 2, 3, 4]], [[5, 6, 7, 8]]])


def test_partition_by(ssc: StreamingContext) -> None:
    inputs = [[(1, "a"), (2, "b"), (3, "c"), (4, "d")], [(5, "e"), (6, "f")]]
    # portable_hash of an int is the int: keys land in partition key % 2.
    expected = [[[(2, "b"), (4, "d")], [(1, "a"), (3, "c")]], [[(6, "f")], [(5, "e")]]]
    run_func(ssc, inputs, lambda d: d.partitionBy(2).glom().map(sorted), expected)


def test_partition_by_with_a_partition_func(ssc: StreamingContext) -> None:
    inputs = [[(1, "a"), (2, "b"), (3, "c"), (4, "d")]]
    expected = [[[(1, "a"), (2, "b")], [], [(3, "c"), (4, "d")]]]
    run_func(ssc, inputs,
             lambda d: d.partitionBy(3, lambda k: 0 if k < 3 else 2).glom().map(sorted),
             expected)


def test_pair_operations_honour_num_partitions(ssc: StreamingContext) -> None:
    left = ssc.queueStream([[(k, k) for k in range(8)]])
    right = ssc.queueStream([[(k, -k) for k in range(0, 8, 2)]])
    ops = {
        "reduceByKey": left.reduceByKey(operator.add, 3),
        "groupByKey": left.groupByKey(4).mapValues(list),
        "combineByKey": left.combineByKey(str, lambda a, b: a + str(b),
                                          lambda a, b: a + b, 2),
        "join": left.join(right, 3),
        "cogroup": left.cogroup(right, 5).mapValues(lambda vs: tuple(map(list, vs))),
    }
    got: dict[str, tuple[int, list[Any]]] = {}

    def record(name: str) -> Callable[[Any], object]:
        # Not ``lambda rdd, name=name``: as in PySpark, a function of two positional
        # parameters is called as f(time, rdd).
        return lambda rdd: got.setdefault(name, (rdd.getNumPartitions(),
                                                 sorted(rdd.collect())))

    for name, stream in ops.items():
        stream.foreachRDD(record(name))
    ssc.start()
    wait_until(lambda: len(got) == len(ops), TIMEOUT, "one batch of every operation", ssc=ssc)
    ssc.stop(False)
    assert got["reduceByKey"] == (3, [(k, k) for k in range(8)])
    assert got["groupByKey"] == (4, [(k, [k]) for k in range(8)])
    assert got["combineByKey"] == (2, [(k, str(k)) for k in range(8)])
    assert got["join"] == (3, [(k, (k, -k)) for k in range(0, 8, 2)])
    assert got["cogroup"] == (5, [(k, ([k], [-k] if k % 2 == 0 else [])) for k in range(8)])


def test_union(ssc: StreamingContext) -> None:
    input1 = [range(3), range(5), range(6)]
    input2 = [range(3, 6), range(5, 6)]
    expected = [list(range(6)), list(range(6)), list(range(6))]
    run_func(ssc, input1, lambda d1, d2: d1.union(d2), expected, inputs2=input2)


def test_cogroup(ssc: StreamingContext) -> None:
    inputs = [[(1, 1), (2, 1), (3, 1)], [(1, 1), (1, 1), (1, 1), (2, 1)],
              [("a", 1), ("a", 1), ("b", 1), ("", 1), ("", 1)], []]
    inputs2 = [[(1, 2)], [(4, 1)], [("a", 1), ("a", 1), ("b", 1), ("", 1), ("", 2)], [("", 1)]]

    def func(d1: DStream, d2: DStream) -> DStream:
        return d1.cogroup(d2).mapValues(lambda vs: tuple(map(list, vs)))

    expected = [[(1, ([1], [2])), (2, ([1], [])), (3, ([1], []))],
                [(1, ([1, 1, 1], [])), (2, ([1], [])), (4, ([], [1]))],
                [("a", ([1, 1], [1, 1])), ("b", ([1], [1])), ("", ([1, 1], [1, 2]))],
                [("", ([], [1]))]]
    run_func(ssc, inputs, func, expected, sort=True, inputs2=inputs2)


JOIN_LEFT = [[("a", 1), ("b", 2)]]
JOIN_RIGHT = [[("b", 3), ("c", 4)]]


def test_join(ssc: StreamingContext) -> None:
    run_func(ssc, JOIN_LEFT, lambda a, b: a.join(b), [[("b", (2, 3))]], inputs2=JOIN_RIGHT)


def test_left_outer_join(ssc: StreamingContext) -> None:
    run_func(ssc, JOIN_LEFT, lambda a, b: a.leftOuterJoin(b),
             [[("a", (1, None)), ("b", (2, 3))]], sort=True, inputs2=JOIN_RIGHT)


def test_right_outer_join(ssc: StreamingContext) -> None:
    run_func(ssc, JOIN_LEFT, lambda a, b: a.rightOuterJoin(b),
             [[("b", (2, 3)), ("c", (None, 4))]], sort=True, inputs2=JOIN_RIGHT)


def test_full_outer_join(ssc: StreamingContext) -> None:
    run_func(ssc, JOIN_LEFT, lambda a, b: a.fullOuterJoin(b),
             [[("a", (1, None)), ("b", (2, 3)), ("c", (None, 4))]], sort=True,
             inputs2=JOIN_RIGHT)


def test_transform_with_the_rdd_only(ssc: StreamingContext) -> None:
    run_func(ssc, RANGES, lambda d: d.transform(lambda rdd: rdd.map(lambda x: x * 10)),
             [[y * 10 for y in x] for x in RANGES])


def test_transform_with_time_and_rdd(ssc: StreamingContext) -> None:
    times: list[Any] = []

    def func(t: datetime, rdd: Any) -> Any:
        times.append(t)
        return rdd.map(lambda x: (t, x))

    result = collect(ssc, ssc.queueStream([[1], [2], [3]]).transform(func), 3)
    assert all(isinstance(t, datetime) for t in times)
    batch_times = [batch[0][0] for batch in result]
    assert [batch[0][1] for batch in result] == [1, 2, 3]
    assert all(isinstance(t, datetime) for t in batch_times)
    assert [b - a for a, b in pairwise(batch_times)] == \
        [timedelta(seconds=0.5)] * 2


def test_transform_pair_rdd(ssc: StreamingContext) -> None:
    # SPARK-17756: a transform may return an RDD of pairs built from the batch.
    dstream = ssc.queueStream([[1], [2], [3]]).transform(lambda rdd: rdd.cartesian(rdd))
    assert collect(ssc, dstream, 3) == [[(1, 1)], [(2, 2)], [(3, 3)]]


def test_transform_with(ssc: StreamingContext) -> None:
    run_func(ssc, [[1, 2], [3]],
             lambda a, b: a.transformWith(lambda r1, r2: r1.cartesian(r2), b),
             [[(1, "x"), (2, "x")], [(3, "y")]], inputs2=[["x"], ["y"]])


def test_transform_with_time(ssc: StreamingContext) -> None:
    def func(t: datetime, r1: Any, r2: Any) -> Any:
        assert isinstance(t, datetime)
        return r1.union(r2).map(lambda x: (x, isinstance(t, datetime)))

    run_func(ssc, [[1], [2]], lambda a, b: a.transformWith(func, b),
             [[(1, True), (10, True)], [(2, True), (20, True)]], inputs2=[[10], [20]])


def test_foreach_rdd_with_rdd_only_and_with_time(ssc: StreamingContext) -> None:
    counts: list[int] = []
    timed: list[tuple[Any, list[int]]] = []
    stream = ssc.queueStream([[1, 2], [3], [4, 5, 6]])
    stream.foreachRDD(lambda rdd: counts.append(rdd.count()))
    stream.foreachRDD(lambda t, rdd: timed.append((t, rdd.collect())))
    ssc.start()
    wait_until(lambda: len(timed) >= 3 and len(counts) >= 3, TIMEOUT, "3 batches", ssc=ssc)
    ssc.stop(False)
    assert counts[:3] == [2, 1, 3]
    assert [r for _, r in timed[:3]] == [[1, 2], [3], [4, 5, 6]]
    times = [t for t, _ in timed[:3]]
    assert all(isinstance(t, datetime) for t in times)
    # Batch times are multiples of the batch duration, 0.5 s apart.
    assert all(t.microsecond in (0, 500_000) for t in times)
    assert [b - a for a, b in pairwise(times)] == [timedelta(seconds=0.5)] * 2


def _pprint_blocks(out: str) -> list[list[str]]:
    """Split pprint's output into blocks: dashes, Time, dashes, records, blank."""
    lines = out.split("\n")
    blocks: list[list[str]] = []
    i = 0
    while i < len(lines):
        if lines[i] == "-" * 43:
            assert lines[i + 1].startswith("Time: ")
            assert lines[i + 2] == "-" * 43
            j = i + 3
            while lines[j] != "":
                j += 1
            blocks.append([lines[i + 1], *lines[i + 3:j]])
            i = j + 1
        else:
            i += 1
    return blocks


def test_pprint(ssc: StreamingContext) -> None:
    inputs = [list(range(12)), [1, 2], list(range(10)), ["a"]]
    stream = ssc.queueStream(inputs)
    done: list[Any] = []
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        stream.pprint()
        stream.map(lambda x: f"<{x}>").pprint(num=1)
        stream.foreachRDD(lambda t, rdd: done.append(t))
        ssc.start()
        wait_until(lambda: len(done) >= 4, TIMEOUT, "4 batches", ssc=ssc)
        ssc.stop(False)
    blocks = _pprint_blocks(buf.getvalue())
    assert len(blocks) >= 8
    times = [datetime.fromisoformat(b[0][len("Time: "):]) for b in blocks]
    assert times[:8:2] == done[:4] and times[1:8:2] == done[:4]
    records = [b[1:] for b in blocks[:8]]
    assert records == [
        [str(i) for i in range(10)] + ["..."], ["<0>", "..."],
        ["1", "2"], ["<1>", "..."],
        [str(i) for i in range(10)], ["<0>", "..."],   # exactly num records: no "..."
        ["a"], ["<a>"],
    ]
    # The raw text, as PySpark prints it: a blank line ends each block.
    assert buf.getvalue().startswith(
        "-------------------------------------------\n"
        f"Time: {done[0]}\n"
        "-------------------------------------------\n0\n1\n")
    assert "8\n9\n...\n\n" in buf.getvalue()


def test_slice(make_ssc: Callable[..., StreamingContext]) -> None:
    ssc = make_ssc(0.5)
    # Keep the sliced RDDs while the test reads them (PySpark's test: 4 s at 1 s batches;
    # longer here, so a loaded machine cannot clear them mid-test).
    ssc.remember(20.0)
    sc = ssc.sparkContext
    inputs = [[1], [2], [3], [4]]
    stream = ssc.queueStream([sc.parallelize(d, 1) for d in inputs])
    time_vals: list[datetime] = []

    def get_times(t: datetime, rdd: Any) -> None:
        if rdd and len(time_vals) < len(inputs):
            time_vals.append(t)

    stream.foreachRDD(get_times)
    ssc.start()
    try:
        wait_until(lambda: len(time_vals) >= 4, TIMEOUT, "4 batches", ssc=ssc)
        begin_time = time_vals[0]

        def get_sliced(begin_delta: float, end_delta: float) -> set[int]:
            begin = begin_time + timedelta(seconds=begin_delta)
            end = begin_time + timedelta(seconds=end_delta)
            rdds = stream.slice(begin, end)
            return {r for rdd in rdds for r in rdd.collect()}

        assert get_sliced(0, 0) == {1}
        assert get_sliced(0.5, 1.0) == {2, 3}
        assert get_sliced(0.5, 2.0) == {2, 3, 4}
        assert get_sliced(0, 2.0) == {1, 2, 3, 4}
        # Times between batch times are floored to one (Spark's DStream.slice).
        assert get_sliced(0.2, 0.7) == {1, 2}
        assert get_sliced(0.7, 0.7) == {2}
        assert get_sliced(0.6, 1.4) == {2, 3}
    finally:
        ssc.stop(False)


def _file_name(prefix: str, suffix: str | None, t: datetime) -> str:
    """PySpark's rddToFileName."""
    ms = int(time.mktime(t.timetuple()) * 1000) + t.microsecond // 1000
    return f"{prefix}-{ms}" + ("" if suffix is None else f".{suffix}")


def _read_text_dir(path: str) -> list[str]:
    lines: list[str] = []
    for name in sorted(os.listdir(path)):
        if name.startswith("part-"):
            with open(os.path.join(path, name)) as f:
                lines.extend(f.read().splitlines())
    return lines


def test_save_as_text_files(ssc: StreamingContext, tmp_path: Any) -> None:
    inputs: list[list[Any]] = [[1, 2, 3], [4], ["x", "y"]]
    prefix, prefix2 = str(tmp_path / "out"), str(tmp_path / "sub" / "other")
    stream = ssc.queueStream(inputs)
    stream.saveAsTextFiles(prefix)
    stream.saveAsTextFiles(prefix2, "txt")
    times: list[datetime] = []
    stream.foreachRDD(lambda t, rdd: times.append(t))
    # A re-run of a batch (after a driver crash) finds its directory written already:
    # pre-create stale output for every batch time this test may produce.
    batch_ms = 500
    first = (int(time.time() * 1000) // batch_ms + 1) * batch_ms
    stale_dirs = {f"{prefix}-{first + k * batch_ms}" for k in range(200)}
    for stale in stale_dirs:
        os.makedirs(stale)
        with open(os.path.join(stale, "part-00000"), "w") as f:
            f.write("stale\n")
    ssc.start()
    wait_until(lambda: len(times) >= 3, TIMEOUT, "3 batches", ssc=ssc)
    ssc.stop(False)
    for t, expected in zip(times[:3], inputs, strict=True):
        path = _file_name(prefix, None, t)
        assert path in stale_dirs, "the batch's directory existed before it ran"
        assert os.path.exists(os.path.join(path, "_SUCCESS"))
        assert sorted(_read_text_dir(path)) == sorted(str(x) for x in expected)
        path2 = _file_name(prefix2, "txt", t)
        assert os.path.isdir(path2), path2
        assert sorted(_read_text_dir(path2)) == sorted(str(x) for x in expected)


def test_a_failing_function_surfaces_in_await_termination(ssc: StreamingContext) -> None:
    def failed_func(i: Any) -> Any:
        raise ValueError("This is a special error")

    ssc.queueStream([[d] for d in range(4)]).map(failed_func).pprint()
    ssc.start()
    with pytest.raises(Exception, match="This is a special error"):
        ssc.awaitTerminationOrTimeout(60)
