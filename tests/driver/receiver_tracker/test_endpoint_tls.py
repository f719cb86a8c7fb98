"""The endpoint's security settings: Spark's secret, and TLS with certificates the test
generates (a CA-signed one and a self-signed one): receivers reach a TLS endpoint,
plaintext or untrusting clients do not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from walstream.driver.engine_config import EngineConfig
from walstream.driver.receiver_tracker.endpoint_conf import (
    SSL_CERT_FILE_KEY,
    SSL_ENABLED_KEY,
    SSL_KEY_FILE_KEY,
    SSL_TRUST_FILE_KEY,
    EndpointTls,
    endpoint_tls,
    spark_auth_secret,
)
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.errors import ConfigError
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.driver_client import DriverClient
from walstream.receiver.rate_receiver import RateGeneratorReceiver
from walstream.receiver.task import ReceiverTaskSpec
from walstream.rpc import auth
from walstream.rpc import messages as m
from walstream.testing import MemoryWAL
from walstream.wal import RecordHandle

tls_certs = pytest.importorskip("tests.driver.tls_certs")  # needs `cryptography`

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, the endpoint's key and certificate signed by it, an unrelated self-signed
    certificate and two bad files (:func:`tests.driver.tls_certs.write_pki`)."""
    paths: dict[str, Path] = tls_certs.write_pki(tmp_path_factory.mktemp("pki"))
    return paths


def _conf(pki: dict[str, Path], **extra: str) -> dict[str, str]:
    return {SSL_ENABLED_KEY: "true", SSL_KEY_FILE_KEY: str(pki["key"]),
            SSL_CERT_FILE_KEY: str(pki["cert"]), SSL_TRUST_FILE_KEY: str(pki["ca"]), **extra}


@pytest.fixture
def tls_endpoint(pki: dict[str, Path]) -> Iterator[tuple[ReceiverTracker, MemoryWAL]]:
    wal = MemoryWAL()
    blocks = ReceivedBlockTracker([0], wal)
    tracker = ReceiverTracker(blocks, [0], tls=endpoint_tls(_conf(pki)))
    yield tracker, wal
    tracker.stop()
    blocks.stop()


def _info(i: int = 0) -> ReceivedBlockInfo:
    return ReceivedBlockInfo(0, f"input-0-{i}", 1, RecordHandle("w", 0, i),
                             (SourceRange("src", 0, i, i + 1),))


# -- reading the settings ------------------------------------------------------------------


def test_tls_is_off_unless_enabled(pki: dict[str, Path]) -> None:
    assert endpoint_tls({}) is None
    assert endpoint_tls({**_conf(pki), SSL_ENABLED_KEY: "false"}) is None


def test_tls_settings_are_read_from_the_files(pki: dict[str, Path]) -> None:
    tls = endpoint_tls(_conf(pki))
    assert tls == EndpointTls(pki["key"].read_bytes(), pki["cert"].read_bytes(),
                              pki["ca"].read_bytes())
    assert "PRIVATE" not in repr(tls) and "CERTIFICATE" not in repr(tls)
    # No trust file: receivers trust the certificate itself (a self-signed one).
    own = endpoint_tls({k: v for k, v in _conf(pki).items() if k != SSL_TRUST_FILE_KEY})
    assert own is not None and own.trust_pem == pki["cert"].read_bytes()


@pytest.mark.parametrize(("change", "match"), [
    ({SSL_KEY_FILE_KEY: ""}, "needs spark.walstream.endpoint.ssl.keyFile"),
    ({SSL_CERT_FILE_KEY: ""}, "needs spark.walstream.endpoint.ssl.certFile"),
    ({SSL_KEY_FILE_KEY: "/no/such/key.pem"}, "keyFile: cannot read '/no/such/key.pem'"),
    ({SSL_TRUST_FILE_KEY: "not_pem"}, "trustFile: .* holds no PEM data"),
    ({SSL_KEY_FILE_KEY: "encrypted_key"}, "private key is encrypted"),
    ({SSL_ENABLED_KEY: "yes"}, "must be true or false"),
    ({SSL_KEY_FILE_KEY: "other_key"}, "not a certificate chain and its private key"),
    ({SSL_TRUST_FILE_KEY: "key"}, "trustFile: not PEM certificates to trust"),
], ids=["no-key", "no-cert", "unreadable", "not-pem", "encrypted", "bad-flag",
        "key-of-another-cert", "trust-not-a-cert"])
def test_bad_tls_settings_are_refused_naming_the_key(
    pki: dict[str, Path], change: dict[str, str], match: str
) -> None:
    conf = _conf(pki, **{k: str(pki.get(v, v)) if v else "" for k, v in change.items()})
    with pytest.raises(ConfigError, match=match):
        endpoint_tls(conf)


def test_sparks_secret_is_the_applications_when_spark_authenticates() -> None:
    assert spark_auth_secret({}) is None
    assert spark_auth_secret({"spark.authenticate.secret": "s"}) is None  # auth off
    assert spark_auth_secret({"spark.authenticate": "true"}) is None  # Spark's own
    on = {"spark.authenticate": "TRUE", "spark.authenticate.secret": "sécret"}
    assert spark_auth_secret(on) == "sécret".encode()
    with pytest.raises(ConfigError, match=r"spark\.authenticate must be true or false"):
        spark_auth_secret({"spark.authenticate": "1"})


