"""ReceiverSupervisor over a WAL with ``write_async`` (the pipelined store): the next
block's write starts while the one before it is reported; a write that outlives
``store_timeout_s`` is retried and its block reported once; the pipeline can be
switched off; and a write the WAL itself times out fails with the WAL's own error."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pytest

from tests.receiver.doubles import STREAM, FakeReporter, Script, ScriptReceiver, store_each
from tests.receiver.supervisor_checks import assert_acks_follow_reports, run_to_end
from walstream.receiver.block_generator import BlockGeneratorConfig
from walstream.receiver.errors import BlockStoreError
from walstream.receiver.supervisor import ReceiverSupervisor
from walstream.receiver.supervisor_config import SupervisorConfig
from walstream.testing import WAIT_S, AsyncMemoryWAL, wait_until
from walstream.wal.errors import WalWriteTimeoutError
from walstream.wal.handle import RecordHandle

pytestmark = pytest.mark.timeout(30)


class GatedReporter(FakeReporter):
    """Holds the first ``add_block`` until ``gate`` is set and notes how many
    ``write_async`` calls the WAL had seen when each report arrived."""

    def __init__(self, wal: AsyncMemoryWAL) -> None:
        super().__init__(wal)
        self.async_wal = wal
        self.gate = threading.Event()
        self.writes_seen: list[int] = []

    def add_block(self, info: Any, figures: Any = None) -> bool:
        self.writes_seen.append(self.async_wal.async_calls)
        if len(self.writes_seen) == 1:
            self.gate.wait(WAIT_S)
        return super().add_block(info, figures=figures)


def pipelined_sup(wal: AsyncMemoryWAL, reporter: FakeReporter, script: Script,
                  supervisors: list[ReceiverSupervisor], **cfg: Any,
                  ) -> tuple[ReceiverSupervisor, ScriptReceiver]:
    receiver = ScriptReceiver(script)
    sup = ReceiverSupervisor(
        receiver, STREAM, wal, reporter,
        generator_config=BlockGeneratorConfig(block_interval_ms=5, max_block_records=1),
        config=SupervisorConfig(store_backoff_s=0.01, report_backoff_s=0.01, **cfg))
    supervisors.append(sup)
    return sup, receiver


def test_pipelined_store_writes_the_next_block_while_one_is_reported(
    supervisors: list[ReceiverSupervisor],
) -> None:
    wal = AsyncMemoryWAL()
    reporter = GatedReporter(wal)
    sup, receiver = pipelined_sup(wal, reporter, store_each(6), supervisors)
    sup.start()
    wait_until(receiver.script_done)
    # The first report is held, so the other blocks queue up behind it; once it is
    # released, each later report finds the next block's write already begun.
    wait_until(lambda: sup.generator.blocks_generated == 6, what="six blocks cut")
    reporter.gate.set()
    sup.stop("done", None)
    assert any(seen > i + 1 for i, seen in enumerate(reporter.writes_seen)), \
        reporter.writes_seen
    assert reporter.violations == []  # each report came after its own block was stored
    assert reporter.reported_items() == list(range(6))  # in order, nothing twice
    assert_acks_follow_reports(reporter, receiver)
    wal.close()


def test_a_pipelined_store_that_times_out_is_retried_and_reported_once(
    supervisors: list[ReceiverSupervisor],
) -> None:
    wal = AsyncMemoryWAL(delay_s=1.0)  # every asynchronous write outlives the bound
    reporter = FakeReporter(wal)
    sup, receiver = pipelined_sup(wal, reporter, store_each(2), supervisors,
                                  store_timeout_s=0.1, store_retries=2)
    run_to_end(sup, receiver)
    assert sup.error is None
    assert reporter.reported_items() == [0, 1]
    assert len(reporter.blocks) == 2  # the late first writes land too, never reported
    wait_until(lambda: len(wal) == 4, timeout_s=WAIT_S, what="the late writes")
    wal.close()


def test_pipelined_store_can_be_switched_off(supervisors: list[ReceiverSupervisor]) -> None:
    wal = AsyncMemoryWAL()
    reporter = FakeReporter(wal)
    sup, receiver = pipelined_sup(wal, reporter, store_each(3), supervisors,
                                  pipelined_store=False)
    run_to_end(sup, receiver)
    assert wal.async_calls == 0
    assert reporter.reported_items() == [0, 1, 2]
    wal.close()


class _ExpiringWAL(AsyncMemoryWAL):
    """Every asynchronous write fails as the Kafka WAL's does when librdkafka's
    delivery timeout expires: its Future raises ``WalWriteTimeoutError``."""

    def write_async(self, record: bytes, time_ms: int) -> Future[RecordHandle]:
        self.async_calls += 1
        failed: Future[RecordHandle] = Future()
        failed.set_exception(WalWriteTimeoutError("delivery timed out (librdkafka)"))
        return failed


def test_a_write_that_times_out_in_the_wal_keeps_its_own_error(
    supervisors: list[ReceiverSupervisor],
) -> None:
    # WalWriteTimeoutError is a TimeoutError, and so is the Future's own timeout on
    # Python 3.11: the write's own failure must not be reported as store_timeout_s.
    wal = _ExpiringWAL()
    reporter = FakeReporter(wal)
    sup, _receiver = pipelined_sup(wal, reporter, store_each(1), supervisors,
                                  store_retries=1)  # the error is the first try's
    sup.start()
    assert sup.await_termination(WAIT_S)
    assert isinstance(sup.error, BlockStoreError)
    assert isinstance(sup.error.__cause__, WalWriteTimeoutError)
    assert "delivery timed out (librdkafka)" in str(sup.error), str(sup.error)
    assert "store_timeout_s" not in str(sup.error)
    assert "add_block" not in reporter.call_names()
    wal.close()
