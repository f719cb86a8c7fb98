"""spark.walstream.kafka.* as librdkafka settings; secrets redacted and kept off disk."""

from __future__ import annotations

import pytest

from walstream.errors import ConfigError
from walstream.kafka_settings import (
    REDACTED,
    is_secret,
    parse_assignments,
    redacted,
    settings_from_conf,
    without_secrets,
)


def test_prefixed_keys_become_settings_and_the_bootstrap_key_does_not() -> None:
    conf = {"spark.walstream.kafka.bootstrapServers": "b:9092",
            "spark.walstream.kafka.security.protocol": "SASL_SSL",
            "spark.walstream.kafka.sasl.password": "pw",
            "spark.walstream.wal.topicPrefix": "p.", "spark.app.name": "x"}
    assert settings_from_conf(conf) == {"security.protocol": "SASL_SSL", "sasl.password": "pw"}


@pytest.mark.parametrize("key", ["bootstrap.servers", "metadata.broker.list"])
def test_the_cluster_is_named_by_its_own_key(key: str) -> None:
    with pytest.raises(ConfigError, match="bootstrapServers"):
        settings_from_conf({f"spark.walstream.kafka.{key}": "b:1"})


@pytest.mark.parametrize("key", ["Security.Protocol", "saslpassword", "sasl..x", "1x.y"])
def test_a_key_that_is_no_librdkafka_setting_is_refused(key: str) -> None:
    with pytest.raises(ConfigError, match="not a librdkafka setting"):
        settings_from_conf({f"spark.walstream.kafka.{key}": "v"})


@pytest.mark.parametrize("key,secret", [
    ("sasl.password", True), ("ssl.key.password", True), ("spark.authenticate.secret", True),
    ("sasl.oauthbearer.client.secret", True), ("fs.s3a.access.key", True),
    ("sasl.username", False), ("security.protocol", False), ("ssl.ca.location", False)])
def test_secrets_are_what_spark_redacts(key: str, secret: bool) -> None:
    assert is_secret(key) is secret


def test_redacted_and_without_secrets() -> None:
    settings = {"sasl.username": "u", "sasl.password": "pw"}
    assert redacted(settings) == {"sasl.username": "u", "sasl.password": REDACTED}
    assert without_secrets({"spark.walstream.kafka.sasl.password": "pw", "a.b": "c"}) == {
        "a.b": "c"}


def test_command_line_assignments() -> None:
    assert parse_assignments(["a.b=1", "sasl.password=x=y"]) == {"a.b": "1",
                                                                  "sasl.password": "x=y"}
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_assignments(["novalue"])
