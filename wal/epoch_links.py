"""How an epoch chain (:mod:`walstream.wal.epoch_chain`) lays out its logs and links over topics.

Epoch 0's log is the KafkaWriteAheadLog named ``name`` (exactly a log without
lease epochs); epoch ``e >= 1`` writes the log named ``name-e<e>``. A log's
segment and marker topics are ``<prefix><log>--...`` (:mod:`walstream.wal.segments`), whose
parser matches the whole name up to the ``--``, so ``name``'s topics and
``name-e1``'s never mix, and a chain's name may not itself end in ``-e<digits>``.

Epoch ``e``'s link lives in the topic ``<prefix>name-e<e>--link``: one framed
record (:data:`LINK_CODEC`) naming the epoch whose log ``e`` continues and, for
each segment topic of that log, the offset up to which (exclusive) the leader of
``e`` read it. ``--`` is in no log name, and ``link`` is no segment's or marker's
suffix, so no KafkaWriteAheadLog reads, cleans or deletes a link topic: a link
outlives every clean of the segments around it, which a link stored as a segment
record would not (a clean by time deletes whole segments, and a log whose link was
deleted would count as empty). The link is written before any record of its log
(:meth:`ChainView.write_link`), so a log of epoch ``e >= 1`` without a valid first
link record holds nothing its leader acknowledged: it counts as empty.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from walstream.avro_codec import VersionedCodec
from walstream.errors import ConfigError, CorruptDataError
from walstream.kafka_logging import with_logger
from walstream.wal import segments
from walstream.wal.config import KafkaWalConfig, validate_log_name
from walstream.wal.errors import (
    BrokenChainError,
    CorruptRecordError,
    EpochTakenError,
    WalReadError,
    WalWriteError,
    WalWriteTimeoutError,
)
from walstream.wal.framing import encode_record
from walstream.wal.reader import WalReader

log = logging.getLogger(__name__)

_PARTITION = 0
_EPOCH_SUFFIX = re.compile(r"-e[0-9]+$")

LINK_SCHEMA_V1: dict[str, Any] = {
    "type": "record",
    "name": "EpochLink",
    "namespace": "walstream.wal.v1",
    "fields": [
        {"name": "epoch", "type": "long"},
        {"name": "prev_epoch", "type": "long"},
        {"name": "ends", "type": {"type": "map", "values": "long"}},
    ],
}
LINK_CODEC = VersionedCodec("epoch link", b"WSEL", {1: LINK_SCHEMA_V1}, max_bytes=16 << 20)


@dataclass(frozen=True)
class Link:
    """Epoch ``epoch``'s log continues epoch ``prev_epoch``'s, read up to ``ends``."""

    epoch: int
    prev_epoch: int
    ends: dict[str, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        return LINK_CODEC.encode(
            {"epoch": self.epoch, "prev_epoch": self.prev_epoch, "ends": dict(self.ends)})


def decode_link(data: bytes, epoch: int) -> Link | None:
    """The link stored for ``epoch``, or None when ``data`` is not a valid one."""
    try:
        _, d = LINK_CODEC.decode(data)
    except CorruptDataError:
        return None
    link = Link(int(d["epoch"]), int(d["prev_epoch"]), {k: int(v) for k, v in d["ends"].items()})
    if link.epoch != epoch or not 0 <= link.prev_epoch < epoch:
        return None
    return link


@dataclass(frozen=True)
class Member:
    """One log of a chain: its epoch and, unless it is the newest, the ends its
    successor's link recorded (its records count only below them)."""

    epoch: int
    ends: dict[str, int] | None


def validate_chain_name(name: str) -> str:
    validate_log_name(name)
    if _EPOCH_SUFFIX.search(name):
        raise ConfigError(f"epoch chain name {name!r} may not end in -e<digits>: "
                          "that is the name of another chain's epoch log")
    return name


def log_name(name: str, epoch: int) -> str:
    """The KafkaWriteAheadLog name of ``epoch``'s log in the chain ``name``."""
    if epoch < 0:
        raise ConfigError(f"lease epochs are >= 0, got {epoch}")
    return name if epoch == 0 else validate_log_name(f"{name}-e{epoch}")