def test_the_engine_config_carries_the_secret_and_tls_and_shows_neither(
    pki: dict[str, Path],
) -> None:
    conf = {"spark.authenticate": "true", "spark.authenticate.secret": "hush-hush",
            **_conf(pki)}
    cfg = EngineConfig.from_spark_conf(conf, app_id="a", batch_interval_ms=1000,
                                       bootstrap_servers="b:1")
    assert cfg.endpoint_secret == b"hush-hush" and cfg.endpoint_tls is not None
    assert "hush-hush" not in repr(cfg) and "PRIVATE" not in repr(cfg)
    # Keys derive from Spark's secret for this application, the same on every start.
    assert cfg.endpoint_credentials() == auth.EndpointCredentials.from_secret(b"hush-hush", "a")
    plain = EngineConfig.from_spark_conf({}, app_id="a", batch_interval_ms=1000,
                                         bootstrap_servers="b:1")
    assert plain.endpoint_secret is None and plain.endpoint_tls is None
    assert plain.endpoint_credentials() != plain.endpoint_credentials()  # generated


# -- the endpoint over TLS -----------------------------------------------------------------


def test_a_receiver_registers_reports_and_follows_commands_over_tls(
    tls_endpoint: tuple[ReceiverTracker, MemoryWAL], pki: dict[str, Path],
) -> None:
    tracker, wal = tls_endpoint
    assert tracker.tls and tracker.credentials.tls_root_pem == pki["ca"].read_bytes()
    spec = ReceiverTaskSpec(0, RateGeneratorReceiver(1.0), tracker.address, "b:1", "a-r-0")
    assert spec.credentials is not None and spec.credentials.tls_root_pem is not None
    client = DriverClient(tracker.address, timeout_s=10, credentials=spec.credentials)
    try:
        assert client.register_receiver(0, "h", "e").accepted
        assert client.add_block(_info(0))
        assert wal.writes == 1
        tracker.update_rate_limit(0, 9.0)
        commands = client.control(0)
        cmd = next(c for c in commands if c["kind"] != "HEARTBEAT")
        commands.cancel()
        assert (cmd["kind"], cmd["rate_limit"]) == ("UPDATE_RATE_LIMIT", 9.0)
        client.deregister_receiver(0, "done", "")
        assert tracker.receivers[0].state == "deregistered"
    finally:
        client.close()


def test_a_plaintext_client_is_refused_by_the_tls_endpoint(
    tls_endpoint: tuple[ReceiverTracker, MemoryWAL],
) -> None:
    tracker, wal = tls_endpoint
    channel = grpc.insecure_channel(tracker.address)
    try:
        call = channel.unary_unary(f"/{m.SERVICE}/RegisterReceiver",
                                   request_serializer=m.encode(m.REGISTER_REQUEST))
        with pytest.raises(grpc.RpcError) as err:
            call({"stream_id": 0, "host": "h", "executor_id": "e", "receiver_type": "",
                  "nonce": b"n" * 32}, timeout=5, metadata=tracker.credentials.metadata)
        assert err.value.code() in (grpc.StatusCode.UNAVAILABLE,
                                    grpc.StatusCode.DEADLINE_EXCEEDED)
    finally:
        channel.close()
    plaintext = DriverClient(tracker.address, timeout_s=3,
                             credentials=tracker.credentials.with_tls_root(None))
    try:
        with pytest.raises(grpc.RpcError):
            plaintext.register_receiver(0, "h", "e")
    finally:
        plaintext.close()
    assert tracker.receivers[0].state == "inactive" and wal.writes == 0


def test_a_client_trusting_another_certificate_does_not_talk_to_the_endpoint(
    tls_endpoint: tuple[ReceiverTracker, MemoryWAL], pki: dict[str, Path],
) -> None:
    tracker, _ = tls_endpoint
    untrusting = DriverClient(tracker.address, timeout_s=3,
                              credentials=tracker.credentials.with_tls_root(
                                  pki["other"].read_bytes()))
    try:
        with pytest.raises(grpc.RpcError):
            untrusting.register_receiver(0, "h", "e")
    finally:
        untrusting.close()
    assert tracker.receivers[0].state == "inactive"


def test_a_self_signed_certificate_is_its_own_trust(pki: dict[str, Path]) -> None:
    conf = {SSL_ENABLED_KEY: "true", SSL_KEY_FILE_KEY: str(pki["other_key"]),
            SSL_CERT_FILE_KEY: str(pki["other"])}
    blocks = ReceivedBlockTracker([0], None)
    tracker = ReceiverTracker(blocks, [0], "localhost", 0, tls=endpoint_tls(conf))
    client = DriverClient(tracker.address, timeout_s=10)
    try:
        assert tracker.address.startswith("localhost:")
        assert client.register_receiver(0, "h", "e").accepted
    finally:
        client.close()
        tracker.stop()
        blocks.stop()
