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

A secret need not be written into the conf (where ``/proc/<pid>/cmdline`` of a
``spark-submit --conf`` shows it): ``spark.walstream.kafka.<secret key>.file=PATH``
reads it from a file (a mounted Kubernetes secret; one trailing newline is
dropped) and ``spark.walstream.kafka.<secret key>.env=NAME`` from the environment
variable ``NAME``, where the conf is read: on the driver, whose tasks carry the
settings to executors as they carry every other. Giving a key both ways is an
error.
"""

from __future__ import annotations

import os
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


#: Suffixes of a secret key's indirect forms: read from a file, or an env variable.
FILE_SUFFIX, ENV_SUFFIX = ".file", ".env"
#: The longest secret file read: a key, a password or a PEM chain, never more.
MAX_SECRET_FILE_BYTES = 1024 * 1024


def secret_from_file(key: str, path: str) -> str:
    """The secret in the file ``path`` (for conf key ``key``), one trailing newline
    dropped; :class:`ConfigError` naming the key and path (never the content) when
    it cannot be read, is empty or too large."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_SECRET_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path!r}: {exc.strerror or exc}") from None
    if len(raw) > MAX_SECRET_FILE_BYTES:
        raise ConfigError(f"{key}: {path!r} is over {MAX_SECRET_FILE_BYTES} bytes")
    text = raw.decode("utf-8", errors="strict") if raw else ""
    text = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
    if not text:
        raise ConfigError(f"{key}: {path!r} is empty")
    return text


def secret_from_env(key: str, name: str) -> str:
    """The secret in the environment variable ``name`` (for conf key ``key``);
    :class:`ConfigError` naming both when it is unset or empty."""
    value = os.environ.get(name, "")
    if not value:
        raise ConfigError(f"{key}: the environment variable {name!r} is unset or empty")
    return value


def _indirect(name: str) -> tuple[str, str] | None:
    """``(secret key, suffix)`` when ``name`` is a secret key's file or env form."""
    for suffix in (FILE_SUFFIX, ENV_SUFFIX):
        base = name[:-len(suffix)]
        if name.endswith(suffix) and base and is_secret(base):
            return base, suffix
    return None


def settings_from_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The librdkafka settings ``conf`` gives every client (``spark.walstream.kafka.``
    stripped), a secret's file or env form read now (module doc). Raises
    :class:`~walstream.errors.ConfigError` for a key that is not a librdkafka setting
    (lower-case, dotted), that names the bootstrap servers, which
    ``spark.walstream.kafka.bootstrapServers`` sets, or a secret given twice or
    whose file or variable cannot be read."""
    out: dict[str, str] = {}
    given: dict[str, str] = {}  # secret key -> the conf key that gave it
    for key, value in conf.items():
        if not key.startswith(PREFIX) or key == BOOTSTRAP_KEY:
            continue
        name = key[len(PREFIX):]
        indirect = _indirect(name)
        if indirect is not None:
            base, suffix = indirect
            if base in given or PREFIX + base in conf:
                raise ConfigError(f"{key}: {PREFIX + base} is given more than one way")
            given[base] = key
            value = (secret_from_file if suffix == FILE_SUFFIX else secret_from_env)(
                key, str(value))
            name = base
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
