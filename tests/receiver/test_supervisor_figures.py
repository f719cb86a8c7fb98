"""The receiver's figures travel with its block reports: each AddBlock carries the
block's WAL write (time, bytes) and the source ends the receiver learnt since its
last report, at most ``MAX_SOURCE_ENDS`` of them; a reporter whose ``add_block`` takes
no ``figures`` gets the block alone, as before."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.receiver.doubles import STREAM, FakeReporter, ScriptReceiver, src
from walstream.driver.receiver_tracker.endpoint import LocalReceiverEndpoint
from walstream.receiver.block_info import BlockFigures, ReceivedBlockInfo
from walstream.receiver.driver_client import DriverClient
from walstream.receiver.supervisor import ReceiverSupervisor
from walstream.receiver.supervisor_config import SupervisorConfig
from walstream.rpc.messages import MAX_SOURCE_ENDS
from walstream.testing import MemoryWAL, wait_until

pytestmark = pytest.mark.timeout(30)


class FiguresReporter(FakeReporter):
    """A :class:`FakeReporter` whose ``add_block`` takes the figures, and keeps them."""

    def __init__(self, wal: MemoryWAL) -> None:
        super().__init__(wal)
        self.figures: list[tuple[ReceivedBlockInfo, BlockFigures | None]] = []

    def add_block(self, info: ReceivedBlockInfo, figures: BlockFigures | None = None) -> bool:
        ok = super().add_block(info)
        if ok is True:
            with self.lock:
                self.figures.append((info, figures))
        return ok


class EndsReceiver(ScriptReceiver):
    """A script receiver whose source ends are what the test sets."""

    def __init__(self, script: Callable[[ScriptReceiver], None] | None = None) -> None:
        super().__init__(script)
        self.ends: dict[tuple[str, int], int] = {}
        self.ends_lock = threading.Lock()

    def source_ends(self) -> dict[tuple[str, int], int]:
        with self.ends_lock:
            return dict(self.ends)


def _sup(wal: MemoryWAL, reporter: Any, receiver: ScriptReceiver,
         supervisors: list[ReceiverSupervisor], **cfg: Any) -> ReceiverSupervisor:
    sup = ReceiverSupervisor(receiver, STREAM, wal, reporter,
                             config=SupervisorConfig(report_backoff_s=0.01, **cfg))
    supervisors.append(sup)
    return sup


def test_every_report_carries_its_blocks_wal_write_and_the_new_source_ends(
    wal: MemoryWAL, supervisors: list[ReceiverSupervisor]
) -> None:
    reporter = FiguresReporter(wal)
    receiver = EndsReceiver()
    sup = _sup(wal, reporter, receiver, supervisors)
    sup.start()
    receiver.ends = {("src", 0): 10, ("src", 1): 5}
    sup.push_array_buffer(["a", "b"], src(1))
    sup.push_array_buffer(["c"], src(2))  # no end changed: none sent
    receiver.ends = {("src", 0): 12, ("src", 1): 5}
    sup.push_array_buffer(["d"], src(3))
    [f1, f2, f3] = [f for _, f in reporter.figures]
    assert not reporter.violations
    for info, figures in reporter.figures:
        assert figures is not None
        assert figures.wal_bytes == len(wal.read(info.handle)) > 0
        assert 0 <= figures.wal_write_seconds < 30
    assert f1 is not None and f2 is not None and f3 is not None
    assert [(e.topic, e.partition, e.end_offset) for e in f1.source_ends] == [
        ("src", 0, 10), ("src", 1, 5)]
    assert f2.source_ends == ()
    assert [(e.topic, e.partition, e.end_offset) for e in f3.source_ends] == [("src", 0, 12)]


def test_blocks_from_the_generator_carry_figures_too(
    wal: MemoryWAL, supervisors: list[ReceiverSupervisor]
) -> None:
    reporter = FiguresReporter(wal)

    def script(r: ScriptReceiver) -> None:
        for i in range(30):
            r.store(i, src(i))

    receiver = EndsReceiver(script)
    receiver.ends = {("src", 0): 30}
    sup = _sup(wal, reporter, receiver, supervisors)
    sup.start()
    wait_until(receiver.script_done)
    sup.stop("done", None)
    assert sup.error is None and reporter.figures
    sent = [e for _, f in reporter.figures if f is not None for e in f.source_ends]
    assert [(e.topic, e.partition, e.end_offset) for e in sent] == [("src", 0, 30)]
    assert sum(f.wal_bytes for _, f in reporter.figures if f is not None) == sum(
        len(wal.read(i.handle)) for i, _ in reporter.figures)


def test_at_most_max_source_ends_per_report_and_the_rest_in_the_next(
    wal: MemoryWAL, supervisors: list[ReceiverSupervisor]
) -> None:
    reporter = FiguresReporter(wal)
    receiver = EndsReceiver()
    receiver.ends = {("src", p): 100 + p for p in range(MAX_SOURCE_ENDS + 7)}
    sup = _sup(wal, reporter, receiver, supervisors)
    sup.start()
    sup.push_array_buffer(["a"], src(0))
    sup.push_array_buffer(["b"], src(1))
    sup.push_array_buffer(["c"], src(2))
    counts = [len(f.source_ends) for _, f in reporter.figures if f is not None]
    assert counts == [MAX_SOURCE_ENDS, 7, 0]


def test_a_new_registration_sends_every_end_again(
    wal: MemoryWAL, supervisors: list[ReceiverSupervisor]
) -> None:
    """A relaunched driver knows no end: after a registration all are sent again."""
    reporter = FiguresReporter(wal)
    receiver = EndsReceiver()
    receiver.ends = {("src", 0): 9}
    sup = _sup(wal, reporter, receiver, supervisors, restart_delay_s=0.01)
    sup.start()
    sup.push_array_buffer(["a"], src(0))
    sup.restart_receiver("again")
    wait_until(lambda: receiver.starts == 2 and sup.is_receiver_started())
    sup.push_array_buffer(["b"], src(1))
    ends = [[e.end_offset for e in f.source_ends] for _, f in reporter.figures if f is not None]
    assert ends == [[9], [9]]


def test_a_reporter_without_figures_gets_the_block_alone(
    wal: MemoryWAL, supervisors: list[ReceiverSupervisor]
) -> None:
    reporter = FakeReporter(wal)  # add_block(self, info)
    receiver = EndsReceiver()
    receiver.ends = {("src", 0): 3}
    sup = _sup(wal, reporter, receiver, supervisors)
    sup.start()
    sup.push_array_buffer(["a"], src(0))
    assert [b.block_id for b in reporter.blocks] and not reporter.violations


def test_send_figures_off_sends_none(
    wal: MemoryWAL, supervisors: list[ReceiverSupervisor]
) -> None:
    reporter = FiguresReporter(wal)
    sup = _sup(wal, reporter, EndsReceiver(), supervisors, send_figures=False)
    sup.start()
    sup.push_array_buffer(["a"], src(0))
    assert [f for _, f in reporter.figures] == [None]


def test_a_failing_source_ends_never_costs_the_block(
    wal: MemoryWAL, supervisors: list[ReceiverSupervisor]
) -> None:
    class Broken(EndsReceiver):
        def source_ends(self) -> dict[tuple[str, int], int]:
            raise RuntimeError("no ends")

    reporter = FiguresReporter(wal)
    sup = _sup(wal, reporter, Broken(), supervisors)
    sup.start()
    sup.push_array_buffer(["a"], src(0))
    [(_, figures)] = reporter.figures
    assert figures is not None and figures.source_ends == () and figures.wal_bytes > 0


def test_every_reporter_takes_the_figures_by_keyword() -> None:
    """The supervisor passes ``figures=`` to whichever reporter it has: the in-process
    endpoint (whose second positional parameter is the session) and the gRPC client
    both take it by name."""
    for reporter in (LocalReceiverEndpoint, DriverClient, FakeReporter, FiguresReporter):
        params = inspect.signature(reporter.add_block).parameters
        assert "figures" in params, reporter
        assert params["figures"].kind in (params["figures"].POSITIONAL_OR_KEYWORD,
                                          params["figures"].KEYWORD_ONLY)
        assert params["figures"].default is None, reporter

