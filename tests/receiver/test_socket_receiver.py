"""SocketTextReceiver: lines are stored in order, each read back as the str its bytes
decode to; a line over max_line_bytes is reported as a bad record and skipped, with
memory bounded and nothing lost."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from tests.receiver.doubles import FakeReporter, record_generator_batches
from walstream.errors import ConfigError
from walstream.receiver.block_generator import BlockGeneratorConfig
from walstream.receiver.socket_receiver import SocketTextReceiver
from walstream.receiver.supervisor import ReceiverSupervisor
from walstream.receiver.supervisor_config import SupervisorConfig
from walstream.receiver.text_run import TextRun
from walstream.testing import MemoryWAL, wait_until

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def server() -> Iterator[tuple[socket.socket, list[socket.socket]]]:
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        conn, _ = listener.accept()
        accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    yield listener, accepted
    for c in accepted:
        c.close()
    listener.close()


def test_a_line_over_max_line_bytes_is_reported_and_skipped_and_nothing_else_is_lost(
    server: tuple[socket.socket, list[socket.socket]], wal: MemoryWAL, reporter: FakeReporter,
) -> None:
    listener, accepted = server
    receiver = SocketTextReceiver("127.0.0.1", listener.getsockname()[1], max_line_bytes=100)
    sup = ReceiverSupervisor(receiver, 7, wal, reporter, BlockGeneratorConfig(block_interval_ms=10),
                             SupervisorConfig(report_backoff_s=0.01, store_backoff_s=0.01))
    sup.start()
    try:
        wait_until(lambda: bool(accepted), what="the receiver's connection")
        conn = accepted[0]
        conn.sendall(b"a\nb\n")
        wait_until(lambda: reporter.reported_items() == ["a", "b"], what="a and b stored")
        conn.sendall(b"x" * 250 + b"\nc\r\n")  # one chunk with the whole long line
        for _ in range(5):  # a long line in many chunks, never held whole
            conn.sendall(b"y" * 90)
        conn.sendall(b"y\nd\n" + b"z" * 100 + b"\ne")
        conn.close()  # the last line ends with the connection
        wait_until(lambda: reporter.reported_items() == ["a", "b", "c", "d", "z" * 100, "e"],
                   what="every line within the limit stored")
        assert sup.bad_records == 2
        assert len(reporter.errors) == 2
        assert all("max_line_bytes=100" in error for _, error in reporter.errors)
        assert sup.error is None
    finally:
        sup.stop("done", None)


def _lines_through(server: tuple[socket.socket, list[socket.socket]], wal: MemoryWAL,
                   reporter: FakeReporter, data: bytes, encoding: str, n: int) -> list[object]:
    listener, accepted = server
    receiver = SocketTextReceiver("127.0.0.1", listener.getsockname()[1], encoding=encoding)
    sup = ReceiverSupervisor(receiver, 7, wal, reporter, BlockGeneratorConfig(block_interval_ms=10),
                             SupervisorConfig(report_backoff_s=0.01, store_backoff_s=0.01))
    sup.start()
    try:
        wait_until(lambda: bool(accepted), what="the receiver's connection")
        accepted[0].sendall(data)
        wait_until(lambda: len(reporter.reported_items()) >= n, what=f"{n} lines stored")
        return list(reporter.reported_items())
    finally:
        sup.stop("done", None)


@pytest.mark.parametrize("encoding", ["utf-8", "UTF8", "ascii", "latin-1"])
def test_each_line_reads_back_as_the_str_its_bytes_decode_to(
    server: tuple[socket.socket, list[socket.socket]], wal: MemoryWAL, reporter: FakeReporter,
    encoding: str,
) -> None:
    lines = [b"plain ascii", "caf\u00e9 \u00fcber".encode(), b"bad \xff\xfe utf-8", b"",
             b"crlf\r", "\u65e5\u672c".encode()]
    got = _lines_through(server, wal, reporter, b"\n".join(lines) + b"\n", encoding, len(lines))
    assert got == [line.rstrip(b"\r").decode(encoding, "replace") for line in lines]


def test_many_lines_of_one_recv_arrive_whole_and_in_order(
    server: tuple[socket.socket, list[socket.socket]], wal: MemoryWAL, reporter: FakeReporter,
) -> None:
    lines = [f"line {i} " + "w" * (i % 50) for i in range(20_000)]
    data = "\n".join(lines).encode() + b"\n"
    assert _lines_through(server, wal, reporter, data, "utf-8", len(lines)) == lines


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_lines_stored_in_their_raw_form_go_to_the_generator_as_runs_and_only_they(
    server: tuple[socket.socket, list[socket.socket]], wal: MemoryWAL, reporter: FakeReporter,
    monkeypatch: pytest.MonkeyPatch, encoding: str,
) -> None:
    # Valid UTF-8 under UTF-8 is stored as its bytes: a run. Under latin-1 the bytes
    # of "caf\u00e9" are not its str's UTF-8, so those lines are encoded one by one.
    batches = record_generator_batches(monkeypatch)
    lines = [f"caf\u00e9 {i}" for i in range(500)]
    data = "\n".join(lines).encode() + b"\n"
    got = _lines_through(server, wal, reporter, data, encoding, len(lines))
    assert got == [line.encode().decode(encoding) for line in lines]
    assert batches and all(isinstance(b, TextRun) == (encoding == "utf-8") for b in batches)


def test_an_unknown_encoding_is_refused_at_construction() -> None:
    with pytest.raises(ConfigError, match="unknown encoding 'no-such-codec'"):
        SocketTextReceiver("127.0.0.1", 1, encoding="no-such-codec")
