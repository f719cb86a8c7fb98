"""KafkaReceiver on a real broker: a poll batch is cut into blocks by bytes.

A burst larger than ``max_block_bytes`` must never become one block (above the
WAL's record limit the store fails and the relaunched receiver meets the same
batch again). Each block's source ranges must cover exactly its own records, so
the positions the driver logs stay exact.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.receiver.doubles import FakeReporter
from walstream.receiver.block import Block, SourceRange
from walstream.receiver.block_generator import BlockGeneratorConfig, item_bytes
from walstream.receiver.kafka_receiver import KafkaReceiver, utf8_decoder
from walstream.receiver.supervisor import ReceiverSupervisor
from walstream.receiver.supervisor_config import SupervisorConfig
from walstream.testing import MemoryWAL, wait_until

pytestmark = pytest.mark.timeout(90)

PARTITIONS = 2
PER_PARTITION = 60
VALUE_PAD = 1000  # ~1 KB a record: a poll batch is tens of KB
MAX_BLOCK_BYTES = 8_000


SKIPPED = (1, 7)  # the custom decoder cannot decode this record: skipped, position kept


def raw_value(data: bytes | None) -> bytes | None:
    """A custom decoder (the receiver's non-UTF-8 path): keeps the bytes, and fails
    on the record at ``SKIPPED``."""
    if data is not None and data.startswith("{}:{}:".format(*SKIPPED).encode()):
        raise ValueError("undecodable on purpose")
    return data


def produce_burst(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            # The value names its own position, so a block's records can be matched
            # to its ranges.
            producer.produce(topic, value=f"{p}:{i}:".encode() + b"x" * VALUE_PAD, partition=p)
    assert producer.flush(30) == 0, "not every record was delivered"


def position(value: str | bytes) -> tuple[int, int]:
    text = value if isinstance(value, str) else value.decode()
    p, i, _ = text.split(":", 2)
    return int(p), int(i)


@pytest.fixture
def supervisors() -> Iterator[list[ReceiverSupervisor]]:
    made: list[ReceiverSupervisor] = []
    yield made
    for sup in made:
        sup.stop("teardown", None)


@pytest.mark.parametrize("decoder", ["utf8", "custom"])
def test_a_burst_over_max_block_bytes_is_split_into_blocks_each_within_the_cap_with_exact_ranges(
    bootstrap: str, topic_factory: Callable[..., str], unique_name: Callable[[str], str],
    wal: MemoryWAL, reporter: FakeReporter, supervisors: list[ReceiverSupervisor],
    decoder: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    if decoder == "utf8":  # clean UTF-8 batches are cut in bulk, never record by record
        def parts(*args: Any) -> Any:
            raise AssertionError("a clean poll batch went through _store_parts")

        monkeypatch.setattr(KafkaReceiver, "_store_parts", parts)
    topic = topic_factory("burst", partitions=PARTITIONS)
    produce_burst(bootstrap, topic)  # all there before the first poll: one big batch
    value_decoder: Any = utf8_decoder if decoder == "utf8" else raw_value
    receiver = KafkaReceiver(bootstrap, unique_name("grp"), {topic: 1},
                             value_decoder=value_decoder)
    # The record cap is far away; a poll batch goes to the generator whole unless
    # the receiver cuts it, whatever the interval.
    gen = BlockGeneratorConfig(block_interval_ms=50, max_block_bytes=MAX_BLOCK_BYTES)
    sup = ReceiverSupervisor(receiver, 1, wal, reporter, gen, SupervisorConfig())
    supervisors.append(sup)
    sup.start()
    skipped = {SKIPPED} if decoder == "custom" else set()
    total = PARTITIONS * PER_PARTITION - len(skipped)
    wait_until(lambda: sum(b.num_records for b in list(reporter.blocks)) >= total,
               timeout_s=60, what="every record reported")
    sup.stop("done", None)
    assert sup.error is None and reporter.violations == []

    covered: dict[int, list[SourceRange]] = {p: [] for p in range(PARTITIONS)}
    for info in reporter.blocks:
        records = Block.decode(wal.read(info.handle)).records
        size = sum(item_bytes(r) for r in records)
        assert size <= MAX_BLOCK_BYTES, f"block {info.block_id} holds {size} bytes"
        # The block's ranges cover exactly the records it holds, no more, no fewer.
        held = sorted(position(v) for _, v in reporter.items_of(info))
        from_ranges = sorted((r.partition, o) for r in info.source
                             for o in range(r.from_offset, r.until_offset)
                             if (r.partition, o) not in skipped)
        assert held == from_ranges, f"block {info.block_id}: ranges {info.source}"
        for r in info.source:
            assert r.topic == topic
            covered[r.partition].append(r)
    assert len(reporter.blocks) > 1
    assert receiver.undecodable == len(skipped)
    for p, ranges in covered.items():  # the union is the input: no gap, no overlap
        ranges.sort(key=lambda r: r.from_offset)
        assert ranges[0].from_offset == 0 and ranges[-1].until_offset == PER_PARTITION
        for a, b in itertools.pairwise(ranges):
            assert a.until_offset == b.from_offset, f"partition {p}: {a} then {b}"
