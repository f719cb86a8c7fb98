"""ReceiverSupervisor: store in the WAL -> report AddBlock -> only then ack the source."""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.receiver.doubles import (
    STREAM,
    FakeReporter,
    Script,
    ScriptReceiver,
    ranges_of,
    src,
    store_each,
)
from tests.receiver.supervisor_checks import assert_acks_follow_reports, merged, run_to_end
from walstream.errors import ConfigError
from walstream.receiver.block import SourceRange
from walstream.receiver.block_generator import BlockGeneratorConfig
from walstream.receiver.errors import (
    BadRecordError,
    BlockGeneratorStoppedError,
    BlockReportError,
    BlockStoreError,
    ReceiverError,
    ReceiverRefusedError,
)
from walstream.receiver.items import encode_utf8_pair
from walstream.receiver.supervisor import ReceiverSupervisor
from walstream.receiver.supervisor_config import SupervisorConfig
from walstream.testing import WAIT_S, MemoryWAL, wait_until

pytestmark = pytest.mark.timeout(30)

# -- every store form delivers exactly its items -------------------------------------

N = 60


def mixed(i: int) -> Any:
    return [f"s{i}-é", f"b{i}".encode(), (f"k{i}", f"v{i}"), {"i": i}][i % 4]


def script_for(mode: str, items: list[Any], sync_counts: list[int],
               reporter: FakeReporter) -> Script:
    def run(r: ScriptReceiver) -> None:
        if mode == "single":
            for i, x in enumerate(items):
                r.store(x, src(i))
        elif mode == "bytes":
            for i, x in enumerate(items):
                r.storeBytes(x, src(i))
                sync_counts.append(len(reporter.blocks))
        elif mode == "many":
            for k in range(0, len(items), 7):
                r.storeMany(items[k:k + 7])
        else:
            for k in range(0, len(items), 7):
                chunk = items[k:k + 7]
                meta = SourceRange("src", 0, k, k + len(chunk))
                r.store(chunk if mode == "list" else iter(chunk), meta)
                sync_counts.append(len(reporter.blocks))

    return run


@pytest.mark.parametrize("mode", ["single", "list", "iterator", "bytes", "many"])
def test_each_store_form_delivers_exactly_its_items(
    mode: str, make_sup: Callable[..., Any], wal: MemoryWAL, reporter: FakeReporter
) -> None:
    items = [f"raw-{i}".encode() for i in range(N)] if mode == "bytes" else [
        mixed(i) for i in range(N)]
    sync_counts: list[int] = []
    sup, receiver = make_sup(script_for(mode, items, sync_counts, reporter))
    run_to_end(sup, receiver)

    assert receiver.store_errors == []
    assert sup.error is None and reporter.errors == []
    assert reporter.reported_items() == items
    assert sum(info.num_records for info in reporter.blocks) == N
    assert sup.records_reported == N and sup.blocks_reported == len(reporter.blocks)
    assert len(wal) == len(reporter.blocks)
    assert_acks_follow_reports(reporter, receiver)
    if mode != "many":
        assert merged(ranges_of(reporter.blocks)) == [SourceRange("src", 0, 0, N)]
    if mode in ("list", "iterator", "bytes"):
        # A list, an iterator or bytes is its own block, reported before store returns.
        assert sync_counts == list(range(1, len(sync_counts) + 1))
    if mode == "bytes":
        assert all(info.num_records == 1 for info in reporter.blocks)


def test_every_block_is_in_the_wal_when_reported(
    make_sup: Callable[..., Any], wal: MemoryWAL, reporter: FakeReporter
) -> None:
    def script(r: ScriptReceiver) -> None:
        for i in range(400):
            r.store(i, src(i))
            if i % 40 == 0:
                r.store([i, -i])
                time.sleep(0.01)

    sup, receiver = make_sup(script, gen={"block_interval_ms": 5, "max_block_records": 16})
    run_to_end(sup, receiver)
    assert len(reporter.blocks) > 10
    assert reporter.violations == []  # checked inside add_block, for every block
    names = reporter.call_names()
    assert names.count("add_block") == len(reporter.blocks) == len(wal)
    assert_acks_follow_reports(reporter, receiver)


