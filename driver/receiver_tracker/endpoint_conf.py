"""Where the receiver endpoint listens and what address receivers are told.

A receiver runs on an executor, often another host: it must dial an address of
the driver that host can reach, while the driver may have to listen on another
one (a container's or a NAT's inside address). As Spark separates
``spark.driver.bindAddress`` from ``spark.driver.host``:

* the endpoint binds ``spark.walstream.endpoint.bindAddress``, else Spark's
  ``spark.driver.bindAddress``, else ``spark.driver.host``;
* it advertises ``spark.walstream.endpoint.host``, else ``spark.driver.host``;
* loopback is the default only for a ``local[...]`` master, where every receiver
  runs in this host. A cluster master with neither address known is refused,
  since receivers elsewhere would dial their own loopback.

Who may talk to it (:mod:`walstream.rpc.auth`): with ``spark.authenticate=true``
and ``spark.authenticate.secret`` set, the endpoint's keys derive from that
secret, as Spark's own RPC authenticates with it; otherwise the engine generates
a secret when it starts. Either way receivers get derived keys in their task
spec, never the secret.

TLS (:func:`endpoint_tls`): ``spark.walstream.endpoint.ssl.enabled=true`` serves
the endpoint over TLS with the PEM private key ``...ssl.keyFile`` (unencrypted)
and certificate chain ``...ssl.certFile``, read on the driver. Receivers trust
the PEM certificate(s) of ``...ssl.trustFile`` (default: the certificate file
itself, right for a self-signed certificate); the driver reads that file too and
carries its contents in every receiver's task spec, so executors need no file.
The certificate must name the advertised host (``spark.walstream.endpoint.host``)
in its subject alternative names: receivers check it.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from walstream.errors import ConfigError
from walstream.kafka_settings import secret_from_file

BIND_KEY = "spark.walstream.endpoint.bindAddress"
HOST_KEY = "spark.walstream.endpoint.host"
PORT_KEY = "spark.walstream.endpoint.port"
LOOPBACK = "127.0.0.1"
SPARK_AUTH_KEY = "spark.authenticate"
SPARK_AUTH_SECRET_KEY = "spark.authenticate.secret"
SSL_ENABLED_KEY = "spark.walstream.endpoint.ssl.enabled"
SSL_KEY_FILE_KEY = "spark.walstream.endpoint.ssl.keyFile"
SSL_CERT_FILE_KEY = "spark.walstream.endpoint.ssl.certFile"
SSL_TRUST_FILE_KEY = "spark.walstream.endpoint.ssl.trustFile"


def is_local_master(master: str | None) -> bool:
    """Whether ``master`` runs every executor inside the driver's process."""
    return master is None or master == "local" or master.startswith("local[")


@dataclass(frozen=True)
class EndpointAddresses:
    bind_host: str
    advertised_host: str
    port: int = 0


def endpoint_addresses(conf: Mapping[str, str]) -> EndpointAddresses:
    """The endpoint's addresses as ``conf`` (a running SparkContext's) sets them."""
    local = is_local_master(conf.get("spark.master"))
    driver_host = conf.get("spark.driver.host") or (LOOPBACK if local else None)
    advertised = conf.get(HOST_KEY) or driver_host
    bind = conf.get(BIND_KEY) or conf.get("spark.driver.bindAddress") or driver_host
    if not advertised or not bind:
        raise ConfigError(
            f"master {conf.get('spark.master')!r} runs receivers on other hosts: set "
            f"{HOST_KEY} (the driver address they dial) or spark.driver.host")
    raw_port = conf.get(PORT_KEY, "0")
    try:
        port = int(raw_port)
    except ValueError:
        raise ConfigError(f"{PORT_KEY} must be a port number, not {raw_port!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{PORT_KEY} must be in [0, 65535], not {port}")
    return EndpointAddresses(bind, advertised, port)


