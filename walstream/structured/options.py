"""SourceOptions: the ``readStream.format("walstream")`` options, checked once.

Option names are case-insensitive, as Spark's are. Exactly one of ``receiver``
(``"package.module:Class"`` with ``receiver.args``, a JSON object of keyword
arguments or a JSON array of positional ones) and ``source`` (``socket``,
``kafka``, ``rate``) says what the receivers are. ``name`` names the source's
logs: ``<name>-driver`` holds the tracker's events and ``<name>-receiver-<i>``
receiver ``i``'s blocks, so a restarted query that uses the same name finds
every block it was given before the crash.

``kafka.bootstrap.servers`` is the broker of the logs (and of a ``kafka``
source's topics); every other ``kafka.<key>`` is a librdkafka setting for every
client the source makes (logs, block reads, the Kafka receiver).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from walstream.structured.errors import SourceOptionError

SOURCES = ("socket", "kafka", "rate")
DECODINGS = ("utf-8",)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")
_RECEIVER_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
#: The longest a block may sit in its receiver's log between its write and its
#: report before a commit's clean may remove it (ms; option ``cleanMarginMs``).
DEFAULT_CLEAN_MARGIN_MS = 120_000
KAFKA_PREFIX = "kafka."
_KNOWN = frozenset({
    "name", "receiver", "receiver.args", "source", "numreceivers", "host", "port",
    "topics", "groupid", "rowspersecond", "decode", "maxblockspertrigger",
    "maxrecordspertrigger", "maxpartitions", "cleanmarginms", "blockinterval",
    "maxrateperreceiver", "path",
})


def _int(opts: Mapping[str, str], key: str, default: int | None, low: int) -> int | None:
    raw = opts.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise SourceOptionError(f"option {key!r} must be an integer, not {raw!r}") from None
    if value < low:
        raise SourceOptionError(f"option {key!r} must be at least {low}, not {value}")
    return value


@dataclass(frozen=True)
class SourceOptions:
    """The checked options of one ``walstream`` source (see the module docstring)."""

    name: str
    num_receivers: int = 1
    receiver: str = ""
    receiver_args: Any = None
    source: str = ""
    host: str = ""
    port: int = 0
    topics: tuple[str, ...] = ()
    group_id: str = ""
    rows_per_second: float = 1000.0
    decode: str = ""
    max_blocks_per_trigger: int | None = None
    max_records_per_trigger: int | None = None
    max_partitions: int | None = None
    clean_margin_ms: int = DEFAULT_CLEAN_MARGIN_MS
    block_interval_ms: int | None = None
    max_rate_per_receiver: float = 0.0
    bootstrap_servers: str = ""
    kafka_settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def keyed(self) -> bool:
        """Whether rows have a ``key`` column: the Kafka source's records have keys."""
        return self.source == "kafka"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Check ``options`` (any case); raise :class:`SourceOptionError` naming the
        first bad one."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        unknown = sorted(k for k in opts if k not in _KNOWN and not k.startswith(KAFKA_PREFIX))
        if unknown:
            raise SourceOptionError(f"unknown option(s) {unknown} for format 'walstream'")
        name = opts.get("name", "").strip()
        if not _NAME_RE.match(name):
            raise SourceOptionError(
                "option 'name' is required: letters, digits, '.', '_' and '-' (it names "
                f"the source's logs, which a restarted query finds again), not {name!r}")
        receiver = opts.get("receiver", "").strip()
        source = opts.get("source", "").strip().lower()
        if bool(receiver) == bool(source):
            raise SourceOptionError("give exactly one of option 'receiver' "
                                    "('package.module:Class') and option 'source' "
                                    f"(one of {', '.join(SOURCES)})")
        if receiver and not _RECEIVER_RE.match(receiver):
            raise SourceOptionError(f"option 'receiver' must be 'package.module:Class', "
                                    f"not {receiver!r}")
        if source and source not in SOURCES:
            raise SourceOptionError(f"option 'source' must be one of {', '.join(SOURCES)}, "
                                    f"not {source!r}")
        args: Any = None
        if "receiver.args" in opts:
            if not receiver:
                raise SourceOptionError("option 'receiver.args' goes with option 'receiver'")
            try:
                args = json.loads(opts["receiver.args"])
            except ValueError as exc:
                raise SourceOptionError(f"option 'receiver.args' is not JSON: {exc}") from None
            if not isinstance(args, dict | list):
                raise SourceOptionError("option 'receiver.args' must be a JSON object "
                                        "(keyword arguments) or array (positional ones)")
        host, port, group = "", 0, ""
        topics: tuple[str, ...] = ()
        if source == "socket":
            host = opts.get("host", "").strip()
            port = _int(opts, "port", 0, 1) or 0
            if not host or not 0 < port < 65536:
                raise SourceOptionError("source 'socket' needs options 'host' and 'port'")
        if source == "kafka":
            topics = tuple(t.strip() for t in opts.get("topics", "").split(",") if t.strip())
            if not topics:
                raise SourceOptionError("source 'kafka' needs option 'topics' ('a,b')")
            group = opts.get("groupid", "").strip() or f"walstream-{name}"
        rate = 1000.0
        if "rowspersecond" in opts:
            try:
                rate = float(opts["rowspersecond"])
            except ValueError:
                rate = -1.0
            if rate <= 0:
                raise SourceOptionError("option 'rowsPerSecond' must be a number above 0")
        decode = opts.get("decode", "").strip().lower().replace("utf8", "utf-8")
        if decode and decode not in DECODINGS:
            raise SourceOptionError(f"option 'decode' must be 'utf-8' (string columns) or "
                                    f"absent (binary columns), not {opts['decode']!r}")
        max_rate = 0.0
        raw_rate = opts.get("maxrateperreceiver", "").strip()
        if raw_rate:
            try:
                max_rate = float(raw_rate)
            except ValueError:
                max_rate = -1.0
            if max_rate < 0:
                raise SourceOptionError("option 'maxRatePerReceiver' must be a number >= 0")
        kafka = {k[len(KAFKA_PREFIX):]: v for k, v in opts.items() if k.startswith(KAFKA_PREFIX)}
        bootstrap = kafka.pop("bootstrap.servers", "").strip()
        return cls(
            name=name,
            num_receivers=_int(opts, "numreceivers", 1, 1) or 1,
            receiver=receiver, receiver_args=args, source=source, host=host, port=port,
            topics=topics, group_id=group, rows_per_second=rate, decode=decode,
            max_blocks_per_trigger=_int(opts, "maxblockspertrigger", None, 1),
            max_records_per_trigger=_int(opts, "maxrecordspertrigger", None, 1),
            max_partitions=_int(opts, "maxpartitions", None, 0),
            clean_margin_ms=_int(opts, "cleanmarginms", DEFAULT_CLEAN_MARGIN_MS, 0)
            or 0,
            block_interval_ms=_int(opts, "blockinterval", None, 1),
            max_rate_per_receiver=max_rate,
            bootstrap_servers=bootstrap,
            kafka_settings=tuple(sorted(kafka.items())),
        )

    def identity(self) -> tuple[Any, ...]:
        """What must not change between two readers of one source name in one driver:
        the receivers and where their logs are."""
        return (self.receiver, json.dumps(self.receiver_args, sort_keys=True), self.source,
                self.host, self.port, self.topics, self.group_id, self.num_receivers,
                self.bootstrap_servers)
