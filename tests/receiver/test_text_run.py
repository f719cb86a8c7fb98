"""TextRun: text items carried as their joined bodies, from a receiver to the block's
bytes. What it stands for is exactly its item encodings: a block encoded from a run
is byte for byte the block of that list, the generator keeps runs whole only when
that holds, and the size limits see every item."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from tests.receiver.doubles import FakeReporter
from tests.receiver.generator_doubles import RecordingListener, make
from walstream.receiver.block import Block, SourceRange, block_items
from walstream.receiver.block_generator import BlockGenerator, encoded_bytes
from walstream.receiver.items import STR_TAG, VALUE_TAG, encode_item
from walstream.receiver.supervisor import ReceiverSupervisor
from walstream.receiver.text_run import TextRun
from walstream.testing import WAIT_S, MemoryWAL, wait_until

BODIES = [b"one", b"", "caf\u00e9".encode(), b"four words in it", b"5"]


def run_of(tag: bytes, bodies: list[bytes]) -> TextRun:
    run = TextRun.join(tag, bodies)
    assert run is not None
    return run


@pytest.mark.parametrize("tag", [STR_TAG, VALUE_TAG])
def test_a_run_is_the_sequence_of_its_item_encodings(tag: bytes) -> None:
    run = TextRun.concat([run_of(tag, BODIES[:2]), run_of(tag, BODIES[2:])])
    items = [tag + b for b in BODIES]
    assert len(run) == 5 and list(run) == items and run.items() == items
    assert run[2] == items[2] and run[1:4] == items[1:4] and run[-1] == items[-1]
    assert run.body_bytes == sum(map(len, BODIES))
    assert encoded_bytes(run) == encoded_bytes(items)
    assert b"".join(run.text_parts()) == b"\n".join(BODIES)


@pytest.mark.parametrize("tag", [STR_TAG, VALUE_TAG])
@pytest.mark.parametrize("cuts", [(), (1,), (1, 2, 4)])
def test_a_block_of_a_run_is_byte_identical_to_the_block_of_its_items(
    tag: bytes, cuts: tuple[int, ...],
) -> None:
    bounds = [0, *cuts, len(BODIES)]
    run = TextRun.concat([run_of(tag, BODIES[a:b]) for a, b in itertools.pairwise(bounds)])
    source = (SourceRange("t", 0, 10, 15),)
    data = Block(4, "b-1", run, source).encode()
    assert data == Block(4, "b-1", list(run), source).encode()
    assert data[4] == (2 if tag == STR_TAG else 3)
    expected = [b.decode() for b in BODIES]
    assert block_items(data) == (expected if tag == STR_TAG
                                 else [(None, s) for s in expected])


def test_bodies_holding_a_newline_make_no_run_and_unknown_tags_none_at_all() -> None:
    assert TextRun.join(VALUE_TAG, [b"a", b"two\nlines"]) is None
    assert TextRun.join(VALUE_TAG, []) is None
    # A caller whose text is the join already passes it; its newlines still count.
    assert TextRun.join(STR_TAG, [b"a\n", b"b"], b"a\n\nb") is None
    with pytest.raises(ValueError, match="tag"):
        TextRun.join(b"b", [b"x"])
    with pytest.raises(ValueError, match="different tags"):
        TextRun.concat([run_of(STR_TAG, [b"x"]), run_of(VALUE_TAG, [b"y"])])


def test_fits_looks_inside_a_chunk_only_when_the_chunk_is_over_the_limit() -> None:
    run = TextRun.concat([run_of(VALUE_TAG, [b"x" * 10, b"y" * 3]), run_of(VALUE_TAG, [b"z"])])
    assert run.fits(11) and not run.fits(10)  # the longest item: b"v" + 10 bytes
    assert run_of(VALUE_TAG, [b"a"] * 50).fits(2)  # a long chunk of short items


def test_runs_added_back_to_back_make_one_run_and_anything_else_a_list_in_order(
    generators: list[BlockGenerator],
) -> None:
    seen: list[Any] = []
    listener = RecordingListener(push_hook=lambda block_id, records: seen.append(records))
    g = make(generators, listener, block_interval_ms=60_000)
    a, b = run_of(VALUE_TAG, [b"a1", b"a2"]), run_of(VALUE_TAG, [b"b1"])
    g.add_multiple_data(a)
    g.add_multiple_data(b)
    g.flush(WAIT_S)
    g.add_multiple_data(a)
    g.add_data(b"sloose")  # a run, then an item and a run: one list, in order
    g.add_multiple_data(b)
    g.add_multiple_data(run_of(STR_TAG, [b"s1"]))  # another tag
    g.stop(WAIT_S)
    assert len(seen) == 2
    assert isinstance(seen[0], TextRun) and list(seen[0]) == [b"va1", b"va2", b"vb1"]
    assert isinstance(seen[1], list)
    assert seen[1] == [b"va1", b"va2", b"sloose", b"vb1", b"ss1"]
    assert listener.pushed_records() == [*seen[0], *seen[1]]


def test_a_run_counts_as_its_items_against_max_block_records(
    generators: list[BlockGenerator],
) -> None:
    listener = RecordingListener()
    g = make(generators, listener, block_interval_ms=60_000, max_block_records=5)
    for i in range(4):  # 3 items each: two runs pass 5, so each block holds one
        g.add_multiple_data(run_of(VALUE_TAG, [f"{i}-{j}".encode() for j in range(3)]))
    g.stop(WAIT_S)
    assert [len(records) for _, records in listener.pushed] == [3, 3, 3, 3]
    assert listener.pushed_records() == [f"v{i}-{j}".encode() for i in range(4) for j in range(3)]


def test_an_item_of_a_run_over_max_record_bytes_is_reported_and_the_rest_stored(
    make_sup: Any, wal: MemoryWAL, reporter: FakeReporter,
) -> None:
    sup: ReceiverSupervisor
    sup, _ = make_sup(max_record_bytes=20)
    sup.start()
    wait_until(lambda: reporter.call_names()[:1] == ["register"], what="registered")
    bodies = [b"short", b"x" * 40, b"also short"]
    sup.push_many_encoded(run_of(VALUE_TAG, bodies))
    wait_until(lambda: len(reporter.reported_items()) == 2, what="the two short ones")
    assert reporter.reported_items() == [(None, "short"), (None, "also short")]
    assert sup.bad_records == 1
    assert [m for m, e in reporter.errors if "41 bytes exceeds max_record_bytes=20" in e] == [
        "bad record skipped"]
    assert reporter.violations == []


def test_a_run_of_str_items_reads_back_as_encode_item_would_store_them() -> None:
    lines = ["plain", "caf\u00e9", ""]
    run = run_of(STR_TAG, [s.encode() for s in lines])
    assert list(run) == [encode_item(s) for s in lines]


def test_random_runs_encode_as_their_items_and_refuse_newlines_exactly() -> None:
    rng = random.Random(30)
    for _ in range(300):
        tag = rng.choice((STR_TAG, VALUE_TAG))
        bodies = [bytes(rng.choice(b"ab\xc3\xa9 \r\n") for _ in range(rng.randrange(6)))
                  for _ in range(rng.randrange(1, 12))]
        run = TextRun.join(tag, bodies)
        if any(b"\n" in b for b in bodies):
            assert run is None
            continue
        assert run is not None
        cut = rng.randrange(1, len(bodies) + 1)
        parts = [r for r in (TextRun.join(tag, bodies[:cut]), TextRun.join(tag, bodies[cut:]))
                 if r is not None]
        joined = TextRun.concat(parts)
        items = [tag + b for b in bodies]
        assert list(joined) == items and encoded_bytes(joined) == encoded_bytes(items)
        assert Block(1, "r", joined).encode() == Block(1, "r", items).encode()


def test_a_run_of_text_has_a_line_per_newline_and_one_more() -> None:
    run = TextRun.of_text(STR_TAG, b"a\n\nc")
    assert len(run) == 3 and list(run) == [b"sa", b"s", b"sc"]
    assert list(TextRun.of_text(VALUE_TAG, b"")) == [b"v"]  # one empty line
    with pytest.raises(ValueError, match="tag"):
        TextRun.of_text(b"k", b"x")
