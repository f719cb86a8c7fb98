"""The driver's status server on a real pipeline: ``/metrics`` carries the
listener's figures, ``/api/status`` and ``/`` describe the app, ``walstream
status`` prints it, and ``spark.walstream.ui.port=-1`` serves nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.api.helpers import TIMEOUT, LineServer
from walstream import cli
from walstream.driver import KafkaUtils, StreamingContext, StreamingListener
from walstream.driver.ui.status_server import PORT_KEY
from walstream.status_view import STATE_FILE
from walstream.testing import wait_until

pytestmark = pytest.mark.spark

LINES = 300


class _Counting(StreamingListener):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.completed = 0
        self.failed = 0
        self.records = 0

    def onBatchCompleted(self, batchCompleted: Any) -> None:  # noqa: N803
        info = batchCompleted.batchInfo()
        with self.lock:
            if any(op.failureReason() for op in info.outputOperationInfos().values()):
                self.failed += 1
            else:
                self.completed += 1
                self.records += info.numRecords()

    def figures(self) -> tuple[int, int, int]:
        with self.lock:
            return self.completed, self.failed, self.records


@pytest.fixture
def lines() -> Iterator[Callable[[list[str]], LineServer]]:
    made: list[LineServer] = []

    def make(data: list[str]) -> LineServer:
        made.append(LineServer(data))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _get(url: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.headers.get("Content-Type", ""), resp.read()


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of ``/metrics``, by name and sorted labels."""
    _, body = _get(url + "metrics")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples}


def _running_pipeline(ssc: StreamingContext, server: LineServer) -> _Counting:
    listener = _Counting()
    ssc.addStreamingListener(listener)
    ssc.socketTextStream("127.0.0.1", server.port).foreachRDD(lambda rdd: rdd.count())
    ssc.start()
    wait_until(lambda: listener.figures()[2] >= LINES, TIMEOUT, f"{LINES} records processed",
               ssc=ssc)
    return listener


def _url(ssc: StreamingContext) -> str:
    engine = ssc._engine
    assert engine is not None and engine.status_server is not None
    return engine.status_server.url


def test_metrics_are_the_listeners_figures(
        make_ssc: Callable[..., StreamingContext],
        lines: Callable[[list[str]], LineServer]) -> None:
    ssc = make_ssc(0.5)
    listener = _running_pipeline(ssc, lines([f"line {i}" for i in range(LINES)]))
    url = _url(ssc)
    assert url.startswith("http://127.0.0.1:")
    seen: dict[str, Any] = {}

    def agrees() -> bool:
        # Batches go on while we read: the listener's figures before and after the
        # scrape must be equal, and equal to the scrape's.
        before = listener.figures()
        seen["m"] = m = _scrape(url)
        seen["l"] = before
        return before == listener.figures() == (
            m[("walstream_batches_completed_total", ())],
            m[("walstream_batches_failed_total", ())],
            m[("walstream_records_processed_total", ())])

    wait_until(agrees, TIMEOUT, "the metrics to agree with the listener", ssc=ssc)
    m = seen["m"]
    assert m[("walstream_records_processed_total", ())] == LINES  # the input, once
    assert m[("walstream_records_received_total", (("stream", "0"),))] == LINES
    assert m[("walstream_receivers", (("state", "active"),))] == 1
    assert m[("walstream_receivers", (("state", "failed"),))] == 0
    assert ("walstream_receiver_rate_limit", (("stream", "0"),)) in m
    assert m[("walstream_batches_unprocessed", ())] >= 0
    assert m[("walstream_batches_running", ())] >= 0
    assert m[("walstream_batch_total_delay_seconds_count", ())] == seen["l"][0]
    assert m[("walstream_last_batch_total_delay_seconds", ())] >= 0
    log = f"{ssc._engine.config.app_id}-driver"  # type: ignore[union-attr]
    assert m[("walstream_wal_bytes_written_total", (("log", log),))] > 0
    assert m[("walstream_wal_write_seconds_count", (("log", log),))] > 0
    assert m[("walstream_wal_events_total", (("kind", "BLOCK_ADDITION"),))] >= 1
    assert m[("walstream_wal_events_total", (("kind", "BATCH_ALLOCATION"),))] >= 1
    assert m[("walstream_recovery_replay_seconds", ())] >= 0
    assert m[("walstream_recovery_first_batch_seconds", ())] > 0


