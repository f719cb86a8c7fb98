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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from walstream.errors import ConfigError

BIND_KEY = "spark.walstream.endpoint.bindAddress"
HOST_KEY = "spark.walstream.endpoint.host"
PORT_KEY = "spark.walstream.endpoint.port"
LOOPBACK = "127.0.0.1"
SPARK_AUTH_KEY = "spark.authenticate"
SPARK_AUTH_SECRET_KEY = "spark.authenticate.secret"


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


def spark_auth_secret(conf: Mapping[str, str]) -> bytes | None:
    """Spark's application secret (its UTF-8), when ``spark.authenticate`` is on and
    ``spark.authenticate.secret`` is set; None otherwise (the engine generates one)."""
    if not _flag(conf, SPARK_AUTH_KEY):
        return None
    secret = conf.get(SPARK_AUTH_SECRET_KEY)
    return secret.encode("utf-8") if secret else None
