"""Writers in KafkaSink output: any number of writers share a topic, a fence voids only
its own writer's older epochs, a record from someone else stops no reader, the
reader's memory is bounded, and a sink's pickled form holds no secret."""

from __future__ import annotations

import datetime
import pickle
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.api.sink_helpers import B1, B2, W, Writer, raw_records, read
from walstream.driver.sink.kafka_sink import (
    H_ATTEMPT,
    H_BATCH,
    H_COMMIT,
    H_FENCE,
    H_PART,
    H_SEQ,
    H_WRITER,
    KafkaSink,
    SinkError,
    SinkReadLimitError,
    SinkWriterError,
    Skipped,
    SkippedAttempt,
    SkippedRecord,
    fence_sink_topic,
    graph_sink_writers,
    read_exactly_once,
)
from walstream.driver.sink.output_writer import current_writer, output_writer, writing_as
from walstream.driver.sink.sink_reader import RECORD_OVERHEAD_BYTES
from walstream.errors import ConfigError

T1 = datetime.datetime(2026, 11, 22, 5, 0, 1)


def test_two_writers_of_one_batch_and_part_are_both_read(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """Two applications' attempts for the same (batch, part): each is its writer's
    first committed attempt, so both are output; each writer's re-run is skipped."""
    topic = topic_factory("writers-two")
    a, b = Writer(bootstrap, topic, "app-a/output-0"), Writer(bootstrap, topic, "app-b/output-0")
    a.attempt("a1", 3, epoch=0)
    b.attempt("b1", 2, epoch=0)
    a.attempt("a1-rerun", 3, epoch=0)
    b.attempt("b1-rerun", 2, epoch=0)
    got, skipped = read(bootstrap, topic)
    assert got == [b"a1-0", b"a1-1", b"a1-2", b"b1-0", b"b1-1"]
    assert [(s.writer, s.attempt, s.reason) for s in skipped] == [
        ("app-a/output-0", "a1-rerun", "rerun"), ("app-b/output-0", "b1-rerun", "rerun")]


def test_a_fence_voids_only_its_own_writers_older_epochs(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """A new leader of app A (epoch 5) fences A; app B, which never ran with HA
    (epoch 0), and output from before writer identities keep writing."""
    topic = topic_factory("writers-fence")
    a, b = Writer(bootstrap, topic, "app-a/output-0"), Writer(bootstrap, topic, "app-b/output-0")
    legacy = Writer(bootstrap, topic, None)
    fence_sink_topic(bootstrap, topic, 5, "app-a/output-0", kafka_conf={})
    a.attempt("a-old", 1, epoch=4)
    b.attempt("b", 1, epoch=0)
    legacy.attempt("legacy", 1, epoch=0)
    a.attempt("a-new", 1, epoch=5)
    got, skipped = read(bootstrap, topic)
    assert got == [b"b-0", b"legacy-0", b"a-new-0"]
    assert [(s.writer, s.attempt, s.reason) for s in skipped] == [
        ("app-a/output-0", "a-old", "fenced")]


def test_two_foreach_rdd_sinks_into_one_topic_keep_both_outputs(
        make_ssc: Callable[..., Any], bootstrap: str,
        topic_factory: Callable[..., str]) -> None:
    """Two output operations of one app write the same batches and partitions into
    one topic: each is its own writer, derived from the app and its output index."""
    from tests.api.helpers import TIMEOUT
    from walstream.testing import wait_until

    topic = topic_factory("writers-two-outputs")
    ssc = make_ssc(0.5)
    rdds = [ssc.sparkContext.parallelize(range(10 * i, 10 * i + 10), 2) for i in range(3)]
    numbers = ssc.queueStream(rdds)
    numbers.map(lambda n: f"a{n}").foreachRDD(KafkaSink(bootstrap, topic))
    numbers.map(lambda n: f"b{n}").foreachRDD(KafkaSink(bootstrap, topic))
    ssc.start()
    wait_until(lambda: len(list(read_exactly_once(bootstrap, topic))) == 60,
               TIMEOUT, "60 records", ssc=ssc)
    app_id = ssc._engine.config.app_id
    ssc.stop(False)
    got = Counter((v or b"").decode() for _, _, v in read_exactly_once(bootstrap, topic))
    assert got == Counter([f"{p}{n}" for p in "ab" for n in range(30)])
    writers = {h[H_WRITER].decode() for _, h in raw_records(bootstrap, topic)}
    assert writers == {f"{app_id}/output-0", f"{app_id}/output-1"}


def test_a_sink_outside_any_output_operation_needs_a_writer(
        sc: Any, bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("writers-none")
    rdd = sc.parallelize(["x"], 1)
    with pytest.raises(SinkWriterError) as info:
        KafkaSink(bootstrap, topic)(T1, rdd)
    assert isinstance(info.value, SinkError) and "writer=" in str(info.value)
    with writing_as("ctx-writer"):
        assert current_writer() == "ctx-writer"
        KafkaSink(bootstrap, topic)(T1, rdd)
    assert current_writer() is None
    KafkaSink(bootstrap, topic, writer="named")(T1, rdd)
    assert sorted(h[H_WRITER] for _, h in raw_records(bootstrap, topic)) == [
        b"ctx-writer", b"ctx-writer", b"named", b"named"]
    assert [v for _, _, v in read_exactly_once(bootstrap, topic, kafka_conf={})] == [
        b"x", b"x"]


def test_writer_identities_are_checked() -> None:
    assert output_writer("app-1", 3) == "app-1/output-3"
    for bad in ("", "a\nb", "x" * 201, "\x1b[31m"):
        with pytest.raises(ConfigError):
            KafkaSink("k:9092", "t", writer=bad)
    assert KafkaSink("k:9092", "t", writer="é" * 100).writer == "é" * 100


def test_graph_sink_writers_names_each_output_operations_writer() -> None:
    a, b = KafkaSink("k:9092", "a"), KafkaSink("k:9092", "b", writer="mine")

    def both(t: object, rdd: object) -> None:
        a(t, rdd)
        b(t, rdd)

    outputs = [lambda t, rdd: a(t, rdd), print, both]
    assert graph_sink_writers(outputs, "app-x") == [
        (a, "app-x/output-0"), (a, "app-x/output-2"), (b, "mine")]


def _send(p: Producer, topic: str, headers: list[tuple[str, bytes]],
          value: bytes = b"v") -> None:
    p.produce(topic, value, partition=0, headers=headers)


def test_records_with_malformed_headers_are_skipped_and_reported(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """Every kind of damaged or foreign KafkaSink record is passed over and reported;
    the output around it is read exactly as without it."""
    topic = topic_factory("writers-malformed")
    w = Writer(bootstrap, topic)
    w.attempt("before", 2, epoch=0)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    base = [(H_WRITER, W.encode()), (H_BATCH, str(B2).encode()), (H_PART, b"0"),
            (H_ATTEMPT, b"x")]
    bad = {
        "no part": [(H_BATCH, str(B2).encode()), (H_ATTEMPT, b"x"), (H_SEQ, b"0")],
        "no attempt": [(H_BATCH, str(B2).encode()), (H_PART, b"0"), (H_SEQ, b"0")],
        "batch not a number": [(H_BATCH, b"soon"), (H_PART, b"0"), (H_ATTEMPT, b"x"),
                               (H_SEQ, b"0")],
        "seq not a number": [*base, (H_SEQ, b"-1")],
        "commit not a number": [*base, (H_COMMIT, b"1e3")],
        "neither seq nor commit": base,
        "both seq and commit": [*base, (H_SEQ, b"0"), (H_COMMIT, b"1")],
        "epoch not a number": [*base, ("walstream.epoch", b"x"), (H_SEQ, b"0")],
        "huge number": [*base, (H_SEQ, b"9" * 400)],
        "long writer": [(H_WRITER, b"w" * 300), *base[1:], (H_SEQ, b"0")],
        "fence not a number": [(H_FENCE, b"high")],
        "fence with a batch": [(H_FENCE, b"9"), *base, (H_SEQ, b"0")],
    }
    for headers in bad.values():
        _send(p, topic, headers)
    assert p.flush(30) == 0
    w.attempt("after", 1, epoch=0, batch=B2)
    _send(p, topic, [("unrelated", b"1")])  # no KafkaSink header: not reported
    assert p.flush(30) == 0
    skipped: list[Skipped] = []
    got = [v for _, _, v in read_exactly_once(bootstrap, topic, kafka_conf={},
                                              on_skipped=skipped.append)]
    assert got == [b"before-0", b"before-1", b"after-0"]
    records = [s for s in skipped if isinstance(s, SkippedRecord)]
    assert len(records) == len(bad) == len(skipped)
    assert all(s.reason == "malformed" and s.kafka_partition == 0 for s in records)
    assert [s.offset for s in records] == sorted({s.offset for s in records})


def test_the_readers_memory_is_bounded_with_a_typed_error(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("writers-bounds")
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for attempt in (b"a", b"b", b"c"):  # three open attempts of 10 x 1 KB, none committed
        base = [(H_WRITER, W.encode()), (H_BATCH, str(B1).encode()), (H_PART, b"0"),
                (H_ATTEMPT, attempt)]
        for seq in range(10):
            _send(p, topic, [*base, (H_SEQ, str(seq).encode())], value=b"x" * 1000)
        if attempt == b"a":  # a producer retry stored twice, two more times
            _send(p, topic, [*base, (H_SEQ, b"0")], value=b"x" * 1000)
            _send(p, topic, [*base, (H_SEQ, b"0")], value=b"x" * 1000)
    assert p.flush(30) == 0

    def read_with(**bounds: int) -> list[Any]:
        return list(read_exactly_once(bootstrap, topic, kafka_conf={}, **bounds))

    assert read_with() == []  # within the defaults: nothing committed, nothing out
    cases = {"max_attempt_bytes": 5_000, "max_buffered_bytes": 25_000,
             "max_pending_attempts": 2}
    for bound, limit in cases.items():
        with pytest.raises(SinkReadLimitError) as info:
            read_with(**{bound: limit})
        assert (info.value.bound, info.value.limit) == (bound, limit)
        assert isinstance(info.value, SinkError) and bound in str(info.value)
    # A record stored again replaces itself in the count, as in the buffer: the
    # bounds at exactly ten distinct records an attempt, thirty in all, hold.
    per_record = 1000 + RECORD_OVERHEAD_BYTES
    assert read_with(max_attempt_bytes=10 * per_record,
                     max_buffered_bytes=30 * per_record) == []


def test_an_attempt_overtaken_by_a_committed_one_releases_its_records(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("writers-overtaken")
    w = Writer(bootstrap, topic)
    w.records("slow", [0, 1], epoch=0)
    w.attempt("fast", 2, epoch=0)
    w.records("slow", [2], epoch=0)
    w.commit("slow", 3, epoch=0)
    got, skipped = read(bootstrap, topic)
    assert got == [b"fast-0", b"fast-1"]
    assert [(s.attempt, s.reason) for s in skipped] == [("slow", "rerun")]
    assert isinstance(skipped[0], SkippedAttempt)


def test_a_sink_takes_no_secret_and_pickles_none() -> None:
    for key in ("sasl.password", "ssl.key.password", "ssl.key.pem", "ssl_key",
                "sasl.oauthbearer.client.secret", "sasl.jaas.config"):
        with pytest.raises(ConfigError) as info:
            KafkaSink("k:9092", "t", producer_config={key: "s3cret-value"}, writer="w")
        assert "s3cret-value" not in str(info.value) and key in str(info.value)
    sink = KafkaSink("k:9092", "t", producer_config={"linger.ms": 2}, writer="w")
    sink.producer_config["sasl.password"] = "s3cret-value"  # put there after the check
    raw = pickle.dumps(sink)
    assert b"s3cret-value" not in raw
    again = pickle.loads(raw)
    assert again.producer_config == {"linger.ms": 2} and again.writer == "w"
    from pyspark import cloudpickle

    assert b"s3cret-value" not in cloudpickle.dumps(lambda t, r: sink(t, r))


def test_a_sink_pickled_before_writer_identities_loads_without_one() -> None:
    sink = KafkaSink("k:9092", "t", writer="w")
    state = sink.__getstate__()
    del state["writer"]
    old = KafkaSink.__new__(KafkaSink)
    old.__setstate__(state)
    assert old.writer is None


def test_a_query_restarted_on_a_fresh_checkpoint_adds_to_what_the_topic_holds(
        sc: Any, bootstrap: str, topic_factory: Callable[..., str], tmp_path: Any) -> None:
    """``foreachBatch(KafkaSink)``: a query on a fresh checkpointLocation numbers its
    micro-batches from 0 again, into a topic that holds an earlier query's batch 0;
    it is a new writer (its query id), so both outputs are read. A restart from
    the first checkpoint is the first query again: its new batch adds, and a
    re-run of a batch it committed would replace."""
    from pyspark.sql import SparkSession

    spark = SparkSession(sc)
    topic = topic_factory("writers-query")
    sink = KafkaSink(bootstrap, topic, value=lambda row: row.value)

    def run(source: str, checkpoint: str, lines: list[str]) -> str:
        folder = tmp_path / source
        folder.mkdir(exist_ok=True)
        (folder / f"part-{len(list(folder.iterdir()))}.txt").write_text(
            "".join(f"{line}\n" for line in lines))
        query = (spark.readStream.text(str(folder)).writeStream.foreachBatch(sink)
                 .option("checkpointLocation", str(tmp_path / checkpoint))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(120), "the query did not finish its input"
        assert query.exception() is None, query.exception()
        return str(query.id)

    first = run("in-a", "ckpt-a", [f"a{i}" for i in range(100)])
    fresh = run("in-b", "ckpt-b", [f"b{i}" for i in range(50)])
    again = run("in-a", "ckpt-a", [f"c{i}" for i in range(20)])  # batch 1 of the first
    assert first == again != fresh
    got = Counter((v or b"").decode() for _, _, v in
                  read_exactly_once(bootstrap, topic, kafka_conf={}))
    assert got == Counter([f"a{i}" for i in range(100)] + [f"b{i}" for i in range(50)]
                          + [f"c{i}" for i in range(20)])
    batches = Counter((h[H_WRITER].decode(), h[H_BATCH].decode())
                      for _, h in raw_records(bootstrap, topic) if H_COMMIT in h)
    assert {(w, b) for w, b in batches} == {
        (f"query-{first}", "0"), (f"query-{fresh}", "0"), (f"query-{first}", "1")}
