"""Frozen, validated options of :class:`~wal.KafkaWriteAheadLog`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from walstream.errors import ConfigError

_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,150}$")


@dataclass(frozen=True)
class KafkaWalConfig:
    """Options of a Kafka-topic WAL; every bound here is a limit, never a hope.

    * ``rolling_interval_ms``: time span of one segment topic. ``clean`` reclaims
      space by deleting whole segments, so this is the granularity of reclaim.
    * ``write_timeout_s``: the longest ``write`` waits for ``acks=all`` before it
      raises :class:`~walstream.wal.errors.WalWriteTimeoutError` (librdkafka's
      ``delivery.timeout.ms``).
    * ``read_timeout_s``: the longest ``read``/``read_all`` wait for the broker.
    * ``chunk_bytes``: records larger than this are split into consecutive Kafka
      records of at most this size and reassembled on read (below Kafka's
      default 1 MB ``message.max.bytes`` so any broker accepts them).
    * ``max_record_bytes``: larger records are refused with
      :class:`~walstream.wal.errors.RecordTooLargeError` naming the limit.
    * ``replication_factor``: for the segment topics; -1 takes the broker default.
    * ``topic_prefix``: segment topics are ``<prefix><name>--<start_ms>``.
    * ``client_config``: librdkafka settings of every client of the log (producer,
      readers, admin): how to reach a secured cluster (SASL, TLS). Not in ``repr``.
    * ``producer_config`` / ``consumer_config``: extra librdkafka settings of the
      producer or the readers, over ``client_config``; the durability settings
      (acks, idempotence) cannot be overridden.
    * ``linger_ms``: 0 by default: ``write`` blocks for its acknowledgement, so
      waiting to fill a batch only adds latency
      (docs/decisions/wal-producer-setup.md).
    * ``compression``: of the producer's record batches, ``lz4`` by default: a
      block's text shrinks several times, so the broker stores, replicates and
      serves fewer bytes for less CPU than it costs the clients
      (docs/decisions/wal-compression.md). Readers take any codec, so a log
      written with another one, or none, reads the same.
    * ``strict``: ``read_all`` raises on a corrupt record instead of reporting
      and skipping it.
    """

    rolling_interval_ms: int = 60_000
    write_timeout_s: float = 30.0
    read_timeout_s: float = 30.0
    admin_timeout_s: float = 30.0
    chunk_bytes: int = 512 * 1024
    max_record_bytes: int = 256 * 1024 * 1024
    replication_factor: int = -1
    topic_prefix: str = "walstream.wal."
    linger_ms: int = 0
    compression: str = "lz4"
    strict: bool = False
    client_config: dict[str, Any] = field(default_factory=dict, repr=False)
    producer_config: dict[str, Any] = field(default_factory=dict)
    consumer_config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        def need(cond: bool, msg: str) -> None:
            if not cond:
                raise ConfigError(f"KafkaWalConfig: {msg}")

        need(self.rolling_interval_ms >= 1, "rolling_interval_ms must be >= 1")
        need(0 < self.write_timeout_s <= 3600, "write_timeout_s must be in (0, 3600]")
        need(0 < self.read_timeout_s <= 3600, "read_timeout_s must be in (0, 3600]")
        need(0 < self.admin_timeout_s <= 3600, "admin_timeout_s must be in (0, 3600]")
        need(1024 <= self.chunk_bytes <= 64 * 1024 * 1024, "chunk_bytes must be in [1 KiB, 64 MiB]")
        need(self.max_record_bytes >= 1, "max_record_bytes must be >= 1")
        need(self.replication_factor == -1 or self.replication_factor >= 1,
             "replication_factor must be -1 or >= 1")
        need(bool(_NAME_RE.match(self.topic_prefix)), "topic_prefix must match [A-Za-z0-9._-]+")
        need(self.compression in ("none", "gzip", "snappy", "lz4", "zstd"),
             f"unknown compression {self.compression!r}")
        durability = {"acks", "enable.idempotence", "request.required.acks"}
        for name in ("client_config", "producer_config"):
            forbidden = durability & set(getattr(self, name))
            need(not forbidden, f"{name} may not override {sorted(forbidden)}")


def validate_log_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name) or "--" in name:
        raise ConfigError(
            f"WAL name {name!r} must be 1..150 characters of [A-Za-z0-9._-] without '--'"
        )
    return name
