"""SocketTextReceiver: lines are stored one by one; a line over max_line_bytes is
reported as a bad record and skipped, with memory bounded and nothing lost."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from receiver.block_generator import BlockGeneratorConfig
from receiver.socket_receiver import SocketTextReceiver
from receiver.supervisor import ReceiverSupervisor, SupervisorConfig
from tests.receiver.doubles import FakeReporter
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