def test_register_then_start_then_deregister_on_stop(
    make_sup: Callable[..., Any], reporter: FakeReporter
) -> None:
    sup, receiver = make_sup(lambda r: r.store("x"))
    assert not receiver.isStarted() and receiver.isStopped()
    sup.start()
    assert receiver.isStarted() and not receiver.isStopped()
    wait_until(receiver.script_done)
    sup.stop("bye", None)
    assert receiver.isStopped()
    names = reporter.call_names()
    assert names[0] == "register" and names[-1] == "deregister"
    assert names.index("add_block") < names.index("deregister")  # flushed before onStop
    assert receiver.events == ["start", "stop"]
    assert sup.await_termination(0)


# -- a failing WAL: the block is never reported -------------------------------------------


@pytest.mark.parametrize("mode", ["single", "list"])
def test_a_wal_failing_every_write_stops_the_supervisor_unreported(
    mode: str, make_sup: Callable[..., Any], wal: MemoryWAL, reporter: FakeReporter
) -> None:
    wal.fail_writes = -1

    def script(r: ScriptReceiver) -> None:
        if mode == "single":
            for i in range(3):
                r.store(f"x{i}", src(i))
        else:
            r.store(["x0", "x1", "x2"], SourceRange("src", 0, 0, 3))

    sup, receiver = make_sup(script, store_retries=3)
    sup.start()
    assert sup.await_termination(WAIT_S), "the supervisor did not stop after a failed store"
    wait_until(lambda: "deregister" in reporter.call_names(), what="deregister")

    assert isinstance(sup.error, BlockStoreError)
    assert "3 tries" in str(sup.error)
    assert wal.write_attempts == 3  # store_retries tries of the first block, nothing after
    assert "add_block" not in reporter.call_names()
    assert reporter.blocks == [] and receiver.reported == []
    assert reporter.errors, "the store failure was not reported to the driver"
    assert receiver.stops == 1
    if mode == "list":  # a synchronous store raises to its caller
        assert [type(e) for e in receiver.store_errors] == [BlockStoreError]


def test_a_wal_that_recovers_within_the_retries_loses_nothing(
    make_sup: Callable[..., Any], wal: MemoryWAL, reporter: FakeReporter
) -> None:
    wal.fail_writes = 2
    sup, receiver = make_sup(store_each(10),
                             store_retries=3)
    run_to_end(sup, receiver)
    assert sup.error is None
    assert reporter.reported_items() == list(range(10))
    assert wal.failed_writes == 2
    assert_acks_follow_reports(reporter, receiver)


def test_an_unexpected_wal_exception_also_stops_the_supervisor(
    make_sup: Callable[..., Any], wal: MemoryWAL, reporter: FakeReporter
) -> None:
    wal.fail_writes = -1
    wal.fail_with = lambda: RuntimeError("driver bug in the WAL client")
    sup, receiver = make_sup(lambda r: r.store("x", src(0)))
    sup.start()
    assert sup.await_termination(WAIT_S), "a push failure left the supervisor running"
    assert sup.error is not None
    assert "add_block" not in reporter.call_names()
    assert receiver.reported == []


