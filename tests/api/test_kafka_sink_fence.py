"""Epochs and fences in KafkaSink output: a new leader's fence voids the attempts an
older leader starts after it, and nothing written before it (no SparkContext here)."""

from __future__ import annotations

import functools
import socket
import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer

from tests.api.sink_helpers import B1, B2, W, Writer, raw_records, read
from walstream.driver.errors import DriverError
from walstream.driver.sink.kafka_sink import (
    H_COMMIT,
    H_EPOCH,
    H_FENCE,
    H_WRITER,
    KafkaSink,
    SinkFenceError,
    SinkTopicMissingError,
    fence_sink_topic,
    fence_sinks,
    kafka_sinks_of,
    set_sink_epoch,
    sink_epoch,
)
from walstream.errors import ConfigError


@pytest.fixture
def writer_for(bootstrap: str) -> Callable[[str], Writer]:
    return functools.partial(Writer, bootstrap)


@pytest.fixture(autouse=True)
def _epoch_zero() -> Iterator[None]:
    set_sink_epoch(0)
    yield
    set_sink_epoch(0)


def test_an_older_epoch_attempt_after_a_fence_is_void(
        bootstrap: str, topic_factory: Callable[..., str],
        writer_for: Callable[[str], Writer]) -> None:
    """The paused old leader (epoch 1) wakes after the new leader's fence (epoch 2):
    its attempt is ignored; the new leader's attempt of the same (batch, part) is read."""
    topic = topic_factory("fence-void")
    w = writer_for(topic)
    assert fence_sink_topic(bootstrap, topic, 2, W, kafka_conf={}) == 1
    w.attempt("old", 3, epoch=1)
    w.commit("old-empty", 0, epoch=1, batch=B2)  # an empty attempt: its marker is its first
    w.attempt("new", 2, epoch=2)
    w.attempt("new-b2", 1, epoch=2, batch=B2)
    got, skipped = read(bootstrap, topic)
    assert got == [b"new-0", b"new-1", b"new-b2-0"]
    assert [(s.attempt, s.records, s.count, s.rerun, s.fenced, s.epoch, s.reason)
            for s in skipped] == [("old", 0, 3, False, True, 1, "fenced"),
                                  ("old-empty", 0, 0, False, True, 1, "fenced")]


def test_an_attempt_started_before_the_fence_stays_valid(
        bootstrap: str, topic_factory: Callable[..., str],
        writer_for: Callable[[str], Writer]) -> None:
    """An epoch-1 attempt whose first record precedes the fence belongs to an
    allocation the new leader replays: it is read even though more of its records
    and its marker come after the fence, and the new leader's re-run is a rerun."""
    topic = topic_factory("fence-before")
    w = writer_for(topic)
    w.records("old", [0, 1], epoch=1)
    fence_sink_topic(bootstrap, topic, 2, W, kafka_conf={})
    w.records("old", [2], epoch=1)
    w.commit("old", 3, epoch=1)
    w.attempt("new", 3, epoch=2)
    got, skipped = read(bootstrap, topic)
    assert got == [b"old-0", b"old-1", b"old-2"]
    assert [(s.attempt, s.rerun, s.fenced, s.epoch, s.reason) for s in skipped] == [
        ("new", True, False, 2, "rerun")]


def test_an_equal_or_newer_epoch_is_not_fenced(
        bootstrap: str, topic_factory: Callable[..., str],
        writer_for: Callable[[str], Writer]) -> None:
    topic = topic_factory("fence-newer")
    w = writer_for(topic)
    fence_sink_topic(bootstrap, topic, 2, W, kafka_conf={})
    fence_sink_topic(bootstrap, topic, 1, W, kafka_conf={})  # a late, lower fence lowers nothing
    w.attempt("e1", 1, epoch=1)
    w.attempt("e2", 1, epoch=2, batch=B2)
    w.attempt("e3", 1, epoch=3, batch=B2, part=1)
    got, skipped = read(bootstrap, topic)
    assert got == [b"e2-0", b"e3-0"]
    assert [s.attempt for s in skipped if s.fenced] == ["e1"]


def test_records_without_an_epoch_header_count_as_epoch_zero(
        bootstrap: str, topic_factory: Callable[..., str],
        writer_for: Callable[[str], Writer]) -> None:
    """Output of older writers reads as before; after a fence it is of epoch 0."""
    topic = topic_factory("fence-legacy")
    w = writer_for(topic)
    w.attempt("legacy", 2, epoch=None)
    w.attempt("legacy-rerun", 2, epoch=None)
    w.records("legacy-torn", [0], epoch=None, batch=B2)
    got, skipped = read(bootstrap, topic)
    assert got == [b"legacy-0", b"legacy-1"]
    assert [(s.attempt, s.reason, s.epoch) for s in skipped] == [("legacy-rerun", "rerun", 0)]
    fence_sink_topic(bootstrap, topic, 1, W, kafka_conf={})
    w.attempt("legacy-late", 1, epoch=None, batch=B2)
    w.attempt("epoch-1", 1, epoch=1, batch=B2)
    got, skipped = read(bootstrap, topic)
    assert got == [b"legacy-0", b"legacy-1", b"epoch-1-0"]
    assert [(s.attempt, s.reason) for s in skipped] == [("legacy-rerun", "rerun"),
                                                        ("legacy-late", "fenced")]