def host_port(host: str, port: int) -> str:
    """``host:port`` for gRPC, with an IPv6 address in brackets."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def _flag(conf: Mapping[str, str], key: str) -> bool:
    raw = str(conf.get(key, "false")).strip().lower()
    if raw not in ("true", "false"):
        raise ConfigError(f"{key} must be true or false, not {raw!r}")
    return raw == "true"


#: Spark's file form of the application secret, and the variable Spark's launcher
#: hands it to child processes in.
SPARK_AUTH_SECRET_FILE_KEY = "spark.authenticate.secret.file"
SPARK_AUTH_SECRET_ENV = "_SPARK_AUTH_SECRET"


def spark_auth_secret(conf: Mapping[str, str]) -> bytes | None:
    """Spark's application secret (its UTF-8), when ``spark.authenticate`` is on:
    ``spark.authenticate.secret``, else the file ``spark.authenticate.secret.file``
    names (as Spark reads it, so the secret need not be on a command line), else
    the ``_SPARK_AUTH_SECRET`` environment variable; None when none is set (the
    engine generates one). Both the secret and its file set is an error."""
    if not _flag(conf, SPARK_AUTH_KEY):
        return None
    secret, path = conf.get(SPARK_AUTH_SECRET_KEY), conf.get(SPARK_AUTH_SECRET_FILE_KEY)
    if secret and path:
        raise ConfigError(f"set one of {SPARK_AUTH_SECRET_KEY} and "
                          f"{SPARK_AUTH_SECRET_FILE_KEY}, not both")
    if path:
        secret = secret_from_file(SPARK_AUTH_SECRET_FILE_KEY, path)
    secret = secret or os.environ.get(SPARK_AUTH_SECRET_ENV, "")
    return secret.encode("utf-8") if secret else None


@dataclass(frozen=True)
class EndpointTls:
    """The endpoint's PEM private key and certificate chain, and the PEM certificate(s)
    receivers trust. Nothing shows in ``repr``."""

    key_pem: bytes = field(repr=False)
    cert_pem: bytes = field(repr=False)
    trust_pem: bytes = field(repr=False)


def _read_pem(conf: Mapping[str, str], key: str, what: str) -> bytes:
    path = conf.get(key)
    if not path:
        raise ConfigError(f"{SSL_ENABLED_KEY}=true needs {key} ({what})")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path!r}: {exc.strerror or exc}") from None
    if b"-----BEGIN " not in data:
        raise ConfigError(f"{key}: {path!r} holds no PEM data ({what})")
    return data


def endpoint_tls(conf: Mapping[str, str]) -> EndpointTls | None:
    """The endpoint's TLS material as ``conf`` sets it, read now; None when TLS is off."""
    if not _flag(conf, SSL_ENABLED_KEY):
        return None
    key = _read_pem(conf, SSL_KEY_FILE_KEY, "the PEM private key, unencrypted")
    if b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in key or b"Proc-Type: 4,ENCRYPTED" in key:
        raise ConfigError(f"{SSL_KEY_FILE_KEY}: the private key is encrypted; gRPC needs "
                          "it unencrypted (protect the file instead)")
    cert = _read_pem(conf, SSL_CERT_FILE_KEY, "the PEM certificate chain")
    trust = (_read_pem(conf, SSL_TRUST_FILE_KEY, "the PEM certificate(s) receivers trust")
             if conf.get(SSL_TRUST_FILE_KEY) else cert)
    # Checked here, where the keys can be named: gRPC says only that it cannot bind.
    try:
        # A password callback, so an encrypted key fails instead of prompting.
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
            conf[SSL_CERT_FILE_KEY], conf[SSL_KEY_FILE_KEY], password=lambda: b"")
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"{SSL_CERT_FILE_KEY} and {SSL_KEY_FILE_KEY}: not a certificate "
                          f"chain and its private key ({exc})") from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(
            cadata=trust.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as exc:
        setting = SSL_TRUST_FILE_KEY if conf.get(SSL_TRUST_FILE_KEY) else SSL_CERT_FILE_KEY
        raise ConfigError(f"{setting}: not PEM certificates to trust ({exc})") from None
    return EndpointTls(key, cert, trust)