def test_status_api_page_and_cli(
        make_ssc: Callable[..., StreamingContext], lines: Callable[[list[str]], LineServer],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WALSTREAM_HOME", str(tmp_path))
    ssc = make_ssc(0.5)
    _running_pipeline(ssc, lines([f"line {i}" for i in range(LINES)]))
    url = _url(ssc)
    state = json.loads((tmp_path / STATE_FILE).read_text())
    assert state["url"] == url and state["pid"] == os.getpid()

    kind, body = _get(url + "api/status")
    assert kind == "application/json"
    s = json.loads(body)
    assert s["app_id"] == ssc._engine.config.app_id  # type: ignore[union-attr]
    assert s["uptime_seconds"] > 0 and s["url"] == url
    assert s["totals"]["records_processed"] == LINES
    assert sum(b["records"] for b in s["batches"] if b["status"] == "completed") == LINES
    for b in s["batches"]:
        assert b["total_delay_ms"] == b["scheduling_delay_ms"] + b["processing_delay_ms"]
        assert b["error"] == ""
    [receiver] = s["receivers"]
    assert receiver["stream"] == 0 and receiver["state"] == "active"
    assert receiver["name"] == "SocketTextReceiver" and receiver["host"]
    app = s["app_id"]
    wals = {w["name"]: w for w in s["wal"]}
    assert set(wals) == {f"{app}-driver", f"{app}-receiver-0"}
    wal = wals[f"{app}-driver"]
    assert wal["bytes"] > 0 and wal["events"]["BLOCK_ADDITION"] >= 1
    receiver_wal = wals[f"{app}-receiver-0"]  # figures the receiver sent with its blocks
    assert receiver_wal["bytes"] > 0 and receiver_wal["events"] == {}
    assert s["restart"]["restarted"] is False

    kind, page = _get(url)
    assert kind.startswith("text/html")
    html = page.decode()
    assert "api/status" in html and "<svg" in html
    assert "http://" not in html and "https://" not in html  # nothing from elsewhere

    assert cli.main(["status", url]) == 0
    by_url = capsys.readouterr().out
    assert cli.main(["status"]) == 0  # finds it through $WALSTREAM_HOME/status.json
    by_file = capsys.readouterr().out
    for out in (by_url, by_file):
        assert f"app {s['app_id']}" in out
        assert "SocketTextReceiver" in out and "active" in out
        assert "completed" in out and "Write-ahead logs" in out
    # The installed command too, in a process of its own.
    done = subprocess.run([sys.executable, "-m", "walstream.cli", "status", url],
                          capture_output=True, text=True, timeout=60, check=True)
    assert f"app {s['app_id']}" in done.stdout

    ssc.stop(stopSparkContext=False)
    assert not (tmp_path / STATE_FILE).exists()
    assert cli.main(["status"]) == 2


def test_port_minus_one_serves_nothing(
        sc: Any, make_ssc: Callable[..., StreamingContext], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WALSTREAM_HOME", str(tmp_path))
    sc._conf.set(PORT_KEY, "-1")  # the running SparkContext's conf, read at start
    try:
        ssc = make_ssc(0.5)
        ssc.queueStream([[1]]).foreachRDD(lambda rdd: None)
        ssc.start()
        engine = ssc._engine
        assert engine is not None
        assert engine.status_server is None
        assert engine.config.ui_port == -1
        assert not (tmp_path / STATE_FILE).exists()
        # The figures are still kept (a listener): only the server is off.
        wait_until(lambda: engine.metrics.snapshot()["totals"]["batches_completed"] >= 1,
                   TIMEOUT, "a completed batch", ssc=ssc)
    finally:
        sc._conf.set(PORT_KEY, "0")


def _produce(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        producer.produce(topic, value=b"x", partition=i % partitions)
    assert producer.flush(30) == 0, "not every record was delivered"


def test_kafka_lag_of_a_direct_stream(
        make_ssc: Callable[..., StreamingContext], bootstrap: str,
        topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("lag", partitions=2)
    _produce(bootstrap, topic, 200, 2)
    ssc = make_ssc(0.5)
    listener = _Counting()
    ssc.addStreamingListener(listener)
    KafkaUtils.createDirectStream(
        ssc, [topic], {"metadata.broker.list": bootstrap, "auto.offset.reset": "smallest"}
    ).foreachRDD(lambda rdd: rdd.count())
    ssc.start()
    try:  # stopped here, before topic_factory deletes the topic under the running stream
        wait_until(lambda: listener.figures()[2] >= 200, TIMEOUT, "200 records processed",
                   ssc=ssc)
        url = _url(ssc)
        lag = {(topic, "0"), (topic, "1")}

        def caught_up() -> bool:
            m = _scrape(url)
            return all(m.get(("walstream_kafka_source_lag",
                              (("partition", p), ("topic", t)))) == 0 for t, p in lag)

        wait_until(caught_up, TIMEOUT, "a lag of 0 on both partitions", ssc=ssc)
        m = _scrape(url)
        assert m[("walstream_records_processed_total", ())] == 200
        _, body = _get(url + "api/status")
        assert {(x["topic"], str(x["partition"])) for x in json.loads(body)["kafka_lag"]} == lag
    finally:
        ssc.stop(stopSparkContext=False)


def test_kafka_lag_and_wal_of_a_kafka_receiver(
        make_ssc: Callable[..., StreamingContext], bootstrap: str,
        topic_factory: Callable[..., str], unique_name: Callable[[str], str]) -> None:
    """The receiver's figures come with its block reports: its WAL's writes under
    ``<app>-receiver-0`` and the source end it knows, so a drained partition lags 0."""
    topic = topic_factory("rlag", partitions=1)
    _produce(bootstrap, topic, 200, 1)
    ssc = make_ssc(0.5)
    listener = _Counting()
    ssc.addStreamingListener(listener)
    KafkaUtils.createStream(ssc, bootstrap, unique_name("group"), {topic: 1},
                            {"auto.offset.reset": "smallest"}).foreachRDD(lambda rdd: rdd.count())
    ssc.start()
    try:  # stopped here, before topic_factory deletes the topic under the running receiver
        wait_until(lambda: listener.figures()[2] >= 200, TIMEOUT, "200 records processed",
                   ssc=ssc)
        url = _url(ssc)
        key = ("walstream_kafka_source_lag", (("partition", "0"), ("topic", topic)))
        wait_until(lambda: _scrape(url).get(key) == 0, TIMEOUT, "a lag of 0", ssc=ssc)
        m = _scrape(url)
        app = ssc._engine.config.app_id  # type: ignore[union-attr]
        log = (("log", f"{app}-receiver-0"),)
        assert m[("walstream_records_processed_total", ())] == 200
        assert m[("walstream_wal_bytes_written_total", log)] > 0
        assert m[("walstream_wal_write_seconds_count", log)] >= 1
        assert m[("walstream_wal_bytes_written_total", (("log", f"{app}-driver"),))] > 0
        _, body = _get(url + "api/status")
        s = json.loads(body)
        assert s["kafka_lag"] == [{"topic": topic, "partition": 0, "lag": 0}]
        wals = {w["name"]: w for w in s["wal"]}
        assert set(wals) == {f"{app}-driver", f"{app}-receiver-0"}
        receiver_wal = wals[f"{app}-receiver-0"]
        assert receiver_wal["bytes"] > 0 and receiver_wal["records"] >= 1
        assert f"{app}-receiver-0" in receiver_wal["last_topic"]
    finally:
        ssc.stop(stopSparkContext=False)


def test_a_restart_shows_its_replay_and_the_checkpoint_state_file(
        make_ssc: Callable[..., StreamingContext], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    inputd, cpd = tmp_path / "in", tmp_path / "cp"
    inputd.mkdir()

    def setup() -> StreamingContext:
        ssc = make_ssc(0.5)
        ssc.checkpoint(str(cpd))
        ssc.textFileStream(str(inputd)).foreachRDD(lambda rdd: rdd.count())
        return ssc

    def completed(ssc: StreamingContext, n: int) -> None:
        engine = ssc._engine
        assert engine is not None
        wait_until(lambda: engine.metrics.snapshot()["totals"]["batches_completed"] >= n,
                   TIMEOUT, f"{n} completed batches", ssc=ssc)

    ssc = StreamingContext.getOrCreate(str(cpd), setup)
    ssc.start()
    try:
        completed(ssc, 3)
        state = json.loads((cpd / STATE_FILE).read_text())
        assert state["url"] == _url(ssc)
        assert cli.main(["status", "--checkpoint", str(cpd)]) == 0
        assert f"app {ssc._engine.config.app_id}" in capsys.readouterr().out  # type: ignore[union-attr]
        _, body = _get(_url(ssc) + "api/status")
        assert json.loads(body)["restart"]["restarted"] is False
    finally:
        ssc.stop(stopSparkContext=False)
    assert not (cpd / STATE_FILE).exists()

    ssc = StreamingContext.getOrCreate(str(cpd), setup)
    ssc.start()
    try:
        completed(ssc, 1)
        url = _url(ssc)
        m = _scrape(url)
        assert m[("walstream_recovery_replayed_events", ())] > 0
        assert m[("walstream_recovery_replay_seconds", ())] >= 0
        assert m[("walstream_recovery_first_batch_seconds", ())] > 0
        _, body = _get(url + "api/status")
        restart = json.loads(body)["restart"]
        assert restart["restarted"] is True and restart["replayed_events"] > 0
        assert restart["first_batch_seconds"] > 0
    finally:
        ssc.stop(stopSparkContext=False)
