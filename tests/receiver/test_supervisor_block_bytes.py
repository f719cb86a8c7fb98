"""Multi-item stores and max_block_bytes: a list over the cap never becomes one block.

Without source positions the list is stored as several blocks within the cap, in
order. With positions it is refused with a typed error naming the limit before
anything is stored: the supervisor cannot tell which positions belong to which
part, and a block over the cap may be one the WAL can never store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.receiver.doubles import FakeReporter, src
from walstream.receiver.block import Block, SourceRange
from walstream.receiver.block_generator import item_bytes
from walstream.receiver.errors import BlockTooLargeError, ReceiverError
from walstream.receiver.items import encode_item
from walstream.testing import MemoryWAL, wait_until

pytestmark = pytest.mark.timeout(30)

CAP = 1000
ITEMS = [bytes([65 + i]) * 300 for i in range(10)]  # ~3 KB in all, ~300 B each


def block_sizes(wal: MemoryWAL, reporter: FakeReporter) -> list[int]:
    return [sum(item_bytes(r) for r in Block.decode(wal.read(info.handle)).records)
            for info in reporter.blocks]


def test_a_stored_list_over_max_block_bytes_is_stored_as_blocks_within_the_cap_in_order(
    make_sup: Callable[..., Any], wal: MemoryWAL, reporter: FakeReporter,
) -> None:
    sup, receiver = make_sup(gen={"max_block_bytes": CAP})
    sup.start()
    receiver.store(list(ITEMS))
    # store(list) is synchronous: every part is stored and reported when it returns.
    assert reporter.reported_items() == ITEMS
    sizes = block_sizes(wal, reporter)
    assert len(sizes) > 1 and all(s <= CAP for s in sizes), sizes
    assert reporter.violations == []


def test_store_many_over_max_block_bytes_is_cut_into_blocks_within_the_cap_in_order(
    make_sup: Callable[..., Any], wal: MemoryWAL, reporter: FakeReporter,
) -> None:
    sup, receiver = make_sup(gen={"max_block_bytes": CAP, "block_interval_ms": 60_000})
    sup.start()
    receiver.storeMany(list(ITEMS))
    sup.stop("done", None)
    assert sup.error is None
    assert reporter.reported_items() == ITEMS
    sizes = block_sizes(wal, reporter)
    assert len(sizes) > 1 and all(s <= CAP for s in sizes), sizes


POSITIONS: list[Any] = [
    SourceRange("src", 0, 0, len(ITEMS)),
    [SourceRange("src", 0, 0, 5), SourceRange("src", 1, 0, 5)],
    src(3),
]


@pytest.mark.parametrize("how", ["store", "storeMany", "push_many_encoded"])
@pytest.mark.parametrize("metadata", POSITIONS, ids=["range", "ranges", "offset"])
def test_an_over_cap_list_carrying_positions_is_refused_naming_the_limit_and_nothing_is_stored(
    make_sup: Callable[..., Any], wal: MemoryWAL, reporter: FakeReporter,
    how: str, metadata: Any,
) -> None:
    sup, receiver = make_sup(gen={"max_block_bytes": CAP})
    sup.start()
    store = {
        "store": receiver.store,
        "storeMany": receiver.storeMany,
        "push_many_encoded": lambda items, m: sup.push_many_encoded(
            [encode_item(i) for i in items], m),
    }[how]
    with pytest.raises(BlockTooLargeError, match=f"max_block_bytes={CAP}") as info:
        store(list(ITEMS), metadata)
    assert isinstance(info.value, ReceiverError)
    # Refused before anything was stored; the receiver goes on.
    receiver.store(list(ITEMS[:2]), src(0))
    sup.stop("done", None)
    assert sup.error is None
    assert reporter.reported_items() == ITEMS[:2]
    assert [info.source for info in reporter.blocks] == [(SourceRange("src", 0, 0, 1),)]
    assert len(wal) == 1


def test_a_single_item_over_max_block_bytes_with_its_position_goes_alone(
    make_sup: Callable[..., Any], reporter: FakeReporter,
) -> None:
    sup, receiver = make_sup(gen={"max_block_bytes": CAP})
    sup.start()
    big = b"z" * (3 * CAP)
    receiver.store([big], src(0))
    receiver.storeMany([big], src(1))
    wait_until(lambda: len(reporter.blocks) == 2, what="both blocks reported")
    sup.stop("done", None)
    assert reporter.reported_items() == [big, big]
    assert ranges_sorted(reporter) == [SourceRange("src", 0, 0, 1), SourceRange("src", 0, 1, 2)]


def ranges_sorted(reporter: FakeReporter) -> list[SourceRange]:
    return sorted(r for info in reporter.blocks for r in info.source)
