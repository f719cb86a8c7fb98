"""KafkaReceiver: reads source topics and stores ``(key, value)`` pairs.

Each stored record carries its source position ``(topic, partition, offset)``,
so each block carries the offset ranges it holds. Offsets are committed to the
consumer group only in ``on_block_reported``, i.e. after the driver logged the
block (invariant 2). Start positions: after an in-process restart, right after
what this receiver already handed to its supervisor; else the positions the
driver acknowledged (from its registration answer: exactly-once ingestion across
receiver deaths); else ``start_offsets`` when given; else the group's committed
offsets; else ``auto.offset.reset``. A poll batch is stored in parts of at most
the generator's ``max_block_bytes``, each with the ranges of exactly its records.
After each poll batch the receiver notes each of its partitions' end (the high
watermark librdkafka cached from its fetches, at least the offset after the last
record fetched): :meth:`KafkaReceiver.source_ends`, the driver's Kafka lag.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)

from walstream.errors import ConfigError
from walstream.kafka_logging import with_logger
from walstream.receiver.block import SourceRange
from walstream.receiver.block_generator import byte_runs, encoded_bytes, item_bytes
from walstream.receiver.errors import BlockGeneratorStoppedError
from walstream.receiver.items import VALUE_TAG, encode_utf8_pair
from walstream.receiver.receiver import Receiver
from walstream.receiver.text_run import TextRun

log = logging.getLogger(__name__)

Decoder = Callable[[bytes | None], Any]


#: ``auto.offset.reset`` values as the logical offsets they mean; any other
#: (``error``) leaves the offset unset, for librdkafka to apply its own rule.
_RESET_OFFSETS = {name: offset for names, offset in (
    (("earliest", "smallest", "beginning"), OFFSET_BEGINNING),
    (("latest", "largest", "end"), OFFSET_END)) for name in names}


def utf8_decoder(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8")


def _run_of(records: TextRun | list[bytes], values: list[Any], lo: int, hi: int
            ) -> TextRun | list[bytes]:
    """Records ``[lo, hi)`` of a batch, a run built anew from the values it joined."""
    if isinstance(records, TextRun):
        run = TextRun.join(VALUE_TAG, values[lo:hi])
        assert run is not None  # a part of values that made a run
        return run
    return records[lo:hi]


class _Part:
    """The records of a poll batch going into one block, and their source ranges
    (``[from, until)`` per partition)."""

    def __init__(self, starts: dict[tuple[str, int], int] | None = None) -> None:
        self.records: list[bytes] = []
        self.size = 0
        self.ranges: dict[tuple[str, int], list[int]] = {}
        self._starts = starts or {}

    def add(self, key: tuple[str, int], offset: int, record: bytes | None, size: int) -> None:
        r = self.ranges.get(key)
        if r is None:
            self.ranges[key] = [self._starts.get(key, offset), offset + 1]
        else:
            r[1] = offset + 1
        if record is not None:
            self.records.append(record)
            self.size += size

    def next(self) -> _Part:
        """The next part: each partition's range resumes where this part's ended."""
        return _Part({**self._starts, **{k: hi for k, (_, hi) in self.ranges.items()}})

    def source(self) -> tuple[SourceRange, ...]:
        return tuple(SourceRange(t, p, lo, hi) for (t, p), (lo, hi) in sorted(self.ranges.items()))


class KafkaReceiver(Receiver):
    def __init__(
        self,
        bootstrap_servers: str,
        group_id: str,
        topics: dict[str, int],
        kafka_params: dict[str, Any] | None = None,
        start_offsets: dict[tuple[str, int], int] | None = None,
        key_decoder: Decoder = utf8_decoder,
        value_decoder: Decoder = utf8_decoder,
        max_batch_records: int = 10_000,
    ) -> None:
        super().__init__()
        self.bootstrap_servers = bootstrap_servers
        self.group_id = group_id
        self.topics = dict(topics)
        self.kafka_params = dict(kafka_params or {})
        self.start_offsets = dict(start_offsets or {})
        self.key_decoder = key_decoder
        self.value_decoder = value_decoder
        if max_batch_records < 1:
            raise ConfigError("max_batch_records must be >= 1")
        self.max_batch_records = max_batch_records
        self._consumer: Consumer | None = None
        self._thread: threading.Thread | None = None
        self._commit_lock = threading.Lock()
        self._to_commit: dict[tuple[str, int], int] = {}
        # Next offset per partition after what this process handed to its supervisor
        # (stored or skipped). An in-process restart resumes here: that data is in
        # the supervisor's block generator, which a restart flushes, not loses.
        self._next_offsets: dict[tuple[str, int], int] = {}
        self._ends_lock = threading.Lock()
        self._ends: dict[tuple[str, int], int] = {}
        # The one partition assigned, when there is one only: every record is of it.
        self._only_partition: tuple[str, int] | None = None
        self.undecodable = 0

    def __getstate__(self) -> dict[str, Any]:
        # Receivers are picklable (see Receiver); a lock, a consumer and a thread
        # are not, and belong to the process that runs the receiver anyway.
        state = super().__getstate__()
        # Positions handed to this process's supervisor mean nothing elsewhere.
        state.update(_consumer=None, _thread=None, _commit_lock=None, _next_offsets={},
                     _ends_lock=None, _ends={}, _only_partition=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._commit_lock = threading.Lock()
        self._ends_lock = threading.Lock()
        self._ends = {}

    def _assignment(self, consumer: Consumer, reset: str = "earliest") -> list[TopicPartition]:
        """Each partition of the source topics at its start position (the module's
        text gives the order). A partition with none starts where ``reset`` (the
        consumer's ``auto.offset.reset``) says, passed as a logical offset: the
        group's commits were just read, and leaving the offset unset would make
        librdkafka read them again before it applies the reset, one more round
        trip to the group coordinator before the first fetch."""
        md = consumer.list_topics(timeout=30)
        tps = [TopicPartition(t, p) for t in self.topics if t in md.topics
               for p in sorted(md.topics[t].partitions)]
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in consumer.committed(tps, timeout=30)}
        # The driver's acknowledged positions beat the group's commits: a block the
        # driver logged may not be committed yet (we died first), and a commit can
        # never be ahead of the driver.
        acked = self._supervisor.start_positions if self._supervisor is not None else ()
        driver = {(r.topic, r.partition): r.until_offset for r in acked}
        out = []
        for tp in tps:
            key = (tp.topic, tp.partition)
            offset = self._next_offsets.get(
                key, driver.get(key, self.start_offsets.get(
                    key, committed.get(key, OFFSET_INVALID))))
            if offset == OFFSET_INVALID:
                offset = _RESET_OFFSETS.get(reset.strip().lower(), OFFSET_INVALID)
            out.append(TopicPartition(tp.topic, tp.partition, offset))
        return out

    def source_topics(self) -> list[str]:
        return sorted(self.topics)

    def onStart(self) -> None:
        conf = {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **self.kafka_settings,
            **self.kafka_params,
        }
        conf["enable.auto.commit"] = False  # commits follow the driver's acknowledgement
        self._consumer = Consumer(with_logger(conf))
        assignment = self._assignment(self._consumer, str(conf["auto.offset.reset"]))
        self._only_partition = ((assignment[0].topic, assignment[0].partition)
                                if len(assignment) == 1 else None)
        self._consumer.assign(assignment)
        self._thread = threading.Thread(target=self._receive, name="kafka-receiver", daemon=True)
        self._thread.start()

    def _batch_size(self) -> int:
        """Records per ``consume`` call: large for throughput, but under a rate limit
        no more than a fifth of a second's worth, so the limit stays smooth."""
        rate = self.supervisor.generator.rate_limit
        if rate > 0:
            return max(1, min(self.max_batch_records, int(rate / 5)))
        return self.max_batch_records

    def _receive(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        stopped = self.stopped_event()
        # The default decoders: build each stored item straight from the UTF-8
        # bytes (validated, never decoded to str and encoded back).
        raw_utf8 = self.key_decoder is utf8_decoder and self.value_decoder is utf8_decoder
        try:
            while not stopped.is_set():
                self._commit_reported(consumer)
                msgs = consumer.consume(self._batch_size(), 0.1)
                if msgs:
                    self._note_ends(consumer, self._store_batch(msgs, raw_utf8))
        except BlockGeneratorStoppedError:
            pass  # the supervisor is stopping
        except Exception as exc:
            self.restart("Kafka receiver failed", exc)

    def _store_batch(self, msgs: list[Message], raw_utf8: bool) -> dict[tuple[str, int], int]:
        """Store one poll batch; return each of its partitions' offset after its last
        record. A batch of plain UTF-8 records with no error that fits in one block
        is stored whole (:meth:`_store_whole`), any other in parts (:meth:`_store_parts`).
        """
        if raw_utf8:
            ends = self._store_whole(msgs)
            if ends is not None:
                return ends
        return self._store_parts(msgs, raw_utf8)

    def _store_whole(self, msgs: list[Message]) -> dict[tuple[str, int], int] | None:
        """The batch in blocks of whole runs of its records, or None (nothing
        stored) when a record has an error other than a partition's EOF or is not
        UTF-8: its records are then stored by :meth:`_store_parts`.

        Per record only librdkafka's accessors run, each in its own comprehension;
        the rest is bulk work in C over the whole batch (joins, a check for ASCII,
        dicts built from zips): this thread's time per record bounds
        what one receiver ingests. A batch over ``max_block_bytes`` goes to the
        generator in runs of at most that many bytes (a record over it alone),
        each with the source ranges of exactly its records, as
        :meth:`_store_parts` cuts them.
        """
        errors = [m.error() for m in msgs]
        if errors.count(None) != len(errors):
            # Partition-EOF events (enable.partition.eof) hold no record: left out.
            # Any other error is reported by the per-record path.
            if any(e is not None and e.code() != KafkaError._PARTITION_EOF for e in errors):
                return None
            msgs = [m for m, e in zip(msgs, errors, strict=True) if e is None]
            if not msgs:
                return {}
        keys = [m.key() for m in msgs]
        values = [m.value() for m in msgs]
        try:
            records = self._keyless_records(values) if keys.count(None) == len(keys) else None
            if records is None:
                records = list(map(encode_utf8_pair, keys, values))
        except UnicodeDecodeError:
            return None
        cap = self.supervisor.generator.config.max_block_bytes
        if encoded_bytes(records) <= cap:  # the usual case
            runs = [(0, len(records))]
        elif isinstance(records, TextRun):  # sized by the values it was joined from
            runs = byte_runs([n + len(VALUE_TAG) for n in map(item_bytes, values)], cap)
        else:
            runs = byte_runs(list(map(item_bytes, records)), cap)
        ends: dict[tuple[str, int], int] = {}
        for lo, hi in runs:
            source = self._source_of(msgs[lo:hi], ends)
            self.supervisor.push_many_encoded(
                _run_of(records, values, lo, hi) if len(runs) > 1 else records, source)
            run_ends = {(r.topic, r.partition): r.until_offset for r in source}
            self._next_offsets.update(run_ends)
            ends.update(run_ends)
        return ends

    def _source_of(self, msgs: list[Message], starts: dict[tuple[str, int], int]
                   ) -> tuple[SourceRange, ...]:
        """The source ranges of ``msgs`` (records, no errors): per partition, from
        its first offset, or from ``starts`` (where the batch's previous run of it
        ended, as :meth:`_store_parts`'s parts resume), to the one after its last
        (a partition's records are in offset order within a batch)."""
        # A record (no error) always has its topic, partition and offset.
        if self._only_partition is not None:  # all of one partition: its first and last
            key = self._only_partition
            head, tail = cast(int, msgs[0].offset()), cast(int, msgs[-1].offset())
            return (SourceRange(*key, starts.get(key, head), tail + 1),)
        offsets = cast(list[int], [m.offset() for m in msgs])
        if len(self.topics) == 1:  # every record is of the one topic: key by partition
            (topic,) = self.topics
            partitions = cast(list[int], [m.partition() for m in msgs])
            first = dict(zip(reversed(partitions), reversed(offsets), strict=True))
            last = dict(zip(partitions, offsets, strict=True))
            return tuple(SourceRange(topic, p, starts.get((topic, p), first[p]), last[p] + 1)
                         for p in sorted(last))
        tps = cast(list[tuple[str, int]], [(m.topic(), m.partition()) for m in msgs])
        firsts = dict(zip(reversed(tps), reversed(offsets), strict=True))
        lasts = dict(zip(tps, offsets, strict=True))
        return tuple(SourceRange(t, p, starts.get((t, p), firsts[(t, p)]), lasts[(t, p)] + 1)
                     for t, p in sorted(lasts))

    @staticmethod
    def _keyless_records(values: list[bytes | None]) -> TextRun | list[bytes] | None:
        """The item encodings of keyless records with these values (``(None, str)``
        items): a :class:`TextRun` of the values joined, or their list when a value
        holds a newline; None when a value is None (a tombstone: a pair of two
        Nones). Raises ``UnicodeDecodeError`` when a value is not UTF-8. Joined by
        a newline (ASCII, never inside a multi-byte sequence) the values are valid
        UTF-8 together exactly when each one is, so one bulk check validates all,
        and the same join is the run's text."""
        try:
            joined = b"\n".join(values)  # type: ignore[arg-type]  # None: TypeError
        except TypeError:
            return None
        if not joined.isascii():
            joined.decode("utf-8")
        bodies = cast(list[bytes], values)
        run = TextRun.join(VALUE_TAG, bodies, joined)
        return run if run is not None else list(map(VALUE_TAG.__add__, bodies))

    def _store_parts(self, msgs: list[Message], raw_utf8: bool) -> dict[tuple[str, int], int]:
        """Store one poll batch in parts of at most ``max_block_bytes`` each.

        Each part goes to the block generator whole with the source ranges of
        exactly its own records (a skipped record's position goes with the part it
        falls in), so a block's ranges cover exactly the records it holds and a
        burst never makes a block the WAL refuses. A partition's range in a part
        starts where its range in the previous part ended: the parts' ranges are
        contiguous and together span what the whole batch would have.
        """
        cap = self.supervisor.generator.config.max_block_bytes
        part = _Part()
        ends: dict[tuple[str, int], int] = {}
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self.reportError("Kafka consumer error", RuntimeError(err.str()))
                continue
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            assert topic is not None and partition is not None and offset is not None
            record = self._record_of(msg, raw_utf8, (topic, partition, offset))
            size = 0 if record is None else item_bytes(record)
            if part.records and part.size + size > cap:
                self._push_part(part)
                ends.update((k, hi) for k, (_, hi) in part.ranges.items())
                part = part.next()
            # A skipped record still counts as handled: its position is in the
            # part's ranges, acknowledged with the part's block.
            part.add((topic, partition), offset, record, size)
        if part.ranges:
            self._push_part(part)
            ends.update((k, hi) for k, (_, hi) in part.ranges.items())
        return ends

    def _note_ends(self, consumer: Consumer, last: dict[tuple[str, int], int]) -> None:
        """Each partition of a poll batch: its end as librdkafka last fetched it (the
        cached high watermark; no request), at least ``last``: the offset after its
        last record."""
        ends = {}
        for (topic, partition), after in last.items():
            try:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                         cached=True)
            except Exception:  # not known yet: the fetched records say enough
                high = -1
            ends[(topic, partition)] = max(after, high if high is not None else -1)
        with self._ends_lock:
            for key, end in ends.items():
                self._ends[key] = max(self._ends.get(key, 0), end)

    def source_ends(self) -> dict[tuple[str, int], int]:
        with self._ends_lock:
            return dict(self._ends)

    def _record_of(self, msg: Message, raw_utf8: bool, where: tuple[str, int, int]
                   ) -> bytes | None:
        """The record's stored encoding; None when it is skipped (undecodable, or a
        bad record the supervisor's policy skipped and reported)."""
        try:
            if raw_utf8:
                return encode_utf8_pair(msg.key(), msg.value())
            item = (self.key_decoder(msg.key()), self.value_decoder(msg.value()))
        except Exception as exc:  # an undecodable payload: report, skip, go on
            self.undecodable += 1
            self.reportError(f"undecodable record at {where} skipped", exc)
            return None
        # Encoded here rather than in the supervisor, so a part's bytes are exact.
        return self.supervisor.encode_for_store(item)

    def _push_part(self, part: _Part) -> None:
        # The part's positions are acknowledged only after all of its records are
        # stored and reported (invariant 2): they go to one block together.
        self.supervisor.push_many_encoded(part.records, part.source())
        self._next_offsets.update({key: hi for key, (_, hi) in part.ranges.items()})

    def onStop(self) -> None:
        # onStop may run on the receiving thread itself (a stop on a bad record
        # with bad_record_policy="fail"): joining it would raise and skip the close.
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
            self._thread = None
        if self._consumer is not None:
            self._commit_reported(self._consumer)
            self._consumer.close()  # close() waits for outstanding commits
            self._consumer = None

    def on_block_reported(self, block_id: str, metadata: Any) -> None:
        """Commit the block's source ranges: the driver has logged the block.

        Asynchronous: the authoritative positions are the ones in the driver's
        WAL (a block's source ranges); the group commit makes progress visible to
        Kafka tooling and is the start position when the driver has none.
        """
        ranges: tuple[SourceRange, ...] = metadata or ()
        with self._commit_lock:
            for r in ranges:
                key = (r.topic, r.partition)
                self._to_commit[key] = max(self._to_commit.get(key, 0), r.until_offset)

    def _commit_reported(self, consumer: Consumer) -> None:
        """Commit what the driver acknowledged, from the consumer's own thread."""
        with self._commit_lock:
            pending, self._to_commit = self._to_commit, {}
        if pending:
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(pending.items())],
                asynchronous=True,
            )
