"""The lease's log: its records, and who holds the lease as a pure function of them.

The lease is a single-partition topic. Every record is one of

- ``CLAIM(e, holder)``: ``holder`` asks for epoch ``e``;
- ``RENEW(e, holder)``: the holder of epoch ``e`` is alive;
- ``RELEASE(e, holder)``: the holder of epoch ``e`` gives the lease up.

Who holds the lease is a pure function of the log (:func:`fold`), the same for
every reader:

- a ``CLAIM`` for epoch ``current + 1`` wins, whatever the state of the current
  epoch; so does a claim for any epoch above ``current`` while the lease is free
  (released, or an empty log). Every other claim (an older epoch, the same one
  again, one skipping an epoch of a lease not free) is ignored. So of two
  contenders that start at once, the one whose record the partition orders first
  leads, and the other reads that and stands by. Epochs only grow.
- A contender claims ``max(current, floor) + 1``, where ``floor`` is the highest
  epoch the application is known to have used elsewhere (its driver WAL chain,
  its checkpoint fences): a log that lost its history (retention, a deleted or
  recreated topic) can never hand out an epoch again. The topic is created with
  infinite retention for the same reason.
- a ``RENEW`` or ``RELEASE`` counts only when it names the current epoch and its
  winning holder and the epoch was not released.


Every record also carries its writer's folded state and the offset it was
folded through. Since the fold is deterministic, a reader that starts late
takes the snapshot of the newest decodable record and folds from the offset
after it, instead of reading the whole log; the snapshot is correct even when
the record's writer was a fenced holder or a losing contender, because its
writer's fold was.

"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from walstream.avro_codec import VersionedCodec
from walstream.driver.ha.errors import LeaseConfigError, LeaseIOError
from walstream.kafka_logging import with_logger

CLAIM, RENEW, RELEASE = "CLAIM", "RENEW", "RELEASE"

LEASE_RECORD_SCHEMA_V1: dict[str, Any] = {
    "type": "record",
    "name": "LeaseRecord",
    "namespace": "walstream.driver",
    "fields": [
        {"name": "kind", "type": {"type": "enum", "name": "LeaseRecordKind",
                                  "symbols": [CLAIM, RENEW, RELEASE]}},
        {"name": "epoch", "type": "long"},
        {"name": "holder", "type": "string"},
        {"name": "time_ms", "type": "long"},  # the writer's wall clock; shown, never trusted
        # The writer's folded state and the last offset it folded (-1: none).
        {"name": "seen_epoch", "type": "long"},
        {"name": "seen_holder", "type": "string"},
        {"name": "seen_claim_offset", "type": "long"},
        {"name": "seen_released", "type": "boolean"},
        {"name": "seen_through", "type": "long"},
    ],
}
LEASE_CODEC = VersionedCodec("lease record", b"WSLS", {1: LEASE_RECORD_SCHEMA_V1},
                             max_bytes=64 * 1024)

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")

@dataclass(frozen=True)
class LeaseConfig:
    """Where the lease lives and how it is timed.

    ``renew_period_s`` (default 200 ms) is how often the holder renews;
    ``timeout_s`` (default 1 s) how long a standby watches without a renewal
    before it claims, and how long after its last confirmed renewal the holder
    stops counting itself the holder. At least two renewals must fit in one
    timeout. ``io_timeout_s`` bounds each produce, read and topic creation.
    ``fetch_wait_ms`` is the lease reader's Fetch wait: the latency of noticing
    the end of the log. ``kafka_settings`` are librdkafka settings for every
    client (security, ...), applied before the lease's own.
    """

    bootstrap_servers: str
    topic: str
    renew_period_s: float = 0.2
    timeout_s: float = 1.0
    io_timeout_s: float = 5.0
    fetch_wait_ms: int = 50
    kafka_settings: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise LeaseConfigError("lease: bootstrap_servers must be a non-empty string")
        if not isinstance(self.topic, str) or not _TOPIC_RE.match(self.topic):
            raise LeaseConfigError(f"lease: topic {self.topic!r} is not a Kafka topic name "
                                   "(1-249 of letters, digits, '.', '_', '-')")
        for name in ("renew_period_s", "timeout_s", "io_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    0 < value < float("inf")):
                raise LeaseConfigError(f"lease: {name} must be a positive finite number, "
                                       f"got {value!r}")
        if self.renew_period_s * 2 > self.timeout_s:
            raise LeaseConfigError(
                f"lease: timeout_s ({self.timeout_s}) must hold at least two renewals "
                f"(renew_period_s {self.renew_period_s})")
        if (isinstance(self.fetch_wait_ms, bool) or not isinstance(self.fetch_wait_ms, int)
                or not 1 <= self.fetch_wait_ms <= 5000):
            raise LeaseConfigError(f"lease: fetch_wait_ms must be an int in 1..5000, "
                                   f"got {self.fetch_wait_ms!r}")
        if not isinstance(self.kafka_settings, tuple) or not all(
                isinstance(kv, tuple) and len(kv) == 2 and all(isinstance(x, str) for x in kv)
                for kv in self.kafka_settings):
            raise LeaseConfigError("lease: kafka_settings must be a tuple of (key, value) "
                                   "string pairs")

    @classmethod
    def create(cls, bootstrap_servers: str, topic: str,
               kafka_settings: Mapping[str, str] | None = None, **timing: Any) -> LeaseConfig:
        """A config from a settings mapping (sorted into the hashable tuple form)."""
        pairs = tuple(sorted((str(k), str(v)) for k, v in (kafka_settings or {}).items()))
        return cls(bootstrap_servers, topic, kafka_settings=pairs, **timing)


@dataclass(frozen=True)
class LeaseState:
    """The lease as the log has it up to some offset."""

    epoch: int = 0
    holder: str = ""
    claim_offset: int = -1
    released: bool = True  # epoch 0 (an empty log) is a free lease

    @property
    def free(self) -> bool:
        return self.released


@dataclass(frozen=True)
class LeaseView:
    """What a reader knows: the folded state and whether its holder looks dead."""

    state: LeaseState
    expired: bool


def fold(state: LeaseState, offset: int, record: Mapping[str, Any]) -> tuple[LeaseState, bool]:
    """The state after the record at ``offset``, and whether the record was a valid
    sign of life (or release) of the epoch it leaves current."""
    kind, epoch, holder = record["kind"], record["epoch"], record["holder"]
    if kind == CLAIM:
        if epoch == state.epoch + 1 or (state.released and epoch > state.epoch):
            return LeaseState(epoch, holder, offset, released=False), True
        return state, False
    if epoch != state.epoch or holder != state.holder or state.released:
        return state, False
    if kind == RELEASE:
        return replace(state, released=True), True
    return state, True


#: The lease topic keeps every record: epochs are read from it, and a log that lost
#: its history would hand out an epoch again (see ``floor`` for the other guard).
LEASE_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1",
                      "cleanup.policy": "delete"}


def ensure_lease_topic(config: LeaseConfig) -> None:
    """Create the single-partition lease topic, with infinite retention, unless it
    exists (bounded)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(with_logger({**dict(config.kafka_settings),
                                     "bootstrap.servers": config.bootstrap_servers}))
    try:
        futures = admin.create_topics([NewTopic(config.topic, 1, -1,
                                                config=dict(LEASE_TOPIC_CONFIG))],
                                      request_timeout=config.io_timeout_s)
        futures[config.topic].result(timeout=config.io_timeout_s)
    except KafkaException as exc:
        if exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return
        raise LeaseIOError(f"lease topic {config.topic}: not created: {exc}") from exc
    except Exception as exc:  # a timeout of the future
        raise LeaseIOError(f"lease topic {config.topic}: not created: {exc}") from exc
