"""PySpark's StreamingContextTests and CheckpointTests' parts that need no recovery;
the listener tests are in test_listener.py, the receiver and Kafka inputs in
test_receiver_inputs.py."""

from __future__ import annotations

import json
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from tests.api.helpers import BATCH, TIMEOUT, add_input_stream, collect, take
from walstream.driver import StreamingContext
from walstream.testing import wait_until

pytestmark = pytest.mark.spark



# -- lifecycle -----------------------------------------------------------------------


def test_stop_only_streaming_context(sc: Any, ssc: StreamingContext) -> None:
    add_input_stream(ssc)
    ssc.start()
    ssc.stop(False)
    assert len(sc.parallelize(range(5), 5).glom().collect()) == 5


def test_stop_multiple_times(ssc: StreamingContext) -> None:
    add_input_stream(ssc)
    ssc.start()
    ssc.stop(False)
    ssc.stop(False)
    assert StreamingContext.getActive() is None


def test_a_started_context_runs_the_driver_gc_and_stop_ends_it(
        sc: Any, ssc: StreamingContext) -> None:
    add_input_stream(ssc)
    ssc.start()
    gc = ssc._driver_gc
    assert gc is not None and gc.interval_s == 300.0  # the default: 5min
    ssc.stop(False)
    assert not gc._thread.is_alive()


def test_the_driver_gc_request_reaches_the_real_jvm(sc: Any) -> None:
    from walstream.driver.driver_gc import PeriodicDriverGC

    gc = PeriodicDriverGC(sc, interval_s=0.05)
    gc._thread.start()
    try:
        wait_until(lambda: gc.collections >= 2, 30, "2 driver GCs", poll_s=0.05,
                   details=lambda: f"{gc.collections} GCs, last pause {gc.last_pause_s}")
    finally:
        gc.stop()
    assert gc.collections >= 2 and gc.last_pause_s is not None
    assert sc.parallelize([1, 2]).count() == 2  # the context is unharmed


def test_stop_before_start(sc: Any, ssc: StreamingContext) -> None:
    add_input_stream(ssc)
    ssc.stop(False)
    ssc.stop(False)
    with pytest.raises(ValueError, match="already been stopped"):
        ssc.start()
    assert StreamingContext.getActive() is None
    assert sc.parallelize([1, 2]).count() == 2


def test_stop_with_the_spark_context_default_is_true() -> None:
    import inspect

    assert inspect.signature(StreamingContext.stop).parameters["stopSparkContext"].default


def test_no_new_streams_after_start_or_stop(ssc: StreamingContext) -> None:
    stream = ssc.queueStream([[1]])
    stream.foreachRDD(lambda rdd: None)
    ssc.start()
    for add in (lambda: ssc.queueStream([[2]]), lambda: stream.map(str),
                lambda: stream.pprint(), lambda: ssc.union(stream, stream)):
        with pytest.raises(ValueError, match="Adding new inputs, transformations, and output "
                                             "operations after starting a context is not "
                                             "supported"):
            add()
    ssc.stop(False)
    with pytest.raises(ValueError, match="after stopping a context is not supported"):
        stream.count()


def test_start_twice_raises(ssc: StreamingContext) -> None:
    add_input_stream(ssc)
    ssc.start()
    with pytest.raises(ValueError, match="already been started"):
        ssc.start()
    assert StreamingContext.getActive() is ssc
    ssc.stop(False)
    with pytest.raises(ValueError, match="already been stopped"):
        ssc.start()


def test_start_without_outputs_raises(ssc: StreamingContext) -> None:
    ssc.queueStream([[1]]).map(str)
    with pytest.raises(ValueError, match="No output operations registered"):
        ssc.start()
    assert StreamingContext.getActive() is None


