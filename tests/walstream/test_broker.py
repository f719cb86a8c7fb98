"""The embedded Tansu broker manager (walstream.broker), with real processes.

Every test gets its own home directory (``tmp_path``) and free port, and the
``home`` fixture stops whatever was started there, also when the test fails:
``broker.stop`` first, then any tansu/moto process still bound to a port the
test used (found by its command line and ended by pid).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from walstream import broker, procs
from walstream.errors import BrokerPortBusyError, PrerequisiteError
from walstream.testing import wait_until
from walstream.testing.fixtures import docker_available

pytestmark = pytest.mark.timeout(120)


def _pids_with(*needles: str) -> list[int]:
    """Live pids whose command line contains every needle (never this process)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        cmd = procs.cmdline(int(entry.name))
        if cmd and all(n in cmd for n in needles) and procs.pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@dataclass
class Home:
    """A private broker home plus what was started in it, for a sure teardown."""

    path: Path
    ports: set[int] = field(default_factory=set)
    store_ports: set[int] = field(default_factory=set)
    pids: set[int] = field(default_factory=set)

    def port(self) -> int:
        p = procs.free_port()
        self.ports.add(p)
        return p

    def track(self, state: broker.BrokerState) -> broker.BrokerState:
        self.ports.add(state.port)
        self.pids.add(state.pid)
        if state.store_pid:
            self.pids.add(state.store_pid)
            self.store_ports.add(state.store_port)
        return state

    def leftovers(self) -> list[int]:
        """tansu/moto processes this test started that are still alive."""
        alive = {
            p
            for p in self.pids
            if procs.pid_alive(p) and any(n in procs.cmdline(p) for n in ("tansu", "moto"))
        }
        for port in self.ports:
            alive.update(_pids_with("tansu", f"tcp://{broker.HOST}:{port}"))
        for port in self.store_ports:
            alive.update(_pids_with("moto", f"-p {port}"))
        return sorted(alive)

    def cleanup(self) -> None:
        try:
            state = broker.read_state(self.path)
            if state is not None:
                self.track(state)
        except Exception:
            pass
        try:
            broker.stop(self.path)
        finally:
            for pid in self.leftovers():
                procs.terminate(pid)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    h = Home(tmp_path / "walstream-home")
    try:
        yield h
    finally:
        h.cleanup()
        assert h.leftovers() == [], "a broker process survived the test"


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _wait_port_freed(port: int, timeout_s: float = 5.0) -> None:
    """Wait until ``port`` can be bound again; fail after ``timeout_s``.

    Needed after a kill: ``kill_broker_only``/``stop`` return as soon as the Tansu
    pid looks dead (empty cmdline or zombie thread-group leader), which can be a
    millisecond before its other threads exit and its listening socket closes.
    """
    wait_until(lambda: procs.port_free(broker.HOST, port), timeout_s,
               f"port {port} to be freed", poll_s=0.01)


def _create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, -1)])
    futures[name].result(timeout=30)  # keep `admin` referenced until it resolves


