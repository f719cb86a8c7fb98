"""The committing receiver's journal and the check that accepts a doubling only from
its blocks whose outcome stayed open."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from integration_tests.netfault_lab import redelivered_from
from walstream.testing.committing_receiver import CommittingKafkaReceiver, open_blocks


def _journal(path: Path, *entries: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries) + '{"pid": 1, "ru')
    return path


def test_open_blocks_are_those_begun_and_never_committed(tmp_path: Path) -> None:
    j = _journal(
        tmp_path / "j.jsonl",
        {"pid": 1, "run": "a", "seq": 1, "step": "storing", "words": {"x": 2}},
        {"pid": 1, "run": "a", "seq": 1, "step": "stored"},
        {"pid": 1, "run": "a", "seq": 1, "step": "committed"},
        {"pid": 1, "run": "a", "seq": 2, "step": "storing", "words": {"y": 1}},
        {"pid": 1, "run": "a", "seq": 2, "step": "stored"},  # commit never returned
        {"pid": 1, "run": "b", "seq": 1, "step": "storing", "words": {"z": 3}},  # store raised
        # Another process's block with the same run and number is another block.
        {"pid": 2, "run": "a", "seq": 1, "step": "storing", "words": {"w": 1}},
    )
    assert open_blocks(j) == [Counter(y=1), Counter(z=3), Counter(w=1)]
    assert open_blocks(tmp_path / "missing.jsonl") == []


def test_the_receiver_journals_one_whole_line_per_step(tmp_path: Path) -> None:
    r = CommittingKafkaReceiver("b:9092", "t", "g", journal=str(tmp_path / "j.jsonl"))
    r._note({"run": "a", "seq": 1, "step": "storing", "words": Counter(a=1)})
    r._note({"run": "a", "seq": 1, "step": "stored"})
    lines = (tmp_path / "j.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == ["storing", "stored"]
    CommittingKafkaReceiver("b:9092", "t", "g")._note({"step": "storing"})  # no journal: no-op


def test_a_doubling_is_accepted_only_as_whole_open_blocks() -> None:
    blocks = [Counter(a=2, b=1), Counter(b=1, c=1), Counter(d=5)]
    assert redelivered_from(Counter(), blocks)
    assert redelivered_from(Counter(a=2, b=1), blocks)
    assert redelivered_from(Counter(a=2, b=2, c=1), blocks)  # two blocks
    assert redelivered_from(Counter(b=1, c=1, d=5), blocks)
    assert not redelivered_from(Counter(a=1), blocks)  # part of a block
    assert not redelivered_from(Counter(a=4, b=2), blocks)  # one block twice
    assert not redelivered_from(Counter(e=1), blocks)  # a word no open block holds
    assert not redelivered_from(Counter(a=1), [])