def test_only_one_active_context(make_ssc: Callable[..., StreamingContext]) -> None:
    first, second = make_ssc(BATCH), make_ssc(BATCH)
    add_input_stream(first)
    result = add_input_stream(second)
    first.start()
    with pytest.raises(ValueError, match="Only one StreamingContext may be started"):
        second.start()
    assert StreamingContext.getActive() is first
    first.stop(False)
    # The refused one was not started, so it still can be.
    second.start()
    assert StreamingContext.getActive() is second
    wait_until(lambda: len(result) >= 1, TIMEOUT, "a batch of the second context", ssc=second)
    second.stop(False)


def test_get_active(sc: Any, make_ssc: Callable[..., StreamingContext]) -> None:
    assert StreamingContext.getActive() is None
    ssc = make_ssc(BATCH)
    ssc.queueStream([[1]]).foreachRDD(lambda rdd: rdd.count())
    assert StreamingContext.getActive() is None
    ssc.start()
    assert StreamingContext.getActive() is ssc
    ssc.stop(False)
    assert StreamingContext.getActive() is None
    ssc = make_ssc(BATCH)
    ssc.queueStream([[1]]).foreachRDD(lambda rdd: rdd.count())
    ssc.start()
    assert StreamingContext.getActive() is ssc
    ssc.stop(False)
    assert StreamingContext.getActive() is None


def test_get_active_or_create(make_ssc: Callable[..., StreamingContext]) -> None:
    calls: list[StreamingContext] = []

    def setup_func() -> StreamingContext:
        ssc = make_ssc(BATCH)
        ssc.queueStream([[1]]).foreachRDD(lambda rdd: rdd.count())
        calls.append(ssc)
        return ssc

    assert StreamingContext.getActive() is None
    # No active context: setupFunc is called.
    ssc = StreamingContext.getActiveOrCreate(None, setup_func)
    assert calls == [ssc]
    # An active context is returned as it is, setupFunc not called.
    ssc.start()
    assert StreamingContext.getActiveOrCreate(None, setup_func) is ssc
    assert len(calls) == 1
    # Once it is stopped, setupFunc is called again.
    ssc.stop(False)
    ssc2 = StreamingContext.getActiveOrCreate(None, setup_func)
    assert calls == [ssc, ssc2] and ssc2 is not ssc


def test_await_termination_or_timeout(ssc: StreamingContext) -> None:
    add_input_stream(ssc)
    ssc.start()
    t0 = time.monotonic()
    assert ssc.awaitTerminationOrTimeout(0.001) is False
    assert ssc.awaitTerminationOrTimeout(0.3) is False
    assert time.monotonic() - t0 >= 0.3
    ssc.stop(False)
    assert ssc.awaitTerminationOrTimeout(0.001) is True


def test_await_termination_returns_when_stopped_elsewhere(ssc: StreamingContext) -> None:
    add_input_stream(ssc)
    ssc.start()
    stopper = threading.Timer(0.5, lambda: ssc.stop(False))
    stopper.start()
    done = threading.Event()

    def wait() -> None:
        ssc.awaitTermination()
        done.set()

    threading.Thread(target=wait, daemon=True).start()
    assert done.wait(TIMEOUT), "awaitTermination() did not return after stop()"
    stopper.join(TIMEOUT)


def test_await_termination_before_start_raises(ssc: StreamingContext) -> None:
    with pytest.raises(ValueError, match="not been started"):
        ssc.awaitTermination(0.1)


@pytest.mark.parametrize("where", ["map", "transformWith", "foreachRDD"])
def test_a_failing_job_surfaces_with_its_text(ssc: StreamingContext, where: str) -> None:
    import traceback

    stream = ssc.queueStream([[d] for d in range(4)])
    text = f"This is a special error in {where}"

    def failed_func(*args: Any) -> Any:
        raise ValueError(text)

    if where == "map":
        stream.map(failed_func).pprint()
    elif where == "transformWith":
        stream.transformWith(failed_func, ssc.queueStream([[1]])).pprint()
    else:
        stream.foreachRDD(failed_func)
    ssc.start()
    with pytest.raises(Exception) as info:
        ssc.awaitTermination(TIMEOUT)
    assert text in "".join(traceback.format_exception(info.value))
    assert text in str(info.value)
    with pytest.raises(Exception, match=text):
        ssc.awaitTerminationOrTimeout(0.01)  # raised again, as Spark's reportError
    ssc.stop(False)


