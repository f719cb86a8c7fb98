"""Checks shared by the ReceiverSupervisor tests: run a scripted receiver to its end,
merge acknowledged ranges (failing on an overlap) and match acks to reports."""

from __future__ import annotations

from tests.receiver.doubles import FakeReporter, ScriptReceiver
from walstream.receiver.block import SourceRange
from walstream.receiver.supervisor import ReceiverSupervisor
from walstream.testing import wait_until


def run_to_end(sup: ReceiverSupervisor, receiver: ScriptReceiver) -> None:
    """Start, let the script finish, stop (which pushes every generated block)."""
    sup.start()
    wait_until(receiver.script_done, what="the receiver's script")
    sup.stop("done", None)


def merged(ranges: list[SourceRange]) -> list[SourceRange]:
    """Merge adjacent ranges; fail on an overlap (a position acknowledged twice)."""
    out: list[SourceRange] = []
    for r in sorted(ranges):
        if out and out[-1].topic == r.topic and out[-1].partition == r.partition:
            last = out[-1]
            assert r.from_offset >= last.until_offset, f"overlapping ranges {last} {r}"
            if r.from_offset == last.until_offset:
                out[-1] = SourceRange(r.topic, r.partition, last.from_offset, r.until_offset)
                continue
        out.append(r)
    return out


def assert_acks_follow_reports(reporter: FakeReporter, receiver: ScriptReceiver) -> None:
    """Every accepted block was acknowledged once, in report order, with its ranges."""
    assert [bid for bid, _ in receiver.reported] == [b.block_id for b in reporter.blocks]
    for (_, meta), info in zip(receiver.reported, reporter.blocks, strict=True):
        assert meta == info.source
    assert reporter.violations == []