def test_no_block_is_reported_after_an_earlier_one_was_lost(
    make_sup: Callable[..., Any], wal: MemoryWAL, reporter: FakeReporter
) -> None:
    """A later synchronous block must not be acknowledged after a lost one: its
    source ack would skip the lost records."""
    wal.fail_writes = -1
    step = threading.Event()
    lost = threading.Event()

    def script(r: ScriptReceiver) -> None:
        r.store("lost", src(0))
        assert lost.wait(WAIT_S)
        step.set()
        r.store(["later"], SourceRange("src", 0, 1, 2))

    sup, receiver = make_sup(script, store_retries=1)
    sup.start()
    wait_until(lambda: sup.generator.failed is not None, what="the failed push")
    wal.fail_writes = 0  # the WAL is back, but the earlier block is gone
    lost.set()
    assert step.wait(WAIT_S)
    wait_until(receiver.script_done)
    assert sup.await_termination(WAIT_S)
    assert reporter.blocks == [] and receiver.reported == []
    assert len(receiver.store_errors) == 1
    assert isinstance(receiver.store_errors[0], ReceiverError)


# -- the driver refuses ----------------------------------------------------------------


def test_a_refused_registration_raises_and_reports_nothing(
    make_sup: Callable[..., Any], wal: MemoryWAL, reporter: FakeReporter
) -> None:
    reporter.register_answer = (False, "stream 7 is not an input stream of this application")
    sup, receiver = make_sup(lambda r: r.store("x"))
    with pytest.raises(ReceiverRefusedError) as info:
        sup.start()
    msg = str(info.value)
    assert "stream 7" in msg and "refused" in msg and "not an input stream" in msg
    assert receiver.starts == 0
    assert sup.stopped.is_set() and sup.error is info.value
    assert reporter.call_names() == ["register"]
    with pytest.raises(BlockGeneratorStoppedError):
        receiver.store("late")
    assert len(wal) == 0


@pytest.mark.parametrize("answer", [False, RuntimeError("driver unreachable")],
                         ids=["refused", "raises"])
@pytest.mark.parametrize("mode", ["single", "list"])
def test_an_unacknowledged_block_is_not_acked_at_the_source(
    answer: Any, mode: str, make_sup: Callable[..., Any], reporter: FakeReporter
) -> None:
    reporter.add_block_answer = answer

    def script(r: ScriptReceiver) -> None:
        if mode == "single":
            r.store("a", src(0))
            r.store("b", src(1))
        else:
            r.store(["a", "b"], SourceRange("src", 0, 0, 2))

    sup, receiver = make_sup(script, report_retries=2)
    sup.start()
    assert sup.await_termination(WAIT_S), "the supervisor did not stop after a refused block"
    wait_until(lambda: "deregister" in reporter.call_names(), what="deregister")
    assert isinstance(sup.error, BlockReportError)
    assert reporter.add_block_attempts == 2  # report_retries, then give up
    assert receiver.reported == []
    assert reporter.violations == []
    if mode == "list":
        assert [type(e) for e in receiver.store_errors] == [BlockReportError]


def test_a_block_reported_on_a_retry_is_acked_once(
    make_sup: Callable[..., Any], reporter: FakeReporter
) -> None:
    answers = iter([False, True])
    real = reporter.add_block

    def flaky(info: Any, figures: Any = None) -> bool:
        reporter.add_block_answer = next(answers, True)
        return real(info, figures=figures)

    reporter.add_block = flaky  # type: ignore[method-assign]
    sup, receiver = make_sup(lambda r: r.store(["a"], SourceRange("src", 0, 0, 1)),
                             report_retries=3)
    run_to_end(sup, receiver)
    assert sup.error is None and receiver.store_errors == []
    assert len(receiver.reported) == 1
    assert_acks_follow_reports(reporter, receiver)


# -- bad records ---------------------------------------------------------------------------

BAD_MIX: list[Any] = [b"a", object(), "b", b"x" * 100, ("k", "v"), float("nan"), 3]
GOOD = [b"a", "b", ("k", "v"), 3]