# -- inputs ---------------------------------------------------------------------------


def test_queue_stream(ssc: StreamingContext) -> None:
    inputs = [list(range(i + 1)) for i in range(3)]
    assert collect(ssc, ssc.queueStream(inputs), 3) == inputs


def test_queue_stream_all_at_once(ssc: StreamingContext) -> None:
    inputs = [[1, 2], [3], [4, 5]]
    got: list[list[int]] = []
    ssc.queueStream(inputs, oneAtATime=False).foreachRDD(lambda rdd: got.append(rdd.collect()))
    ssc.start()
    wait_until(lambda: len(got) >= 3, TIMEOUT, "3 batches", ssc=ssc)
    ssc.stop(False)
    assert got[0] == [1, 2, 3, 4, 5]
    assert got[1:3] == [[], []]


def test_queue_stream_default_rdd(sc: Any, ssc: StreamingContext) -> None:
    stream = ssc.queueStream([[1], [2]], default=sc.parallelize([0]))
    assert collect(ssc, stream, 4) == [[1], [2], [0], [0]]


def test_union_of_several_streams(ssc: StreamingContext) -> None:
    inputs = [list(range(i + 1)) for i in range(3)]
    streams = [ssc.queueStream(inputs) for _ in range(3)]
    assert collect(ssc, ssc.union(*streams), 3) == [i * 3 for i in inputs]


def test_union_of_two_streams(ssc: StreamingContext) -> None:
    inputs = [list(range(i + 1)) for i in range(3)]
    dstream = ssc.union(ssc.queueStream(inputs), ssc.queueStream(inputs))
    assert collect(ssc, dstream, 3) == [i * 2 for i in inputs]


def test_union_needs_a_stream(ssc: StreamingContext) -> None:
    with pytest.raises(ValueError, match="at least one"):
        ssc.union()


def test_transform_of_several_streams(ssc: StreamingContext) -> None:
    dstream1 = ssc.queueStream([[1]])
    dstream2 = ssc.queueStream([[2]])
    dstream3 = ssc.queueStream([[3]])

    def func(rdds: list[Any]) -> Any:
        rdd1, rdd2, rdd3 = rdds
        return rdd2.union(rdd3).union(rdd1)

    dstream = ssc.transform([dstream1, dstream2, dstream3], func)
    assert take(ssc, dstream, 3) == [2, 3, 1]


def test_transform_of_several_streams_with_time(ssc: StreamingContext) -> None:
    def func(t: datetime, rdds: list[Any]) -> Any:
        return rdds[0].union(rdds[1]).map(lambda x: (x, isinstance(t, datetime)))

    dstream = ssc.transform([ssc.queueStream([[1]]), ssc.queueStream([[2]])], func)
    assert take(ssc, dstream, 2) == [(1, True), (2, True)]


