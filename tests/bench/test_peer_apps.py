"""The peer benchmark's line server (``bench.peer_apps.LineServer``)."""

from __future__ import annotations

import socket
import threading

import pytest

from bench.peer_apps import FRESH_WORD, LineServer, Phase, lines_pool


def _client(server: LineServer) -> socket.socket:
    c = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    c.settimeout(5)
    return c


def test_a_reconnected_receiver_is_fed_only_once_served() -> None:
    server = LineServer()
    first = _client(server)
    try:
        assert server.connected.wait(5)
        second = _client(server)
        server.run_phase(Phase(2000.0), 0.2)
        assert first.recv(65536)  # the first client is the one fed
        second.setblocking(False)
        with pytest.raises(BlockingIOError):
            second.recv(65536)  # held idle: lines are not sent to two receivers
        second.settimeout(5)
        server.serve_newest(5)
        phase = Phase(2000.0)
        server.run_phase(phase, 0.2)
        assert phase.sent > 0 and second.recv(65536)
        first.settimeout(5)
        rest = b""
        while chunk := first.recv(65536):  # closed by the server: EOF after what it had
            rest += chunk
        assert rest.count(b"\n") <= 2000 * 0.2 + 1
    finally:
        server.close()
        first.close()


def test_serving_the_newest_waits_a_bounded_time() -> None:
    server = LineServer()
    c = _client(server)
    try:
        assert server.connected.wait(5)
        with pytest.raises(TimeoutError, match="reconnected"):
            server.serve_newest(0.3)
    finally:
        server.close()
        c.close()


def test_lines_have_the_words_asked_for_and_the_default_pool_is_unchanged() -> None:
    default = lines_pool()
    assert len(default) == 5000 and all(len(line.split()) == 12 for line in default)
    assert 90 <= sum(map(len, default)) / len(default) <= 100
    big = lines_pool(1250)
    assert all(len(line.split()) == 1250 and line.endswith(b"\n") for line in big)
    assert 9_000 <= len(big[0]) <= 11_000


def test_big_lines_are_sent_whole_in_bounded_chunks() -> None:
    server = LineServer(words_per_line=1250)
    c = _client(server)
    try:
        assert server.connected.wait(5)
        phase = Phase(500.0)
        server.run_phase(phase, 0.3)
        got = b""
        c.settimeout(2)
        while got.count(b"\n") < phase.sent:
            got += c.recv(1 << 20)
        assert all(len(line.split()) == 1250 for line in got.splitlines())
    finally:
        server.close()
        c.close()


def test_fresh_lines_lead_with_the_fresh_word_and_a_phase_stops_when_told() -> None:
    assert all(not line.startswith(FRESH_WORD.encode()) for line in lines_pool())
    fresh = lines_pool(lead=FRESH_WORD)
    assert all(line.split()[0] == FRESH_WORD.encode() and len(line.split()) == 12
               for line in fresh)
    server = LineServer()
    c = _client(server)
    try:
        assert server.connected.wait(5)
        server.serve_fresh()
        stop = threading.Event()
        stop.set()
        phase = Phase(2000.0)
        server.run_phase(phase, 30.0, stop=stop)  # returns at once: told to stop
        assert phase.sent == 0
        phase = Phase(2000.0)
        server.run_phase(phase, 0.2)
        got = b""
        while got.count(b"\n") < phase.sent:
            got += c.recv(65536)
        assert got.splitlines() and all(line.startswith(b"fresh ") for line in got.splitlines())
    finally:
        server.close()
        c.close()
