"""An application's Kafka client settings: one path from the Spark conf to every client.

Every ``spark.walstream.kafka.<librdkafka key>`` of the application's Spark conf
(``security.protocol``, ``sasl.mechanisms``, ``sasl.username``, ``sasl.password``,
``ssl.ca.location``, ...) is a setting of every Kafka client the project creates
for the application's cluster: the WALs' producers, readers and admin clients,
block reads in executor tasks, the direct stream (driver probe and task reads),
receivers, ``KafkaSink``, ``read_exactly_once`` and ``walstream inspect``. A
client's own defaults come first, these settings next, a stream's
``kafkaParams`` (or a sink's ``producer_config``) after them, and what a client's
guarantee rests on (``acks=all``, idempotence, manual commits) last.

Secrets: a key Spark would redact (``secret``, ``password``, ``token``,
``access.key`` in its name, Spark's default ``spark.redaction.regex``) is a
secret, and so is every property librdkafka itself treats as sensitive
(``ssl.key.pem``, ``ssl_key``, ``sasl.oauthbearer.config``) and the JAAS line
that carries credentials (``sasl.jaas.config``). :func:`redacted` hides their
values wherever settings are shown or logged, and checkpoints never hold them
(a restart takes them from its own environment, as Spark does with
``spark.driver.*``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from walstream.errors import ConfigError

PREFIX = "spark.walstream.kafka."
#: ``spark.walstream.kafka.bootstrapServers``: where the cluster is; not a librdkafka key.
BOOTSTRAP_KEY = PREFIX + "bootstrapServers"
REDACTED = "*********(redacted)"

_SECRET_RE = re.compile(r"(?i)secret|password|token|access[.]key|ssl[._]key[.]pem|ssl_key$"
                        r"|sasl[.]oauthbearer[.]config|jaas")
_KEY_RE = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")
#: Set by the project from other settings; naming them here would be ambiguous.
_NOT_SETTINGS = frozenset({"bootstrap.servers", "metadata.broker.list"})


def is_secret(key: str) -> bool:
    """Whether ``key`` (a Spark conf key or a librdkafka key) names a secret."""
    return bool(_SECRET_RE.search(key))


def settings_from_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The librdkafka settings ``conf`` gives every client (``spark.walstream.kafka.``
    stripped). Raises :class:`~walstream.errors.ConfigError` for a key that is not
    a librdkafka setting (lower-case, dotted) or that names the bootstrap servers,
    which ``spark.walstream.kafka.bootstrapServers`` sets."""
    out: dict[str, str] = {}
    for key, value in conf.items():
        if not key.startswith(PREFIX) or key == BOOTSTRAP_KEY:
            continue
        name = key[len(PREFIX):]
        if name in _NOT_SETTINGS:
            raise ConfigError(f"{key}: set the cluster with {BOOTSTRAP_KEY}")
        if not _KEY_RE.match(name):
            raise ConfigError(f"{key}: {name!r} is not a librdkafka setting "
                              "(lower-case and dotted, e.g. security.protocol)")
        out[name] = str(value)
    return out


def redacted(settings: Mapping[str, object]) -> dict[str, object]:
    """``settings`` with every secret's value hidden, for logs, errors and output."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in settings.items()}


def without_secrets(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` without its secrets: what may be written to disk (checkpoints)."""
    return {k: v for k, v in conf.items() if not is_secret(k)}


def parse_assignments(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings (a command line's ``--kafka-conf``) as settings."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--kafka-conf wants KEY=VALUE, not {item!r}")
        out[key] = value.lstrip()  # as in a Java properties file: "key = value"
    return out