def _write_atomically(directory: str, name: str, data: bytes) -> None:
    """Write a hidden file, then rename it into place (how files should reach a
    monitored directory: a file stream must never see a half-written file)."""
    tmp = os.path.join(directory, f".{name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, os.path.join(directory, name))


def test_text_file_stream(ssc: StreamingContext, tmp_path: Any) -> None:
    d = str(tmp_path)
    with open(os.path.join(d, "before-start"), "w") as f:
        f.write("99\n")  # present before start: ignored (newFilesOnly)
    dstream = ssc.textFileStream(d).map(int)
    result = collect(ssc, dstream, 2, block=False)
    ssc.start()
    for name in ("a", "b"):
        time.sleep(1)
        _write_atomically(d, name, "".join(f"{i}\n" for i in range(10)).encode())
    wait_until(lambda: len(result) >= 2, TIMEOUT, "2 files read", ssc=ssc)
    ssc.stop(False)
    assert result[:2] == [list(range(10)), list(range(10))]


def test_binary_records_stream(ssc: StreamingContext, tmp_path: Any) -> None:
    d = str(tmp_path)
    dstream = ssc.binaryRecordsStream(d, 10).map(lambda v: struct.unpack("10b", bytes(v)))
    result = collect(ssc, dstream, 2, block=False)
    ssc.start()
    for name in ("a", "b"):
        time.sleep(1)
        _write_atomically(d, name, bytes(range(10)) + bytes(range(10, 20)))
    wait_until(lambda: len(result) >= 2, TIMEOUT, "2 files read", ssc=ssc)
    ssc.stop(False)
    expected = [tuple(range(10)), tuple(range(10, 20))]
    assert result[:2] == [expected, expected]


def test_binary_records_stream_needs_a_positive_length(ssc: StreamingContext,
                                                       tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="recordLength"):
        ssc.binaryRecordsStream(str(tmp_path), 0)


def test_get_or_create_without_checkpoint_calls_setup(make_ssc: Callable[..., StreamingContext],
                                                      tmp_path: Any) -> None:
    """CheckpointTests.test_get_or_create_and_get_active_or_create, without recovery:
    files -> running word counts (updateStateByKey, checkpointed) -> text files."""
    inputd, outputd = str(tmp_path / "in"), str(tmp_path / "out")
    cpd = str(tmp_path / "cp")
    os.makedirs(inputd)
    os.makedirs(outputd)
    calls: list[StreamingContext] = []

    def updater(vs: list[int], s: int | None) -> int:
        return sum(vs, s or 0)

    def setup() -> StreamingContext:
        ssc = make_ssc(BATCH)
        wc = ssc.textFileStream(inputd).map(lambda x: (x, 1)).updateStateByKey(updater)
        wc.map(lambda x: f"{x[0]},{x[1]}").saveAsTextFiles(os.path.join(outputd, "test"))
        wc.checkpoint(1.0)
        calls.append(ssc)
        return ssc

    # No checkpoint in cpd yet: getActiveOrCreate -> getOrCreate -> setup().
    ssc = StreamingContext.getActiveOrCreate(cpd, setup)
    assert calls == [ssc]
    ssc.start()
    # Active: returned as it is, whatever the path; setup not called.
    assert StreamingContext.getActiveOrCreate(str(tmp_path / "elsewhere"), setup) is ssc
    assert StreamingContext.getActiveOrCreate(cpd, setup) is ssc
    assert calls == [ssc]

    def check_output(n: int) -> None:
        _write_atomically(inputd, str(n), "".join(f"{i}\n" for i in range(10)).encode())

        def counted() -> bool:
            done = [p for p in os.listdir(outputd)
                    if os.path.exists(os.path.join(outputd, p, "_SUCCESS"))]
            if not done:
                return False
            p = os.path.join(outputd, max(done))
            d = ssc.sparkContext.textFile(p).map(lambda line: int(line.split(",")[1])).collect()
            return len(d) == 10 and set(d) == {n}

        wait_until(counted, TIMEOUT, f"every word counted {n} times", ssc=ssc)

    check_output(1)
    check_output(2)
    ssc.stop(False)
    # wc.checkpoint(1.0): the state RDDs were checkpointed under the directory.
    rdd_dirs = [d for _, dirs, _ in os.walk(os.path.join(cpd, "rdds")) for d in dirs
                if d.startswith("rdd-")]
    assert rdd_dirs


def _record_batch(outd: str, t: datetime, rdd: Any) -> None:
    """An output that survives the graph being pickled into a checkpoint: one JSON
    file per run of a batch (a re-run writes another), like PySpark's own tests."""
    values = sorted(rdd.collect())
    if values:
        name = f"{int(t.timestamp() * 1000)}-{uuid.uuid4().hex[:8]}.json"
        with open(os.path.join(outd, name), "w") as f:
            json.dump(values, f)


def _recorded(outd: str) -> list[tuple[int, list[int]]]:
    out = []
    for name in sorted(os.listdir(outd)):
        with open(os.path.join(outd, name)) as f:
            out.append((int(name.split("-")[0]), json.load(f)))
    return out


def test_file_stream_after_restart_reads_only_new_files(
        make_ssc: Callable[..., StreamingContext], tmp_path: Any) -> None:
    """Each batch's file list is logged (driver/dstream/file_stream.py): after a restart with
    getOrCreate, a re-run of a batch that was pending reads exactly the files its first
    run read, and no file lands in two different batches: neither the files present at
    the first start nor the ones earlier batches read; files that arrived while the
    driver was down are read once."""
    inputd, cpd, outd = str(tmp_path / "in"), str(tmp_path / "cp"), str(tmp_path / "out")
    os.makedirs(inputd)
    os.makedirs(outd)
    _write_atomically(inputd, "present-at-first-start", b"-1\n")
    calls: list[int] = []

    def setup() -> StreamingContext:
        calls.append(1)
        ssc = make_ssc(BATCH)
        ssc.checkpoint(cpd)
        ssc.textFileStream(inputd).map(int).foreachRDD(
            lambda t, rdd: _record_batch(outd, t, rdd))
        return ssc

    def values() -> list[int]:
        return sorted(v for vs in dict(_recorded(outd)).values() for v in vs)

    ssc = StreamingContext.getOrCreate(cpd, setup)
    # Modified just before the first start, i.e. after the zero time: a restart must
    # still know it was present then (a threshold from the oldest list cannot).
    os.utime(os.path.join(inputd, "present-at-first-start"))
    ssc.start()
    # Read in the first or second batch, so the restart below still has the first
    # batch's list and its threshold (first batch - slide) is older than that file.
    _write_atomically(inputd, "a", b"1\n2\n")
    wait_until(lambda: values() == [1, 2], TIMEOUT, "file a read", ssc=ssc)
    ssc.stop(False)
    _write_atomically(inputd, "b-while-down", b"3\n")

    ssc = StreamingContext.getOrCreate(cpd, setup)
    assert calls == [1], "restored from the checkpoint's graph: setupFunc is not called"
    ssc.start()
    try:
        wait_until(lambda: 3 in values(), TIMEOUT, "the file written while down read", ssc=ssc)
        time.sleep(1)
        _write_atomically(inputd, "c", b"4\n")
        wait_until(lambda: 4 in values(), TIMEOUT, "a new file read", ssc=ssc)
        time.sleep(3 * BATCH)
    finally:
        ssc.stop(False)
    by_time: dict[int, list[int]] = {}
    for t, vs in _recorded(outd):  # a re-run batch must read what its first run read
        assert by_time.setdefault(t, vs) == vs, (t, by_time[t], vs)
    assert values() == [1, 2, 3, 4]  # each file in exactly one batch, none lost


def test_high_availability_without_a_checkpoint_directory_is_refused_at_start(
        ssc: StreamingContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """A takeover restores the leader's pending batches and state from checkpoints:
    without a directory it would drop both silently, so start() refuses."""
    from walstream.errors import ConfigError

    conf = ssc._conf()
    monkeypatch.setattr(ssc, "_conf", lambda: {**conf, "spark.walstream.ha.enabled": "true"})
    ssc.queueStream([ssc.sparkContext.parallelize([1])]).foreachRDD(lambda rdd: None)
    with pytest.raises(ConfigError, match="needs a checkpoint directory"):
        ssc.start()
    assert StreamingContext.getActive() is None and ssc._engine is None
