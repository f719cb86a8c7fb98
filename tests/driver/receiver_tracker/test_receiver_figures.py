"""Receivers' figures on the driver, without Spark: the endpoint hands a logged
block's figures to its sink (in process and over gRPC), keeping only sane values and
a bound stream's own topics; EngineMetrics counts a receiver's WAL writes under its
log and computes the Kafka lag of receiver streams from the ends they reported."""

from __future__ import annotations

import math

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from walstream.driver.engine import StreamingEngine
from walstream.driver.engine_config import EngineConfig
from walstream.driver.receiver_tracker.endpoint import LocalReceiverEndpoint, sane_figures
from walstream.driver.receiver_tracker.stream_binding import StreamBinding
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.ui.metrics import MAX_RECEIVER_ENDS, EngineMetrics
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import BlockFigures, ReceivedBlockInfo, SourceEnd
from walstream.receiver.driver_client import DriverClient
from walstream.receiver.receiver import Receiver
from walstream.rpc.messages import MAX_SOURCE_ENDS
from walstream.testing import MemoryWAL
from walstream.wal.handle import RecordHandle
from walstream.wal.segments import segment_topic

pytestmark = pytest.mark.timeout(60)

Got = list[tuple[ReceivedBlockInfo, BlockFigures]]


def _samples(metrics: EngineMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def _block(stream: int, until: int, n: int = 10, topic: str = "src", part: int = 0,
           wal_topic: str = "wal-seg") -> ReceivedBlockInfo:
    return ReceivedBlockInfo(stream, f"input-{stream}-{until}", n,
                             RecordHandle(wal_topic, 0, until),
                             (SourceRange(topic, part, until - n, until),))


def _figures(*ends: tuple[str, int, int], seconds: float = 0.01,
             nbytes: int = 100) -> BlockFigures:
    return BlockFigures(seconds, nbytes, tuple(SourceEnd(t, p, e) for t, p, e in ends))


def test_the_endpoint_hands_a_logged_blocks_figures_to_its_sink() -> None:
    got: Got = []
    endpoint = LocalReceiverEndpoint(ReceivedBlockTracker([0], MemoryWAL()), [0],
                                     on_figures=lambda i, f: got.append((i, f)))
    endpoint.register_receiver(0, "h", "e")
    block = _block(0, 10)
    assert endpoint.add_block(block, figures=_figures(("src", 0, 25)))
    assert endpoint.add_block(_block(0, 20))  # no figures: nothing handed over
    assert got == [(block, _figures(("src", 0, 25)))]


def test_a_refused_block_hands_no_figures_and_a_failing_sink_refuses_no_block() -> None:
    got: Got = []
    endpoint = LocalReceiverEndpoint(ReceivedBlockTracker([0], MemoryWAL()), [0],
                                     on_figures=lambda i, f: got.append((i, f)))
    with pytest.raises(Exception, match="not registered"):
        endpoint.add_block(_block(0, 10), figures=_figures())
    assert got == []

    def broken(info: ReceivedBlockInfo, figures: BlockFigures) -> None:
        raise RuntimeError("sink down")

    other = LocalReceiverEndpoint(ReceivedBlockTracker([0], MemoryWAL()), [0], on_figures=broken)
    other.register_receiver(0, "h", "e")
    assert other.add_block(_block(0, 10), figures=_figures())


def test_sane_figures_keep_only_what_a_real_receiver_sends() -> None:
    wild = BlockFigures(math.nan, -5, (SourceEnd("src", 0, 7), SourceEnd("src", -1, 7),
                                      SourceEnd("src", 1, -3), SourceEnd("other", 0, 9)))
    assert sane_figures(wild, None) == BlockFigures(0.0, 0, (SourceEnd("src", 0, 7),
                                                             SourceEnd("other", 0, 9)))
    assert sane_figures(wild, frozenset({"src"})).source_ends == (SourceEnd("src", 0, 7),)
    assert sane_figures(_figures(seconds=1e9), None).wal_write_seconds == 0.0
    many = BlockFigures(0.1, 1, tuple(SourceEnd("src", p, 1) for p in range(MAX_SOURCE_ENDS + 5)))
    assert len(sane_figures(many, None).source_ends) == MAX_SOURCE_ENDS
    assert sane_figures(_figures(("src", 0, 3)), None) == _figures(("src", 0, 3))


def test_a_bound_stream_passes_on_only_its_declared_topics_ends() -> None:
    class Declares(Receiver):
        def source_topics(self) -> list[str]:
            return ["src"]

    got: Got = []
    endpoint = LocalReceiverEndpoint(ReceivedBlockTracker([1], MemoryWAL()), [1],
                                     on_figures=lambda i, f: got.append((i, f)))
    prefix = "walstream.wal."
    endpoint.bind(StreamBinding(1, prefix, "app-receiver-1", frozenset({"src"})))
    endpoint.register_receiver(1, "h", "e")
    seg = segment_topic(prefix, "app-receiver-1", 60_000, 120_000)
    assert endpoint.add_block(_block(1, 10, wal_topic=seg),
                              figures=_figures(("src", 0, 20), ("elsewhere", 0, 99)))
    [(_, figures)] = got
    assert figures.source_ends == (SourceEnd("src", 0, 20),)


def test_figures_travel_over_grpc_with_the_block() -> None:
    got: Got = []
    tracker = ReceiverTracker(ReceivedBlockTracker([0], MemoryWAL()), [0],
                              on_figures=lambda i, f: got.append((i, f)))
    client = DriverClient(tracker.address, timeout_s=10)
    try:
        assert client.register_receiver(0, "h", "e").accepted
        block = _block(0, 10)
        sent = _figures(*[("src", p, 100 + p) for p in range(MAX_SOURCE_ENDS)],
                        seconds=0.25, nbytes=4321)
        assert client.add_block(block, sent)
        assert client.add_block(_block(0, 20))  # a report without figures
        assert got == [(block, sent)]
    finally:
        client.close()
        tracker.stop()


def test_receiver_wal_writes_are_counted_under_the_receivers_log() -> None:
    m = EngineMetrics("app")
    handle = RecordHandle("walstream.wal.app-receiver-0--1-2", 0, 5)
    m.receiver_reported("app-receiver-0", handle, _figures(seconds=0.02, nbytes=300))
    m.receiver_reported("app-receiver-0", handle, _figures(seconds=0.04, nbytes=200))
    m.wal_cleaned("app-receiver-0", 5000)
    s = _samples(m)
    log = (("log", "app-receiver-0"),)
    assert s[("walstream_wal_bytes_written_total", log)] == 500
    assert s[("walstream_wal_write_seconds_count", log)] == 2
    assert s[("walstream_wal_write_seconds_sum", log)] == pytest.approx(0.06)
    [w] = m.snapshot()["wal"]
    assert (w["name"], w["records"], w["bytes"], w["last_topic"], w["clean_threshold_ms"]) == (
        "app-receiver-0", 2, 500, handle.topic, 5000)
    assert w["events"] == {}  # tracker event kinds are the driver WAL's only


def test_receiver_lag_is_the_reported_end_minus_the_newest_processed_until() -> None:
    m = EngineMetrics("app")
    handle = RecordHandle("w", 0, 0)
    m.receiver_reported("app-receiver-0", handle, _figures(("src", 0, 100), ("src", 1, 50)))
    assert m.kafka_lag() == {}  # nothing processed yet
    m.batch_sources({0: (_block(0, 60, n=60), _block(0, 30, n=30, part=1))})
    assert m.kafka_lag() == {("src", 0): 40, ("src", 1): 20}
    m.receiver_reported("app-receiver-0", handle, _figures(("src", 0, 90)))  # never back
    m.batch_sources({0: (_block(0, 100, n=40), _block(0, 50, n=20, part=1))})
    assert m.kafka_lag() == {("src", 0): 0, ("src", 1): 0}
    m.receiver_reported("app-receiver-0", handle, _figures(("src", 0, 130)))
    s = _samples(m)
    assert s[("walstream_kafka_source_lag", (("partition", "0"), ("topic", "src")))] == 30
    assert s[("walstream_kafka_source_lag", (("partition", "1"), ("topic", "src")))] == 0
    assert m.snapshot()["kafka_lag"] == [{"topic": "src", "partition": 0, "lag": 30},
                                         {"topic": "src", "partition": 1, "lag": 0}]


def test_receiver_and_direct_stream_ends_are_merged_and_receiver_ends_are_bounded() -> None:
    m = EngineMetrics("app")
    m.set_source_ends(lambda: {("d", 0): 10, ("src", 0): 5})
    m.receiver_reported("r", RecordHandle("w", 0, 0), _figures(("src", 0, 8)))
    m.batch_sources({0: (_block(0, 4, n=4, topic="d"), _block(0, 2, n=2))})
    assert m.kafka_lag() == {("d", 0): 6, ("src", 0): 6}
    m.receiver_reported("r", RecordHandle("w", 0, 0), BlockFigures(0.0, 0, tuple(
        SourceEnd("many", p, 1) for p in range(MAX_RECEIVER_ENDS + 10))))
    assert len(m._receiver_ends) == MAX_RECEIVER_ENDS


def _engine(conf: dict[str, str]) -> StreamingEngine:
    config = EngineConfig.from_spark_conf(conf, app_id="fig", batch_interval_ms=100,
                                          bootstrap_servers="127.0.0.1:1")

    class R(Receiver):
        pass

    return StreamingEngine(None, config, {3: R()}, lambda t: [])


def test_the_engine_names_a_receivers_log_by_its_stream_not_by_the_report() -> None:
    engine = _engine({})
    try:
        assert engine.receiver_wal_name(3) == "fig-receiver-3"
        engine._on_receiver_figures(_block(3, 10), _figures(("src", 0, 12), nbytes=77))
        engine._on_receiver_figures(_block(9, 10), _figures(nbytes=1))  # no such receiver
        s = _samples(engine.metrics)
        assert s[("walstream_wal_bytes_written_total", (("log", "fig-receiver-3"),))] == 77
        assert [w["name"] for w in engine.metrics.snapshot()["wal"]] == ["fig-receiver-3"]
        assert engine.metrics._receiver_ends == {("src", 0): 12}
    finally:
        engine.stop()