class ChainView:
    """Reads (and writes) a chain's links; valid and invalid links are cached, since a
    link topic's first record never changes once written. Thread-safe."""

    def __init__(self, bootstrap_servers: str, name: str, config: KafkaWalConfig) -> None:
        self.name = name
        self.bootstrap_servers = bootstrap_servers
        self.config = config
        base = re.escape(f"{config.topic_prefix}{name}")
        self._epoch_re = re.compile(rf"^{base}-e([1-9][0-9]*)--")
        self._admin: AdminClient | None = AdminClient(with_logger({
            "bootstrap.servers": bootstrap_servers,
            "socket.connection.setup.timeout.ms": 10_000, **config.client_config}))
        self._reader = WalReader(bootstrap_servers, config.read_timeout_s,
                                 {**config.client_config, **config.consumer_config},
                                 config.max_record_bytes)
        self._links: dict[int, Link | None] = {}
        self._producer: Producer | None = None  # the link writer, made on first use
        self._lock = threading.Lock()

    def link_topic(self, epoch: int) -> str:
        return f"{self.config.topic_prefix}{self.name}-e{epoch}--link"

    def topics(self, timeout_s: float) -> list[str]:
        admin = self._admin
        if admin is None:
            raise WalReadError(f"WAL {self.name!r}: the chain view is closed")
        try:
            return list(admin.list_topics(timeout=max(0.05, timeout_s)).topics)
        except KafkaException as exc:
            raise WalReadError(
                f"WAL {self.name!r}: no topic list within {timeout_s:.1f}s: {exc}") from exc

    def epoch_of_topic(self, topic: str) -> int | None:
        """The epoch of the log a segment or marker topic belongs to; None if not ours."""
        m = self._epoch_re.match(topic)
        if m:
            return int(m.group(1))
        segs, markers = segments.parse_topics([topic], self.config.topic_prefix, self.name)
        return 0 if segs or markers else None

    def epochs(self, topics: list[str]) -> set[int]:
        """Every epoch with a topic (segment, marker or link) in ``topics``; always 0."""
        return {0} | {e for t in topics if (e := self.epoch_of_topic(t)) is not None}

    def linked(self, topics: list[str]) -> list[int]:
        """The epochs whose link topic is in ``topics``, newest first."""
        return sorted((e for e in self.epochs(topics) if e and self.link_topic(e) in topics),
                      reverse=True)

    def link(self, epoch: int) -> Link | None:
        """Epoch ``epoch``'s valid link; None when its topic holds none (yet)."""
        with self._lock:
            if epoch in self._links:
                return self._links[epoch]
        bad: list[CorruptRecordError] = []
        found: Link | None = None
        decided = False
        # A link topic holds one record (two only if two leaders of an epoch wrote).
        records = list(self._reader.read_segment(
            self.link_topic(epoch), _PARTITION, -1, bad.append))
        if records:
            record, _ts, first, _chunks = records[0]
            decided = True
            # Offset 0 is the topic's first record: one reported corrupt there puts the
            # first record yielded further on, and the link is then not valid.
            found = None if first != 0 else decode_link(record, epoch)
        if not decided and not bad:
            return None  # no record yet: its leader may still be writing it
        if found is None:
            log.warning("WAL %s: epoch %d's log has no valid link; it counts as empty",
                        self.name, epoch)
        with self._lock:
            self._links[epoch] = found
        return found

    def resolve(self, topics: list[str]) -> list[Member]:
        """The chain, oldest first: from the newest epoch with a valid link back along
        its ``prev_epoch`` links to epoch 0; ``[Member(0, None)]`` without links.

        Raises :class:`BrokenChainError` when a link names an epoch >= 1 without one.
        """
        linked = self.linked(topics)
        newest = next((e for e in linked if self.link(e) is not None), None)
        members: list[Member] = []
        epoch, ends = (0, None) if newest is None else (newest, None)
        while True:
            members.append(Member(epoch, ends))
            if epoch == 0:
                break
            link = self.link(epoch) if epoch in linked else None
            if link is None:
                raise BrokenChainError(f"WAL {self.name!r}: a link continues epoch {epoch}, "
                                       "whose log has no valid link")
            epoch, ends = link.prev_epoch, link.ends
        members.reverse()
        return members

    def extents(self, topics: list[str]) -> dict[str, tuple[int, int]]:
        """``WalReader.segment_extents`` of ``topics``."""
        return self._reader.segment_extents(topics, _PARTITION)

    def check_empty(self, epoch: int, topics: list[str]) -> None:
        """Raise :class:`EpochTakenError` when ``epoch``'s log or link topic holds a record."""
        mine = [t for t in topics if t == self.link_topic(epoch)]
        mine += [s.topic for s in segments.parse_topics(
            topics, self.config.topic_prefix, log_name(self.name, epoch))[0]]
        extents = self._reader.segment_extents(mine, _PARTITION)
        unknown = [t for t in mine if t not in extents]
        if unknown:
            raise WalReadError(f"WAL {self.name!r}: no end of {unknown} within "
                               f"{self.config.read_timeout_s}s")
        taken = sorted(t for t in mine if extents[t][1] > 0)
        if taken:
            raise EpochTakenError(f"WAL {self.name!r}: epoch {epoch}'s log already holds "
                                  f"records in {taken}; refusing to write into it")

    def prepare(self, timeout_s: float) -> None:
        """Make the link writer ready now: its producer connected and its idempotent
        producer id granted. A standby calls this while standing by, so that
        :meth:`write_link` at a takeover waits only for its own record (a fresh
        idempotent producer spends its first flush acquiring an id). Idempotent."""
        producer = self._link_producer()
        try:
            producer.list_topics(timeout=max(0.05, timeout_s))
        except KafkaException as exc:
            raise WalWriteError(f"WAL {self.name!r}: the link writer cannot reach the "
                                f"broker: {exc}") from exc
        producer.flush(max(0.05, timeout_s))

    def _link_producer(self) -> Producer:
        with self._lock:
            if self._admin is None:
                raise WalWriteError(f"WAL {self.name!r}: the chain view is closed")
            if self._producer is None:
                cfg = self.config
                conf = {"bootstrap.servers": self.bootstrap_servers,
                        "delivery.timeout.ms": int(cfg.write_timeout_s * 1000),
                        "socket.connection.setup.timeout.ms": 10_000,
                        **cfg.client_config, **cfg.producer_config,
                        "acks": "all", "enable.idempotence": True}
                self._producer = Producer(with_logger(conf))
            return self._producer

    def write_link(self, link: Link) -> None:
        """Store ``link`` as the first record of its link topic and wait until every
        in-sync replica has it; then read it back: a first record that is not this
        link (another leader of the epoch) raises :class:`EpochTakenError`."""
        cfg = self.config
        topic = self.link_topic(link.epoch)
        self._create(topic)
        producer = self._link_producer()
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                errors.append(err)

        frames = encode_record(link.encode(), cfg.chunk_bytes)
        for frame in frames:
            producer.produce(topic, frame, partition=_PARTITION,
                             timestamp=int(time.time() * 1000), on_delivery=on_delivery)
        left = producer.flush(cfg.write_timeout_s)
        if left:
            raise WalWriteTimeoutError(f"WAL {self.name!r}: epoch {link.epoch}'s link not "
                                       f"acknowledged within {cfg.write_timeout_s}s")
        if errors:
            raise WalWriteError(f"WAL {self.name!r}: epoch {link.epoch}'s link: "
                                f"{errors[0].str()}")
        with self._lock:
            self._links.pop(link.epoch, None)
        if self.link(link.epoch) != link:
            raise EpochTakenError(f"WAL {self.name!r}: the first record of {topic} is not "
                                  "this leader's link; another leader of the epoch wrote one")

    def _create(self, topic: str) -> None:
        admin = self._admin
        if admin is None:
            raise WalWriteError(f"WAL {self.name!r}: the chain view is closed")
        timeout = self.config.admin_timeout_s
        configs = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
        new = NewTopic(topic, 1, self.config.replication_factor, config=configs)
        try:
            admin.create_topics([new], operation_timeout=timeout)[topic].result(timeout=timeout)
        except KafkaException as exc:
            if not (exc.args and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise WalWriteError(f"WAL {self.name!r}: cannot create {topic}: {exc}") from exc

    def close(self) -> None:
        self._reader.close()
        with self._lock:
            self._admin = None
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.flush(0)  # a link not acknowledged by now was never confirmed
