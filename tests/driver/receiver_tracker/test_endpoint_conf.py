"""The receiver endpoint's bind and advertised addresses, from the Spark conf."""

from __future__ import annotations

import pytest

from walstream.driver.engine_config import EngineConfig
from walstream.driver.receiver_tracker.endpoint_conf import (
    BIND_KEY,
    HOST_KEY,
    PORT_KEY,
    EndpointAddresses,
    endpoint_addresses,
    host_port,
)
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.errors import ConfigError
from walstream.receiver.driver_client import DriverClient


@pytest.mark.parametrize("master", [None, "local", "local[3]", "local[*, 2]"])
def test_loopback_is_the_default_for_a_local_master(master: str | None) -> None:
    conf = {"spark.master": master} if master else {}
    assert endpoint_addresses(conf) == EndpointAddresses("127.0.0.1", "127.0.0.1")


def test_the_driver_host_is_bound_and_advertised() -> None:
    conf = {"spark.master": "spark://m:7077", "spark.driver.host": "10.1.2.3"}
    assert endpoint_addresses(conf) == EndpointAddresses("10.1.2.3", "10.1.2.3")


def test_spark_bind_address_and_own_keys_win() -> None:
    conf = {"spark.master": "yarn", "spark.driver.host": "node7",
            "spark.driver.bindAddress": "0.0.0.0"}
    assert endpoint_addresses(conf) == EndpointAddresses("0.0.0.0", "node7")
    conf.update({BIND_KEY: "10.0.0.5", HOST_KEY: "gateway.example", PORT_KEY: "7078"})
    assert endpoint_addresses(conf) == EndpointAddresses("10.0.0.5", "gateway.example", 7078)


def test_a_cluster_master_without_an_address_is_refused() -> None:
    with pytest.raises(ConfigError, match=HOST_KEY):
        endpoint_addresses({"spark.master": "spark://m:7077"})


@pytest.mark.parametrize("port", ["x", "-1", "70000"])
def test_a_bad_port_is_refused(port: str) -> None:
    with pytest.raises(ConfigError, match=PORT_KEY):
        endpoint_addresses({PORT_KEY: port})


def test_ipv6_hosts_are_bracketed() -> None:
    assert host_port("::1", 5) == "[::1]:5"
    assert host_port("[::1]", 5) == "[::1]:5"
    assert host_port("h", 5) == "h:5"


def test_engine_config_takes_the_addresses_from_the_conf() -> None:
    cfg = EngineConfig.from_spark_conf(
        {"spark.master": "spark://m:7077", "spark.driver.host": "10.1.2.3",
         BIND_KEY: "0.0.0.0"}, app_id="a", batch_interval_ms=1000, bootstrap_servers="b:1")
    assert (cfg.endpoint_bind_host, cfg.endpoint_host, cfg.endpoint_port) == (
        "0.0.0.0", "10.1.2.3", 0)


def test_receivers_are_told_the_advertised_address_and_reach_the_bound_one() -> None:
    """Bound on every interface, advertised as another loopback address: a receiver
    dialling what it is told registers."""
    blocks = ReceivedBlockTracker([0], None)
    tracker = ReceiverTracker(blocks, [0], "0.0.0.0", 0, advertised_host="127.0.0.7")
    client = DriverClient(tracker.address, timeout_s=10)
    try:
        assert tracker.address.startswith("127.0.0.7:")
        assert client.register_receiver(0, "h", "e0").accepted
    finally:
        client.close()
        tracker.stop()
        blocks.stop()


def test_spark_environment_pins_loopback_only_for_a_local_master(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from walstream.driver.spark import spark_environment

    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    monkeypatch.delenv("WALSTREAM_SPARK_MASTER", raising=False)
    spark_environment("spark://master:7077")
    assert "SPARK_LOCAL_IP" not in os.environ
    spark_environment("local[2]")
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