@pytest.mark.parametrize("mode", ["single", "list"])
def test_bad_records_are_skipped_counted_and_reported(
    mode: str, make_sup: Callable[..., Any], reporter: FakeReporter
) -> None:
    def script(r: ScriptReceiver) -> None:
        if mode == "single":
            for i, x in enumerate(BAD_MIX):
                r.store(x, src(i))
        else:
            r.store(list(BAD_MIX), SourceRange("src", 0, 0, len(BAD_MIX)))

    sup, receiver = make_sup(script, max_record_bytes=64)
    run_to_end(sup, receiver)
    assert receiver.store_errors == []
    assert sup.error is None
    assert reporter.reported_items() == GOOD
    assert sup.bad_records == 3
    assert len(reporter.errors) == 3
    assert all("bad record" in m for m, _ in reporter.errors)
    assert any("max_record_bytes" in e for _, e in reporter.errors)
    # A skipped record's position counts as handled: all 7 positions are acked.
    assert merged(ranges_of(reporter.blocks)) == [SourceRange("src", 0, 0, len(BAD_MIX))]
    assert_acks_follow_reports(reporter, receiver)


def test_bad_record_policy_fail_stops_the_receiver(
    make_sup: Callable[..., Any], reporter: FakeReporter
) -> None:
    def script(r: ScriptReceiver) -> None:
        for i, x in enumerate([b"a", "b", object(), "c"]):
            r.store(x, src(i))

    sup, receiver = make_sup(script, bad_record_policy="fail")
    sup.start()
    assert sup.await_termination(WAIT_S)
    wait_until(receiver.script_done)
    wait_until(lambda: "deregister" in reporter.call_names(), what="deregister")
    assert [type(e) for e in receiver.store_errors] == [BadRecordError]
    assert isinstance(sup.error, BadRecordError)
    assert sup.bad_records == 1 and receiver.stops == 1
    # What came before the bad record is kept; the bad record and what follows are
    # not acknowledged at the source, so a restart reads them again.
    assert reporter.reported_items() == [b"a", "b"]
    assert merged(ranges_of(reporter.blocks)) == [SourceRange("src", 0, 0, 2)]
    assert_acks_follow_reports(reporter, receiver)


def test_supervisor_config_validation() -> None:
    with pytest.raises(ConfigError):
        SupervisorConfig(bad_record_policy="ignore")
    with pytest.raises(ConfigError):
        SupervisorConfig(store_retries=0)
    with pytest.raises(ConfigError):
        SupervisorConfig(report_retries=0)


# -- restart -------------------------------------------------------------------------------


def test_restart_stops_then_starts_the_receiver_after_the_delay(
    make_sup: Callable[..., Any], reporter: FakeReporter
) -> None:
    times: dict[str, float] = {}

    def script(r: ScriptReceiver) -> None:
        if r.starts == 1:
            r.store("a", src(0))
            r.store("b", src(1))
            times["restart"] = time.monotonic()
            r.restart("source hiccup")
        else:
            times["second_start"] = time.monotonic()
            r.store("c", src(2))
            r.store("d", src(3))

    sup, receiver = make_sup(script, restart_delay_s=0.2)
    sup.start()
    wait_until(lambda: receiver.starts == 2, what="the second onStart")
    wait_until(receiver.script_done)
    assert receiver.isStarted()
    assert times["second_start"] - times["restart"] >= 0.2
    sup.stop("done", None)

    assert receiver.events == ["start", "stop", "start", "stop"]
    names = [n for n in reporter.call_names() if n in ("register", "deregister")]
    assert names == ["register", "deregister", "register", "deregister"]
    restart_msgs = [m for n, m in reporter.calls if n == "deregister"]
    assert "source hiccup" in restart_msgs[0]
    # What was stored before the restart is reported before the receiver deregisters
    # (a driver accepts blocks from registered receivers only).
    first_deregister = reporter.call_names().index("deregister")
    before = [info for info in reporter.blocks
              if reporter.calls.index(("add_block", info.block_id)) < first_deregister]
    assert [x for info in before for x in reporter.items_of(info)] == ["a", "b"]
    assert sup.error is None
    assert reporter.reported_items() == ["a", "b", "c", "d"]
    assert_acks_follow_reports(reporter, receiver)