def _read_all(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of partition 0, read to the end by assign()."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    out: list[tuple[int, bytes]] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return out
                if err.retriable() or not err.fatal():
                    continue
                raise AssertionError(f"consume failed: {err}")
            offset, value = msg.offset(), msg.value()
            assert offset is not None and value is not None
            out.append((offset, value))
        raise AssertionError(f"did not reach the end of {topic} in {timeout_s}s ({len(out)} read)")
    finally:
        consumer.close()


# --------------------------------------------------------------------------- lifecycle


def test_start_status_idempotent_stop(home: Home) -> None:
    port = home.port()
    state = home.track(broker.start(home.path, port=port))
    assert state.bootstrap == f"127.0.0.1:{port}"
    assert state.port == port and not state.durable
    assert state.broker_alive()

    # It answers Kafka metadata requests.
    md = AdminClient({"bootstrap.servers": state.bootstrap}).list_topics(timeout=10)
    assert md.brokers, "no broker in the metadata"
    assert {(b.host, b.port) for b in md.brokers.values()} == {("127.0.0.1", port)}

    # Idempotent: the same broker comes back, also when asked again with another port.
    again = broker.start(home.path, port=port)
    assert (again.pid, again.bootstrap) == (state.pid, state.bootstrap)
    assert broker.start(home.path).pid == state.pid

    # Status: the state file and bootstrap_servers() see it.
    recorded = broker.read_state(home.path)
    assert recorded is not None and recorded.pid == state.pid
    assert broker.bootstrap_servers(home.path) == state.bootstrap
    assert json.loads((home.path / broker.STATE_FILE).read_text())["port"] == port

    # Stop ends it and waits: the pid is gone when stop returns.
    assert broker.stop(home.path) is True
    assert not procs.pid_alive(state.pid)
    assert broker.read_state(home.path) is None
    assert broker.bootstrap_servers(home.path) is None
    _wait_port_freed(port, 2.0)

    # A second stop is harmless.
    assert broker.stop(home.path) is False


def test_busy_port_gives_clear_error(home: Home) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((broker.HOST, 0))
        s.listen(1)
        port = s.getsockname()[1]
        home.ports.add(port)
        with pytest.raises(BrokerPortBusyError) as info:
            broker.start(home.path, port=port)
    assert isinstance(info.value, PrerequisiteError)
    msg = str(info.value)
    assert str(port) in msg and "already in use" in msg and "--port" in msg
    assert "\n" not in msg
    assert broker.read_state(home.path) is None  # nothing recorded, nothing started


def test_stale_state_file_is_cleared(home: Home) -> None:
    dead = _dead_pid()
    old_port = home.port()
    home.path.mkdir(parents=True)
    stale = broker.BrokerState(pid=dead, port=old_port, durable=False, log_path="x")
    (home.path / broker.STATE_FILE).write_text(json.dumps(asdict(stale)))
    assert broker.read_state(home.path) == stale
    assert broker.bootstrap_servers(home.path) is None  # a dead broker is no cluster

    port = home.port()
    state = home.track(broker.start(home.path, port=port))
    assert state.pid != dead and state.port == port and state.broker_alive()
    assert broker.read_state(home.path) == state
    assert AdminClient({"bootstrap.servers": state.bootstrap}).list_topics(timeout=10).brokers
    assert broker.stop(home.path)
    assert not procs.pid_alive(state.pid)


def test_durable_broker_survives_sigkill(home: Home) -> None:
    port = home.port()
    state = home.track(broker.start(home.path, port=port, durable=True))
    assert state.durable and state.store_pid > 0 and state.store_alive()
    bootstrap = state.bootstrap
    topic = f"durable-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, topic, partitions=1)

    acked: list[tuple[int, bytes]] = []
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.offset(), msg.value()))  # type: ignore[attr-defined]

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
        }
    )
    for i in range(200):
        value = f"record-{i:03d}".encode()
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    del producer
    assert errors == []
    assert len(acked) == 200
    acked.sort()
    assert [o for o, _ in acked] == list(range(200))

    # Crash the broker only; the S3 store keeps the data.
    killed = broker.kill_broker_only(home.path)
    assert killed.pid == state.pid
    assert not procs.pid_alive(state.pid)
    assert procs.pid_alive(state.store_pid)
    # Work around a race in the code under test (see _wait_port_freed): without this
    # wait, start() below raises BrokerPortBusyError in about half of the runs.
    _wait_port_freed(port)

    # start() again restarts Tansu over the same store on the same port.
    restarted = home.track(broker.start(home.path, durable=True))
    assert restarted.pid != state.pid
    assert restarted.port == port and restarted.bootstrap == bootstrap
    assert (restarted.store_pid, restarted.store_port) == (state.store_pid, state.store_port)
    assert restarted.broker_alive() and restarted.store_alive()

    assert _read_all(bootstrap, topic) == acked

    # stop ends both tansu and the moto store.
    assert broker.stop(home.path)
    assert not procs.pid_alive(restarted.pid)
    assert not procs.pid_alive(restarted.store_pid)
    assert broker.read_state(home.path) is None


# --------------------------------------------------------------------------- docker

_DOCKER_OK, _DOCKER_WHY = docker_available()


@pytest.mark.docker
@pytest.mark.skipif(not _DOCKER_OK, reason=_DOCKER_WHY)
def test_testcontainers_kafka_round_trip() -> None:
    from testcontainers.kafka import KafkaContainer

    with KafkaContainer() as kafka:
        bootstrap = kafka.get_bootstrap_server()
        topic = f"tc-{uuid.uuid4().hex[:8]}"
        _create_topic(bootstrap, topic, partitions=1)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(10):
            producer.produce(topic, value=f"v{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        assert _read_all(bootstrap, topic, timeout_s=60) == [
            (i, f"v{i}".encode()) for i in range(10)
        ]
