"""What one receiver can make the driver hold is bounded: block reports over a limit
are refused before anything is logged or kept, report strings are truncated, and
the gRPC server refuses oversized messages and keeps threads for AddBlock."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from walstream.driver.errors import DriverError
from walstream.driver.receiver_tracker.endpoint import LocalReceiverEndpoint
from walstream.driver.receiver_tracker.endpoint_limits import escape_controls
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.driver_client import DriverClient
from walstream.rpc import messages as m
from walstream.testing import MemoryWAL
from walstream.wal import RecordHandle

pytestmark = pytest.mark.timeout(60)

MiB = 1024 * 1024


def _info(i: int = 0, **changes: Any) -> ReceivedBlockInfo:
    info = ReceivedBlockInfo(0, f"input-0-{i}", 10, RecordHandle("receiver-wal", 0, i),
                             (SourceRange("src", 0, i * 10, i * 10 + 10),))
    return dataclasses.replace(info, **changes)


OVER_LIMIT: dict[str, ReceivedBlockInfo] = {
    "too many source ranges": _info(source=tuple(
        SourceRange("src", p, 0, 0) for p in range(5000))),
    "a long block id": _info(block_id="input-0-" + "x" * 10_000),
    "a long source topic": _info(source=(SourceRange("t" * 10_000, 0, 0, 1),)),
    "a long WAL topic": _info(handle=RecordHandle("w" * 10_000, 0, 0)),
    "too many records": _info(num_records=2**40),
    "a negative record count": _info(num_records=-1),
}


@pytest.fixture
def endpoint(local_endpoint: tuple[LocalReceiverEndpoint, MemoryWAL]
             ) -> tuple[LocalReceiverEndpoint, MemoryWAL]:
    return local_endpoint


@pytest.mark.parametrize("case", list(OVER_LIMIT))
def test_an_add_block_over_a_limit_is_refused_and_nothing_is_logged_or_kept(
    case: str, endpoint: tuple[LocalReceiverEndpoint, MemoryWAL]
) -> None:
    ep, wal = endpoint
    with pytest.raises(DriverError, match="limit"):
        ep.add_block(OVER_LIMIT[case])
    assert wal.writes == 0
    assert ep.tracker.get_unallocated_blocks(0) == []
    assert ep.tracker.positions(0) == ()
    assert ep.add_block(_info())  # the receiver stays registered; a good block goes in
    assert wal.writes == 1


@pytest.fixture
def rpc() -> Iterator[tuple[ReceiverTracker, MemoryWAL, DriverClient]]:
    wal = MemoryWAL()
    blocks = ReceivedBlockTracker([0], wal)
    tracker = ReceiverTracker(blocks, [0])
    client = DriverClient(tracker.address, timeout_s=20)
    assert client.register_receiver(0, "h", "e").accepted
    yield tracker, wal, client
    client.close()
    tracker.stop()
    blocks.stop()


@pytest.mark.parametrize("case", list(OVER_LIMIT))
def test_an_add_block_over_a_limit_is_refused_over_grpc_with_the_limit_named(
    case: str, rpc: tuple[ReceiverTracker, MemoryWAL, DriverClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    tracker, wal, client = rpc
    with caplog.at_level(logging.ERROR, logger="walstream.receiver.driver_client"):
        assert client.add_block(OVER_LIMIT[case]) is False
    assert "limit" in caplog.text
    assert wal.writes == 0 and tracker.tracker.get_unallocated_blocks(0) == []
    assert client.add_block(_info())


def test_a_block_report_of_500k_empty_ranges_is_refused_without_decoding_it(
    rpc: tuple[ReceiverTracker, MemoryWAL, DriverClient],
) -> None:
    tracker, wal, client = rpc
    # ~1.9 MB on the wire; decoded in full it takes well over 100 MB of Python objects.
    body = m.ADD_BLOCK_REQUEST.encode({"session": client.session_of(0), "block": {
        **_info().to_dict(),
        "source": [{"topic": "", "partition": 0, "from_offset": 0, "until_offset": 0}] * 500_000,
    }})
    assert len(body) < 2 * MiB
    channel = grpc.insecure_channel(tracker.address)
    call = channel.unary_unary(f"/{m.SERVICE}/AddBlock")  # raw bytes both ways
    tracemalloc.start()
    try:
        answer = m.ADD_BLOCK_RESPONSE.decode(
            call(body, timeout=20, metadata=tracker.credentials.metadata))[1]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        channel.close()
    assert answer["ok"] is False and "limit" in answer["message"]
    assert peak < 16 * MiB, f"the driver held {peak / MiB:.0f} MiB to refuse it"
    assert wal.writes == 0


def test_report_strings_over_the_limit_are_truncated_before_they_are_kept_or_logged(
    endpoint: tuple[LocalReceiverEndpoint, MemoryWAL],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ep, _ = endpoint
    heard: list[str] = []
    ep._listener = lambda event, stream, detail: heard.append(detail)
    huge = "m" * 1_000_000
    with caplog.at_level(logging.INFO, logger="walstream.driver.receiver_tracker.endpoint"):
        ep.report_error(0, huge, "e" * 1_000_000)
        ep.deregister_receiver(0, huge, "e" * 1_000_000)
    limit = ep.limits.max_report_chars
    kept = ep.receivers[0].errors[-1]
    assert len(kept) <= 2 * limit + 200 and "more chars" in kept
    assert heard and all(len(d) <= 2 * limit + 200 for d in heard)
    assert caplog.records and all(
        len(r.getMessage()) <= 2 * limit + 400 for r in caplog.records)


def test_grpc_server_carries_the_lowered_message_limit_and_max_concurrent_rpcs(
    rpc: tuple[ReceiverTracker, MemoryWAL, DriverClient],
) -> None:
    tracker, wal, _ = rpc
    options = dict(tracker.server_options)
    assert options["grpc.max_receive_message_length"] <= 8 * MiB
    assert tracker.maximum_concurrent_rpcs is not None
    assert tracker.maximum_concurrent_rpcs >= tracker.max_workers
    channel = grpc.insecure_channel(tracker.address)
    try:
        call = channel.unary_unary(f"/{m.SERVICE}/AddBlock")
        with pytest.raises(grpc.RpcError) as err:
            call(b"x" * (options["grpc.max_receive_message_length"] + 1), timeout=20,
                 metadata=tracker.credentials.metadata)
        assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        channel.close()
    assert wal.writes == 0


def test_add_block_answers_while_every_receiver_holds_a_control_stream() -> None:
    streams = list(range(40))
    blocks = ReceivedBlockTracker(streams, None)
    tracker = ReceiverTracker(blocks, streams)
    clients = [DriverClient(tracker.address, timeout_s=5) for _ in streams]
    calls: list[Any] = []
    try:
        for s, c in zip(streams, clients, strict=True):
            assert c.register_receiver(s, "h", f"e{s}").accepted
        for s, c in zip(streams, clients, strict=True):
            calls.append(c.control(s))  # long-lived: each holds a server thread
        time.sleep(1.0)  # let the server take every stream
        started = time.monotonic()
        assert clients[0].add_block(ReceivedBlockInfo(
            0, "input-0-0", 1, RecordHandle("w", 0, 0)))
        assert time.monotonic() - started < 5
        assert tracker.max_workers > len(streams)
    finally:
        for call in calls:
            call.cancel()
        for c in clients:
            c.close()
        tracker.stop()
        blocks.stop()


def test_a_new_control_stream_supersedes_the_old_one_of_its_receiver() -> None:
    blocks = ReceivedBlockTracker([0], None)
    tracker = ReceiverTracker(blocks, [0])
    client = DriverClient(tracker.address, timeout_s=5)
    try:
        assert client.register_receiver(0, "h", "e").accepted
        old = client.control(0)
        ended = threading.Event()

        def drain() -> None:
            try:
                for _ in old:
                    pass
            except grpc.RpcError:
                pass
            ended.set()

        threading.Thread(target=drain, daemon=True).start()
        time.sleep(0.3)
        new = client.control(0)
        assert ended.wait(5), "the superseded Control stream is still open"
        tracker.restart_receiver(0)
        assert [c["kind"] for c in new if c["kind"] != "HEARTBEAT"][:1] == ["STOP"]
    finally:
        client.close()
        tracker.stop()
        blocks.stop()


def test_receiver_strings_are_kept_and_logged_with_control_characters_escaped(
        caplog: pytest.LogCaptureFixture) -> None:
    """A receiver's host, executor id and error text cannot forge a log line or drive
    the terminal of whoever runs ``walstream status``."""
    tracker = ReceivedBlockTracker([0], MemoryWAL())
    ep = LocalReceiverEndpoint(tracker, [0])
    forged = "h\n2026 INFO driver: receiver 0 is fine\x1b[2J\r"
    try:
        with caplog.at_level(logging.INFO):
            assert ep.register_receiver(0, forged, "exec\x07\u2028").accepted
            session = ep.receivers[0].session
            ep.report_error(0, "bad\nline", "\x1b[31mred", session=session)
            ep.deregister_receiver(0, "bye\r\n", "\x00", session=session)
        info = ep.receivers[0]
        assert info.host == "h\\n2026 INFO driver: receiver 0 is fine\\x1b[2J\\r"
        assert info.executor_id == "exec\\x07\\u2028"
        assert info.errors == ["bad\\nline: \\x1b[31mred"]
        for record in caplog.records:
            text = record.getMessage()
            assert not any(not c.isprintable() for c in text), repr(text)
        assert escape_controls("é-host") == "é-host"  # printable text in any script
    finally:
        tracker.stop()
