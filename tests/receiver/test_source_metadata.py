"""Source-position metadata of stored items: the shapes a supervisor accepts, and a
typed error naming them for any other (positions must never vanish silently)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.receiver.doubles import FakeReporter, ScriptReceiver
from walstream.receiver.block import SourceRange
from walstream.receiver.errors import SourceMetadataError
from walstream.receiver.source_metadata import check_source_metadata
from walstream.receiver.supervisor import ReceiverSupervisor
from walstream.testing import wait_until

WRONG_SHAPES: list[Any] = [
    {"topic": "src", "partition": 0, "offset": 3},  # a dict, not a tuple
    ("src", 0),  # too short
    ("src", "0", 5),  # partition not an int
    ("src", 0, 5.0),  # offset not an int
    [("src", 0, 1), ("src", 0, 2)],  # a list of tuples, not of SourceRange
    [SourceRange("src", 0, 0, 1), "x"],  # a mixed list
    42,
    "src:0:3",
    SourceRange("src", 0, 5, 4),  # until before from
]


@pytest.mark.parametrize("meta", WRONG_SHAPES, ids=repr)
@pytest.mark.parametrize("how", ["single", "many", "list"])
def test_positions_in_an_unknown_shape_raise_a_typed_error_naming_the_shape(
    how: str, meta: Any, make_sup: Callable[..., tuple[ReceiverSupervisor, ScriptReceiver]],
    reporter: FakeReporter,
) -> None:
    sup, _ = make_sup()
    sup.start()
    store = {"single": lambda: sup.push_single("x", meta),
             "many": lambda: sup.push_many(["x", "y"], meta),
             "list": lambda: sup.push_array_buffer(["x", "y"], meta)}[how]
    with pytest.raises(SourceMetadataError, match=r"SourceRange.*\(topic, partition, offset\)"):
        store()
    # Nothing was stored without its position, and the receiver goes on.
    sup.push_single("ok", ("src", 0, 0))
    sup.generator.flush()
    wait_until(lambda: len(reporter.blocks) == 1)
    assert reporter.reported_items() == ["ok"]
    assert [r for b in reporter.blocks for r in b.source] == [SourceRange("src", 0, 0, 1)]
    assert sup.error is None


@pytest.mark.parametrize("meta", [
    None, ("src", 0, 3), SourceRange("src", 1, 0, 5), (), [],
    (SourceRange("a", 0, 0, 1), SourceRange("b", 2, 3, 3)), [SourceRange("a", 0, 0, 1)],
], ids=repr)
def test_the_documented_shapes_are_accepted(meta: Any) -> None:
    check_source_metadata(meta)