def test_a_fence_counts_in_its_own_partition_only(
        bootstrap: str, topic_factory: Callable[..., str],
        writer_for: Callable[[str], Writer]) -> None:
    topic = topic_factory("fence-part", partitions=2)
    w = writer_for(topic)
    w.fence_one_partition(2, kafka_part=0)
    w.attempt("p0", 1, epoch=1, kafka_part=0)
    w.attempt("p1", 1, epoch=1, part=1, kafka_part=1)
    got, skipped = read(bootstrap, topic)
    assert got == [b"p1-0"]
    assert [(s.attempt, s.reason) for s in skipped] == [("p0", "fenced")]


def test_fence_writes_one_record_per_partition(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("fence-multi", partitions=3)
    assert fence_sink_topic(bootstrap, topic, 4, W, kafka_conf={}) == 3
    assert KafkaSink(bootstrap, topic, partitions=3, writer=W).fence(5, kafka_conf={}) == 3
    records = raw_records(bootstrap, topic)
    assert sorted(p for p, _ in records) == [0, 0, 1, 1, 2, 2]
    assert sorted(h[H_FENCE] for _, h in records) == [b"4"] * 3 + [b"5"] * 3
    assert all(set(h) == {H_FENCE, H_WRITER} and h[H_WRITER] == W.encode()
               for _, h in records)  # no batch headers
    got, skipped = read(bootstrap, topic)
    assert got == [] and skipped == []  # fences are nobody's output


def test_fence_sinks_fences_every_topic_once(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    a, b = topic_factory("fence-a", partitions=2), topic_factory("fence-b")
    sinks = [(KafkaSink(bootstrap, a, partitions=2), W), (KafkaSink(bootstrap, b), W),
             (KafkaSink(bootstrap, a, value=str), W), (KafkaSink(bootstrap, a), "other")]
    assert fence_sinks(sinks, 3, kafka_conf={}) == {a: 2, b: 1}
    # One fence per partition and writer: W's twice-listed sink fences once.
    assert sorted((p, h[H_WRITER]) for p, h in raw_records(bootstrap, a)) == [
        (0, W.encode()), (0, b"other"), (1, W.encode()), (1, b"other")]
    assert len(raw_records(bootstrap, b)) == 1


def test_fence_of_a_missing_topic_is_a_typed_error_and_creates_nothing(
        bootstrap: str, unique_name: Callable[[str], str]) -> None:
    topic = unique_name("missing")
    start = time.monotonic()
    with pytest.raises(SinkTopicMissingError) as info:
        fence_sink_topic(bootstrap, topic, 2, W, kafka_conf={}, timeout_s=5)
    assert time.monotonic() - start < 5 + 1
    assert info.value.topic == topic and info.value.epoch == 2
    assert isinstance(info.value, SinkFenceError) and isinstance(info.value, DriverError)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check"})
    try:
        assert topic not in c.list_topics(timeout=30).topics
    finally:
        c.close()


def test_fence_with_the_broker_down_fails_within_its_timeout() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(SinkFenceError) as info:
        fence_sink_topic(f"127.0.0.1:{port}", "out", 2, W, kafka_conf={}, timeout_s=1.5)
    assert time.monotonic() - start < 1.5 + 1
    assert not isinstance(info.value, SinkTopicMissingError)
    with pytest.raises(SinkFenceError):
        KafkaSink(f"127.0.0.1:{port}", "out", writer=W).fence(2, kafka_conf={}, timeout_s=1.0)


def test_write_partition_carries_the_epoch_on_records_and_marker(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("fence-write")
    sink = KafkaSink(bootstrap, topic, writer=W)
    assert sink.write_partition(B1, 0, iter([b"a", b"b"]), kafka_settings={}, epoch=7) == 2
    assert sink.write_partition(B2, 0, iter([b"c"]), kafka_settings={}) == 1
    epochs = [(h.get(H_EPOCH), H_COMMIT in h) for _, h in raw_records(bootstrap, topic)]
    assert epochs == [(b"7", False), (b"7", False), (b"7", True),
                      (b"0", False), (b"0", True)]


def test_epoch_and_fence_arguments_are_checked() -> None:
    assert sink_epoch() == 0
    set_sink_epoch(3)
    assert sink_epoch() == 3
    for bad in (-1, True, 1.0, "2"):
        with pytest.raises(ConfigError):
            set_sink_epoch(bad)  # type: ignore[arg-type]
    assert sink_epoch() == 3
    with pytest.raises(ConfigError):
        fence_sink_topic("127.0.0.1:1", "out", 0, W, kafka_conf={})
    with pytest.raises(ConfigError):
        fence_sink_topic("127.0.0.1:1", "out", 1, W, kafka_conf={}, timeout_s=0)
    with pytest.raises(ConfigError):
        fence_sinks([object()], 1, kafka_conf={})  # type: ignore[list-item]
    with pytest.raises(ConfigError):
        fence_sinks([(KafkaSink("k:9092", "a"), "")], 1, kafka_conf={})
    with pytest.raises(ConfigError):
        fence_sink_topic("127.0.0.1:1", "out", 1, "bad\nwriter", kafka_conf={})


def test_kafka_sinks_of_finds_sinks_inside_output_functions() -> None:
    a, b = KafkaSink("k:9092", "a"), KafkaSink("k:9092", "b")

    def user_output(t: object, rdd: object) -> None:
        b(t, rdd)  # type: ignore[arg-type]

    def as_foreach_rdd(fn: Callable[..., None]) -> Callable[..., None]:
        return lambda t, rdd: fn(t, rdd)  # the shape foreachRDD stores

    outputs = [as_foreach_rdd(a), as_foreach_rdd(user_output), as_foreach_rdd(print),
               functools.partial(a.write_partition, 0), a.__call__]
    assert kafka_sinks_of(*outputs) == [a, b]
    assert kafka_sinks_of(as_foreach_rdd(print)) == []
