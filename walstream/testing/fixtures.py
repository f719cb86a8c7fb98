"""pytest fixtures shared by ``tests/`` and ``integration_tests/`` (a pytest plugin).

Broker choice, in order: ``KAFKA_BOOTSTRAP_SERVERS`` (an external cluster), a
testcontainers Kafka when a Docker engine answers, else the embedded Tansu
broker started for the session in a private home directory and stopped at the
end, also when tests fail.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from walstream import broker as embedded
from walstream import procs
from walstream.kafka_logging import with_logger


@dataclass(frozen=True)
class KafkaBroker:
    bootstrap: str
    kind: str  # "external" | "testcontainers" | "embedded"
    home: Path | None = None


def docker_available() -> tuple[bool, str]:
    """Whether a Docker engine answers; with the reason when it does not."""
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        client.close()
        return True, "Docker engine answers"
    except Exception as exc:
        return False, f"no Docker engine answers ({type(exc).__name__}: {exc})"


@contextlib.contextmanager
def _testcontainers_kafka() -> Iterator[str]:
    from testcontainers.kafka import KafkaContainer

    with KafkaContainer() as kafka:
        yield kafka.get_bootstrap_server()


@contextlib.contextmanager
def embedded_broker(home: Path, durable: bool = False) -> Iterator[KafkaBroker]:
    """Start an embedded broker in ``home`` on a free port; always stop it."""
    try:
        state = embedded.start(home, port=procs.free_port(), durable=durable, attached=True)
        yield KafkaBroker(state.bootstrap, "embedded", home)
    finally:
        embedded.stop(home)


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (a CI timeout, `timeout`, a killed job) runs fixture teardown too."""
    import signal

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    if threading_is_main():
        signal.signal(signal.SIGTERM, on_term)


def threading_is_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


@pytest.fixture(scope="session", autouse=True)
def spark_local_dirs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Spark's scratch space (``spark-*``, ``blockmgr-*``) in the session's temp dir.

    A JVM that exits normally deletes its scratch directories; one killed with
    SIGKILL (the recovery and chaos tests do that on purpose) cannot, and they
    would pile up in /tmp. Under pytest's basetemp they go with it (pytest keeps
    the last three). Every JVM the tests start, in-process or in an app
    subprocess, inherits the variable; one set outside the tests wins.
    """
    if os.environ.get("SPARK_LOCAL_DIRS"):
        yield Path(os.environ["SPARK_LOCAL_DIRS"].split(",")[0])
        return
    path = tmp_path_factory.mktemp("spark-local")
    os.environ["SPARK_LOCAL_DIRS"] = str(path)
    try:
        yield path
    finally:
        os.environ.pop("SPARK_LOCAL_DIRS", None)


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        yield KafkaBroker(external, "external")
        return
    if os.environ.get("WALSTREAM_TEST_DOCKER", "1") != "0" and docker_available()[0]:
        with _testcontainers_kafka() as bootstrap:
            yield KafkaBroker(bootstrap, "testcontainers")
        return
    with embedded_broker(tmp_path_factory.mktemp("broker-home")) as b:
        yield b


@pytest.fixture
def bootstrap(broker: KafkaBroker) -> str:
    return broker.bootstrap


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Names that no other test (or earlier run on an external cluster) uses."""

    def make(base: str = "") -> str:
        stem = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
        return f"t-{stem}-{base}-{uuid.uuid4().hex[:8]}".replace("--", "-").strip("-")

    return make


@pytest.fixture
def topic_factory(bootstrap: str, unique_name: Callable[[str], str]) -> Iterator[
    Callable[..., str]
]:
    """Create topics explicitly (Tansu's auto-create gives 4 partitions); delete after."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(with_logger({"bootstrap.servers": bootstrap}))
    created: list[str] = []

    def make(base: str = "topic", partitions: int = 1) -> str:
        name = unique_name(base)
        futures = admin.create_topics([NewTopic(name, partitions, -1)])
        futures[name].result(timeout=30)
        created.append(name)
        return name

    yield make
    if created:
        for f in admin.delete_topics(created).values():
            with contextlib.suppress(Exception):
                f.result(timeout=30)


@contextlib.contextmanager
def walstream_session(bootstrap: str, app_name: str) -> Iterator[Any]:
    """A SparkSession on local[3] with the ``walstream`` format registered (two shuffle
    partitions); the format unregistered and the SparkContext stopped on exit."""
    from pyspark.sql import SparkSession

    import walstream
    import walstream.structured.registry as registry
    from walstream.driver.app_conf import CONF_BOOTSTRAP
    from walstream.driver.spark import create_spark_context

    sc = create_spark_context(app_name, "local[3]", {CONF_BOOTSTRAP: bootstrap,
                                                     "spark.sql.shuffle.partitions": "2"})
    session = SparkSession(sc)
    walstream.register(session)
    try:
        yield session
    finally:
        registry.unregister()
        sc.stop()