def test_no_restart_once_the_supervisor_stopped(
    make_sup: Callable[..., Any], reporter: FakeReporter
) -> None:
    sup, receiver = make_sup(None, restart_delay_s=0.2)
    sup.start()
    receiver.restart("will be stopped during the delay")
    wait_until(lambda: receiver.stops == 1, what="onStop of the restart")
    sup.stop("stopping", None)
    time.sleep(0.4)
    assert receiver.starts == 1
    assert receiver.isStopped()


# -- pickling --------------------------------------------------------------------------------


def module_level_script(r: ScriptReceiver) -> None:
    r.store("from a pickled receiver")


def test_receiver_pickles_without_its_supervisor(make_sup: Callable[..., Any]) -> None:
    sup, receiver = make_sup(module_level_script)
    assert receiver.supervisor is sup and receiver.streamId == STREAM
    data = pickle.dumps(receiver)
    assert b"ReceiverSupervisor" not in data and b"MemoryWAL" not in data
    copy = pickle.loads(data)
    assert isinstance(copy, ScriptReceiver)
    assert copy.streamId == STREAM
    assert copy.script is module_level_script
    assert copy.isStopped() and not copy.isStarted()
    with pytest.raises(ReceiverError, match="not started by a supervisor"):
        _ = copy.supervisor
    with pytest.raises(ReceiverError):
        copy.store("x")
    assert receiver.supervisor is sup  # pickling did not detach the original


def test_an_unpickled_receiver_runs_under_a_new_supervisor(
    make_sup: Callable[..., Any], wal: MemoryWAL, reporter: FakeReporter,
    supervisors: list[ReceiverSupervisor],
) -> None:
    _, receiver = make_sup(module_level_script)
    copy = pickle.loads(pickle.dumps(receiver))
    sup = ReceiverSupervisor(copy, STREAM, wal, reporter,
                             BlockGeneratorConfig(block_interval_ms=20))
    supervisors.append(sup)
    run_to_end(sup, copy)
    assert reporter.reported_items() == ["from a pickled receiver"]


def test_await_termination_returns_once_everything_is_pushed(
    make_sup: Callable[..., Any], reporter: FakeReporter
) -> None:
    """A task waiting for termination closes the WAL next: by then every block
    stored before stop must be in the WAL, reported, and the receiver deregistered."""
    real = reporter.add_block

    def slow(info: Any, figures: Any = None) -> bool:
        time.sleep(0.03)
        return bool(real(info, figures=figures))

    reporter.add_block = slow  # type: ignore[method-assign]
    sup, receiver = make_sup(store_each(20), gen={"block_interval_ms": 5,
                                                  "max_block_records": 2})
    sup.start()
    wait_until(receiver.script_done)
    threading.Thread(target=sup.stop, args=("stop command", None), daemon=True).start()
    assert sup.await_termination(WAIT_S)
    assert reporter.reported_items() == list(range(20))
    assert reporter.call_names()[-1] == "deregister"
    assert receiver.stops == 1


def test_pre_encoded_items_skip_oversize_and_keep_positions(
    make_sup: Callable[..., Any], reporter: FakeReporter
) -> None:
    # The Kafka receiver's default path hands over items already encoded.
    pairs = [(None, "a"), (None, "x" * 100), ("k", "b")]
    encoded = [encode_utf8_pair(None if k is None else k.encode(), v.encode())
               for k, v in pairs]

    def script(r: ScriptReceiver) -> None:
        r.supervisor.push_many_encoded(encoded, SourceRange("src", 0, 0, 3))

    sup, receiver = make_sup(script, max_record_bytes=64)
    run_to_end(sup, receiver)
    assert reporter.reported_items() == [(None, "a"), ("k", "b")]
    assert sup.bad_records == 1
    assert any("max_record_bytes" in e for _, e in reporter.errors)
    assert merged(ranges_of(reporter.blocks)) == [SourceRange("src", 0, 0, 3)]
    assert_acks_follow_reports(reporter, receiver)
