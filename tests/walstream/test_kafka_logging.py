"""librdkafka's lines reach Python logging, never raw stderr (walstream.kafka_logging)."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from walstream import procs
from walstream.kafka_logging import LOGGER_NAME, KafkaClientLogger, is_transport_noise, with_logger
from walstream.testing import wait_until
from walstream.testing.fixtures import embedded_broker

pytestmark = pytest.mark.timeout(120)

REFUSED = ("[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to "
           "ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)")
SASL = "[thrd:sasl_plaintext://b:9092/bootstrap]: SASL authentication error: unknown user"


def _raw_librdkafka_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("%")]


def test_transport_noise_is_lowered_and_security_errors_keep_their_level(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    logger = KafkaClientLogger()
    logger.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", REFUSED)
    logger.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", SASL)
    logger.log(logging.WARNING, "%s [%s] %s", "CONFWARN", "rdkafka#producer-1", "odd setting")
    levels = [(r.levelno, r.getMessage().split(" ")[0]) for r in caplog.records]
    assert levels == [(logging.INFO, "FAIL"), (logging.ERROR, "FAIL"),
                      (logging.WARNING, "CONFWARN")]
    assert all(r.name == LOGGER_NAME for r in caplog.records)
    assert is_transport_noise("1/1 brokers are down")
    assert not is_transport_noise("SSL handshake failed: Disconnected")


def test_an_application_logger_wins_and_the_input_is_not_mutated() -> None:
    mine = logging.getLogger("mine")
    conf = {"bootstrap.servers": "x", "logger": mine}
    assert with_logger(conf)["logger"] is mine
    plain = {"bootstrap.servers": "x"}
    assert isinstance(with_logger(plain)["logger"], KafkaClientLogger)
    assert "logger" not in plain


def test_client_lines_reach_logging_not_stderr(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    port = procs.free_port()  # nothing listens: every connect is refused
    producer = Producer(with_logger({"bootstrap.servers": f"127.0.0.1:{port}"}))

    def refused_logged() -> bool:
        producer.poll(0.1)  # serves librdkafka's log queue
        return any("Connection refused" in r.getMessage() for r in caplog.records)

    wait_until(refused_logged, 10, "a refused connection to be logged")
    assert _raw_librdkafka_lines(capfd.readouterr().err) == []
    refused = [r for r in caplog.records if "Connection refused" in r.getMessage()]
    assert refused and all(r.levelno == logging.INFO for r in refused)


def test_wal_clients_print_no_raw_librdkafka_lines_when_the_broker_stops(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The demo's case: a broker stops under open WAL clients (producer, reader, admin)."""
    from walstream.wal import KafkaWriteAheadLog

    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    with embedded_broker(tmp_path / "home") as broker:
        log = KafkaWriteAheadLog(broker.bootstrap, "stderr-check")
        handle = log.write(b"payload", int(time.time() * 1000))
        assert log.read(handle) == b"payload"
    try:
        # The producer's poller serves the log queue every 50 ms; give librdkafka
        # time to notice the dropped connections and retry them.
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and not any(
            "Connection refused" in r.getMessage() or "Disconnected" in r.getMessage()
            for r in caplog.records
        ):
            time.sleep(0.2)
    finally:
        log.close()
    assert _raw_librdkafka_lines(capfd.readouterr().err) == []
    assert any(r.name == LOGGER_NAME for r in caplog.records)
