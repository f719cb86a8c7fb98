"""KafkaSink + read_exactly_once: a re-run batch replaces its output, never adds to it."""

from __future__ import annotations

import datetime
from collections import Counter
from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from tests.api.sink_helpers import raw_records
from walstream.driver import KafkaSink, read_exactly_once
from walstream.driver.sink.kafka_sink import (
    H_ATTEMPT,
    H_BATCH,
    H_COMMIT,
    H_EPOCH,
    H_PART,
    H_SEQ,
    H_WRITER,
    set_sink_epoch,
)

T1 = datetime.datetime(2026, 11, 22, 5, 0, 1)
T2 = datetime.datetime(2026, 11, 22, 5, 0, 2)


def _ms(t: datetime.datetime) -> int:
    return round(t.timestamp() * 1000)


def test_rerun_and_torn_attempt_are_read_once(sc: Any, bootstrap: str,
                                              topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("sink", partitions=2)
    sink = KafkaSink(bootstrap, topic, partitions=2, writer="direct")
    rdd = sc.parallelize([f"w{i}" for i in range(100)], 4)
    sink(T1, rdd)
    # A task of a first run that died after some records, before its commit marker:
    torn = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for seq in range(7):
        torn.produce(topic, f"w{seq}".encode(), partition=0, headers=[
            (H_WRITER, b"direct"), (H_BATCH, str(_ms(T1)).encode()), (H_PART, b"0"),
            (H_ATTEMPT, b"dead"),
            (H_SEQ, str(seq).encode())])
    assert torn.flush(30) == 0
    sink(T1, rdd)  # the batch re-run after recovery writes everything again
    sink(T2, sc.parallelize(["x", "y"], 1))
    got = list(read_exactly_once(bootstrap, topic))
    per_batch = Counter(b for b, _, _ in got)
    assert per_batch == {_ms(T1): 100, _ms(T2): 2}
    values = Counter(v for _, _, v in got)
    assert values == Counter([f"w{i}".encode() for i in range(100)] + [b"x", b"y"])


def test_a_record_stored_twice_is_read_once_and_its_attempt_counts(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """A producer retry the broker stored twice repeats a sequence number of its
    attempt: read once, and the attempt is still complete (its marker's count of
    distinct records), so its batch is neither doubled nor lost."""
    topic = topic_factory("sink-dup")
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})

    def send(attempt: bytes, seqs: list[int], commit: int | None) -> None:
        base = [(H_BATCH, str(_ms(T1)).encode()), (H_PART, b"0"), (H_ATTEMPT, attempt)]
        for seq in seqs:
            p.produce(topic, f"w{seq}".encode(), partition=0,
                      headers=[*base, (H_SEQ, str(seq).encode())])
        if commit is not None:
            p.produce(topic, b"", partition=0, headers=[*base, (H_COMMIT, str(commit).encode())])

    send(b"short", [0, 1, 1], 3)  # three records read, but seq 2 never arrived
    send(b"dup", [0, 1, 1, 2], 3)  # seq 1 stored twice
    send(b"rerun", [0, 1, 2], 3)  # a re-run of the partition already read
    assert p.flush(30) == 0
    skipped: list[Any] = []
    got = [v for _, _, v in read_exactly_once(bootstrap, topic, on_skipped=skipped.append)]
    assert got == [b"w0", b"w1", b"w2"]
    assert [(s.attempt, s.records, s.count, s.rerun) for s in skipped] == [
        ("short", 2, 3, False), ("rerun", 0, 3, True)]


def test_keys_and_values_by_function(sc: Any, bootstrap: str,
                                     topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("sink-kv")
    sink = KafkaSink(bootstrap, topic, key=lambda kv: kv[0], value=lambda kv: {"n": kv[1]},
                     writer="direct")
    sink(T1, sc.parallelize([("a", 1), ("b", 2)], 2))
    got = sorted((k, v) for _, k, v in read_exactly_once(bootstrap, topic))
    assert got == [(b"a", b'{"n":1}'), (b"b", b'{"n":2}')]


def test_foreach_rdd_output_of_a_stream(make_ssc: Callable[..., Any], bootstrap: str,
                                        topic_factory: Callable[..., str]) -> None:
    from tests.api.helpers import TIMEOUT
    from walstream.testing import wait_until

    topic = topic_factory("sink-stream")
    ssc = make_ssc(0.5)
    rdds = [ssc.sparkContext.parallelize(range(10 * i, 10 * i + 10), 2) for i in range(3)]
    ssc.queueStream(rdds).map(str).foreachRDD(KafkaSink(bootstrap, topic))
    ssc.start()
    wait_until(lambda: len(list(read_exactly_once(bootstrap, topic))) == 30,
               TIMEOUT, "30 records", ssc=ssc)
    ssc.stop(False)
    got = sorted(int(v or b"") for _, _, v in read_exactly_once(bootstrap, topic))
    assert got == list(range(30))


def test_a_sink_writes_the_epoch_set_on_the_driver(sc: Any, bootstrap: str,
                                                  topic_factory: Callable[..., str]) -> None:
    """The epoch is the driver's: read in ``__call__`` and carried into the tasks, on
    every record and marker; the sink object (pickled into checkpoints) keeps none."""
    import pickle

    topic = topic_factory("sink-epoch", partitions=2)
    sink = KafkaSink(bootstrap, topic, partitions=2, writer="direct")
    set_sink_epoch(6)
    try:
        sink(T1, sc.parallelize([f"w{i}" for i in range(10)], 3))
    finally:
        set_sink_epoch(0)
    assert not [k for k in vars(pickle.loads(pickle.dumps(sink))) if "epoch" in k]
    sink(T2, sc.parallelize(["x"], 1))
    seen = Counter((h[H_BATCH], h.get(H_EPOCH), H_COMMIT in h)
                   for _, h in raw_records(bootstrap, topic))
    b1, b2 = str(_ms(T1)).encode(), str(_ms(T2)).encode()
    assert seen == {(b1, b"6", False): 10, (b1, b"6", True): 3,
                    (b2, b"0", False): 1, (b2, b"0", True): 1}
    assert sorted(v or b"" for _, _, v in read_exactly_once(bootstrap, topic)) == sorted(
        [f"w{i}".encode() for i in range(10)] + [b"x"])
