"""The engine on real Spark with the endpoint secured: Spark's secret and TLS. The
receiver runs in a Spark Python worker with only what its task spec carries (the
derived keys and the trusted certificate), registers, reports every record and
stops when told; nothing is refused on the way."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from walstream.driver.dstream.block_rdd import block_rdd
from walstream.driver.engine import StreamingEngine
from walstream.driver.engine_config import EngineConfig
from walstream.driver.receiver_tracker.endpoint_conf import (
    SSL_CERT_FILE_KEY,
    SSL_ENABLED_KEY,
    SSL_KEY_FILE_KEY,
)
from walstream.driver.scheduler.job_scheduler import Job
from walstream.driver.spark import create_spark_context
from walstream.receiver import RateGeneratorReceiver
from walstream.rpc import auth
from walstream.testing import wait_until

tls_certs = pytest.importorskip("tests.driver.tls_certs")  # needs `cryptography`

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def sc() -> Iterator[Any]:
    context = create_spark_context("walstream-endpoint-security", "local[2]")
    yield context
    context.stop()


def test_a_receiver_on_spark_reports_everything_to_a_tls_endpoint_with_sparks_secret(
    sc: Any, bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    pki = tls_certs.write_pki(tmp_path)
    app = unique_name("secured")
    conf = {"spark.master": "local[2]", "spark.authenticate": "true",
            "spark.authenticate.secret": "the-apps-secret", SSL_ENABLED_KEY: "true",
            SSL_KEY_FILE_KEY: str(pki["other_key"]), SSL_CERT_FILE_KEY: str(pki["other"])}
    cfg = EngineConfig.from_spark_conf(conf, app_id=app, batch_interval_ms=500,
                                       bootstrap_servers=bootstrap, relaunch_delay_s=0.5)
    counts: list[int] = []
    holder: dict[str, StreamingEngine] = {}

    def jobs(t: int) -> list[Job]:
        def run() -> None:
            blocks = holder["e"].tracker.get_blocks_of_batch_and_stream(t, 0)
            counts.append(block_rdd(sc, blocks, bootstrap).count())
        return [Job(t, 0, "count", run)]

    engine = holder["e"] = StreamingEngine(
        sc, cfg, {0: RateGeneratorReceiver(rate=2000, seed=5, total=1000)}, jobs)
    engine.start()
    try:
        endpoint = engine.receiver_tracker
        assert endpoint.tls
        assert endpoint.credentials == auth.EndpointCredentials.from_secret(
            b"the-apps-secret", app, pki["other"].read_bytes())
        wait_until(lambda: sum(r.until_offset for r in engine.tracker.positions(0)) >= 1000,
                   120, "the generator's 1000 records", poll_s=0.05)
        assert endpoint.auth.refused == 0
        assert endpoint.receivers[0].errors == []
    finally:
        engine.stop(graceful=True)
    assert sum(counts) == 1000
    # The receiver acted on the driver's signed STOP and deregistered with its session.
    assert engine.receiver_tracker.receivers[0].state == "deregistered"
