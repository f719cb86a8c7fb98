"""spark.walstream.kafka.* as librdkafka settings; secrets redacted and kept off disk."""

from __future__ import annotations

from typing import Any

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
    ("ssl.key.pem", True), ("ssl_key", True), ("sasl.oauthbearer.config", True),
    ("sasl.jaas.config", True), ("spark.walstream.kafka.sasl.password.file", True),
    ("sasl.username", False), ("security.protocol", False), ("ssl.ca.location", False),
    ("ssl.key.location", False), ("ssl.certificate.pem", False)])
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


def test_a_secret_comes_from_a_file_or_the_environment_off_the_command_line(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pw").write_text("s3cret-from-file\n")
    monkeypatch.setenv("APP_KEY_PASSWORD", "s3cret-from-env")
    conf = {"spark.walstream.kafka.sasl.password.file": str(tmp_path / "pw"),
            "spark.walstream.kafka.ssl.key.password.env": "APP_KEY_PASSWORD",
            "spark.walstream.kafka.sasl.username": "app"}
    assert settings_from_conf(conf) == {"sasl.password": "s3cret-from-file",
                                        "ssl.key.password": "s3cret-from-env",
                                        "sasl.username": "app"}
    assert "s3cret" not in str(without_secrets(conf)) + str(redacted(conf))


@pytest.mark.parametrize("conf,error", [
    ({"spark.walstream.kafka.sasl.password.file": "/nonexistent/pw"}, "cannot read"),
    ({"spark.walstream.kafka.sasl.password.env": "WALSTREAM_TEST_UNSET"}, "unset or empty"),
    ({"spark.walstream.kafka.sasl.password": "x",
      "spark.walstream.kafka.sasl.password.env": "HOME"}, "more than one way"),
])
def test_a_secret_that_cannot_be_read_or_is_given_twice_is_a_clear_error(
        conf: dict[str, str], error: str) -> None:
    with pytest.raises(ConfigError, match=error) as info:
        settings_from_conf(conf)
    assert "sasl.password" in str(info.value)


def test_a_non_secret_key_ending_in_file_is_an_ordinary_setting() -> None:
    # Only a secret key has a file form; anything else is passed on (and checked) as is.
    with pytest.raises(ConfigError, match="not a librdkafka setting"):
        settings_from_conf({"spark.walstream.kafka.Ssl.ca.file": "x"})
    assert settings_from_conf({"spark.walstream.kafka.ssl.ca.file": "x"}) == {
        "ssl.ca.file": "x"}


def test_the_application_secret_comes_from_its_file_as_spark_reads_it(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from walstream.driver.receiver_tracker.endpoint_conf import spark_auth_secret

    monkeypatch.delenv("_SPARK_AUTH_SECRET", raising=False)
    (tmp_path / "secret").write_text("app-secret\n")
    on = {"spark.authenticate": "true"}
    assert spark_auth_secret({**on, "spark.authenticate.secret.file":
                              str(tmp_path / "secret")}) == b"app-secret"
    assert spark_auth_secret({**on, "spark.authenticate.secret": "inline"}) == b"inline"
    assert spark_auth_secret(on) is None
    monkeypatch.setenv("_SPARK_AUTH_SECRET", "from-env")
    assert spark_auth_secret(on) == b"from-env"
    with pytest.raises(ConfigError, match="not both"):
        spark_auth_secret({**on, "spark.authenticate.secret": "a",
                           "spark.authenticate.secret.file": str(tmp_path / "secret")})
