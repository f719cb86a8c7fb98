"""A running pipeline attacked on every port it opens, by a peer without its secret.

Real broker, real PySpark local[3]. A DStream engine: a generator receiver's
records are collected batch by batch; once the engine is up, its receiver endpoint
gets 500 header-only HTTP/2 streams, 300 idle and 200 garbage connections, and its
status server 250 idle and 250 dribbling ones. Under that load the receiver's
worker is SIGKILLed: the relaunched receiver must register and report, every
``/metrics`` scrape must be answered within a second, and the batches must hold
every record exactly once. A Structured Streaming query: its source service's
call port and session port are flooded (idle, dribbling, garbage hellos) before
the query starts, its source's receiver endpoint once it is up; the query still
opens its session, completes its micro-batches and holds every item once.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import walstream.structured.registry as registry
from walstream.driver.dstream.block_rdd import block_rdd
from walstream.driver.engine import EngineConfig, StreamingEngine
from walstream.driver.scheduler.job_scheduler import Job
from walstream.receiver import RateGeneratorReceiver, generated_line
from walstream.rpc import messages as m
from walstream.testing import wait_until
from walstream.testing.adversary import Adversary
from walstream.testing.fixtures import KafkaBroker, walstream_session

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]
TOTAL, RATE, SEED = 6000, 300, 17
WAIT_S = 120
GARBAGE = b"\x00garbage that is no HTTP/2 preface\r\n\r\n"


@pytest.fixture(scope="module")
def spark(broker: KafkaBroker) -> Iterator[Any]:
    with walstream_session(broker.bootstrap, "walstream-adversary-tests") as session:
        yield session


@pytest.fixture
def sc(spark: Any) -> Any:
    return spark.sparkContext


def _worker_pid(engine: StreamingEngine) -> int:
    info = engine._receiver_tracker.receivers[0]  # type: ignore[union-attr]
    return int(info.executor_id.rsplit(":", 1)[1]) if info.state == "active" else -1


def _reported(engine: StreamingEngine) -> int:
    return sum(r.until_offset for r in engine.tracker.positions(0))


def _scrape(url: str) -> float:
    started = time.monotonic()
    with urllib.request.urlopen(url + "metrics", timeout=10) as resp:
        body = resp.read()
    assert resp.status == 200 and b"walstream" in body
    return time.monotonic() - started


def test_receivers_register_and_report_and_metrics_answer_under_attack(
        sc: Any, bootstrap: str, unique_name: Callable[[str], str]) -> None:
    lines: list[str] = []
    holder: dict[str, StreamingEngine] = {}

    def jobs(t: int) -> list[Job]:
        def run() -> None:
            blocks = holder["e"].tracker.get_blocks_of_batch_and_stream(t, 0)
            lines.extend(block_rdd(sc, blocks, bootstrap).collect())
        return [Job(t, 0, "collect", run)]

    cfg = EngineConfig(app_id=unique_name("attacked"), bootstrap_servers=bootstrap,
                       batch_interval_ms=500, relaunch_delay_s=0.5, ui_port=0)
    engine = holder["e"] = StreamingEngine(
        sc, cfg, {0: RateGeneratorReceiver(rate=RATE, seed=SEED, total=TOTAL)}, jobs)
    adversary = Adversary()
    scrapes: list[float] = []
    try:
        engine.start()
        address = engine._receiver_tracker.address  # type: ignore[union-attr]
        host, port = address.rsplit(":", 1)
        assert engine.status_server is not None
        url = engine.status_server.url
        ui_host, ui_port = url.split("//", 1)[1].strip("/").rsplit(":", 1)

        adversary.header_only_streams(address, 500, m.SERVICE)
        adversary.idle(host, int(port), 300)
        adversary.garbage(host, int(port), 200, GARBAGE)
        adversary.idle(ui_host, int(ui_port), 250)
        adversary.dribble(ui_host, int(ui_port), 250, b"GET /metr")

        wait_until(lambda: _reported(engine) > 0 and _worker_pid(engine) > 0, WAIT_S,
                   "the receiver to register and report under attack", poll_s=0.2)
        scrapes.append(_scrape(url))
        victim = _worker_pid(engine)
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: _worker_pid(engine) not in (-1, victim), WAIT_S,
                   "the killed receiver to be relaunched and register again", poll_s=0.2)
        relaunched_at = _reported(engine)
        wait_until(lambda: _reported(engine) > relaunched_at, WAIT_S,
                   "the relaunched receiver to report", poll_s=0.2)
        for _ in range(10):
            scrapes.append(_scrape(url))
            time.sleep(0.3)
        wait_until(lambda: _reported(engine) >= TOTAL, WAIT_S, f"all {TOTAL} records reported",
                   poll_s=0.2)
        answered, opened = adversary.refused_streams()
        assert answered == opened, f"{answered} of {opened} header-only streams refused"
        launches = engine._receiver_tracker.receivers[0].launches  # type: ignore[union-attr]
        engine.stop(graceful=True)
    finally:
        adversary.close()
        engine.stop()
    assert max(scrapes) < 1.0, scrapes
    expected = Counter(generated_line(SEED, i) for i in range(TOTAL))
    got = Counter(lines)
    assert got == expected, (f"{sum(got.values())} of {TOTAL} records; lost "
                             f"{sum((expected - got).values())}, doubled "
                             f"{sum((got - expected).values())}")
    assert launches == 2, launches  # the first launch and the relaunch after the kill


def test_a_query_completes_its_micro_batches_under_attack_on_the_source_service(
        spark: Any, unique_name: Callable[[str], str]) -> None:
    reg = registry._registry
    assert reg is not None
    with open(reg.service.info_file) as f:
        info = json.load(f)
    host, port = info["address"].rsplit(":", 1)
    s_host, s_port = info["sessions"].rsplit(":", 1)
    name = unique_name("attacked-query")
    items = 600
    adversary = Adversary()
    query = None
    try:
        adversary.idle(host, int(port), 200)
        adversary.dribble(host, int(port), 200, b"POST /call HTTP/1.1\r\n")
        adversary.idle(s_host, int(s_port), 200)
        adversary.garbage(s_host, int(s_port), 100, b"[1, 2, 3]\n")  # JSON, no object
        adversary.garbage(s_host, int(s_port), 100, b"\xff\xfe no JSON at all\n")
        df = (spark.readStream.format("walstream").option("name", name)
              .option("receiver", "walstream.testing.sequence_receiver:SequenceReceiver")
              .option("receiver.args", json.dumps({"total": items, "rate": 200}))
              .option("maxBlocksPerTrigger", "2").load())
        table = name.replace("-", "_")
        query = df.writeStream.format("memory").queryName(table).start()
        wait_until(lambda: name in reg._engines and reg._engines[name]._endpoint is not None,
                   WAIT_S, "the source's engine to bind its receiver endpoint", poll_s=0.2)
        endpoint = reg._engines[name]._endpoint
        assert endpoint is not None
        adversary.header_only_streams(endpoint.address, 300, m.SERVICE)
        e_host, e_port = endpoint.address.rsplit(":", 1)
        adversary.idle(e_host, int(e_port), 200)

        def count() -> int:
            return int(spark.sql(f"select count(*) from {table}").collect()[0][0])

        wait_until(lambda: count() >= items, WAIT_S, f"{items} rows under attack",
                   poll_s=0.5)
        progress = query.recentProgress
        rows = spark.sql(f"select value from {table}").collect()
    finally:
        adversary.close()
        if query is not None:
            query.stop()
    got = Counter(bytes(r.value).decode() for r in rows)
    assert got == Counter(f"item-{i}" for i in range(items)), (
        f"{sum(got.values())} rows for {items} items")
    assert len([p for p in progress if p["numInputRows"]]) >= 2, progress
