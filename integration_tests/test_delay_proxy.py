"""The delay proxy the network-fault lab puts in front of its broker: bytes pass
unchanged and in order, at once without a control file, held as the control file
says with one (both directions), and it ends with its process."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration_tests.delay_proxy import LOSS_HOLD_MS, Impairment, read_control
from walstream import procs

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(60)


def _echo_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    srv, upstream = _echo_server()
    port = procs.free_port("127.0.0.1")
    control = tmp_path / "control.json"
    proxy = subprocess.Popen([sys.executable, "-m", "integration_tests.delay_proxy",
                              f"127.0.0.1:{port}", f"127.0.0.1:{upstream}", str(control)],
                             cwd=ROOT)
    try:
        assert procs.wait_port("127.0.0.1", port, 20.0)
        yield port, control
    finally:
        proxy.kill()
        proxy.wait(10)
        srv.close()


def _round_trip(sock: socket.socket, payload: bytes) -> tuple[bytes, float]:
    started = time.monotonic()
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        got += sock.recv(65536)
    return got, time.monotonic() - started


def test_bytes_pass_at_once_then_held_each_way_then_at_once_again(
        proxied: tuple[int, Path]) -> None:
    port, control = proxied
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        got, took = _round_trip(c, b"ping")
        assert got == b"ping" and took < 0.15
        control.write_text(json.dumps({"delay_ms": 200, "jitter_ms": 0, "loss_pct": 0}))
        time.sleep(1.0)  # read again within CONTROL_POLL_S
        got, took = _round_trip(c, b"slow")
        assert got == b"slow" and 0.4 <= took < 1.0  # 200 ms there and 200 ms back
        control.unlink()
        time.sleep(1.0)
        got, took = _round_trip(c, b"fast")
        assert got == b"fast" and took < 0.15


def test_jitter_never_reorders_bytes(proxied: tuple[int, Path]) -> None:
    port, control = proxied
    control.write_text(json.dumps({"delay_ms": 30, "jitter_ms": 30, "loss_pct": 20}))
    time.sleep(1.0)
    rnd = random.Random(3)
    payload = b"".join(f"{i:06d}|".encode() * rnd.randint(1, 50) for i in range(300))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        sender = threading.Thread(target=c.sendall, args=(payload,))
        sender.start()
        got = b""
        while len(got) < len(payload):
            got += c.recv(65536)
        sender.join()
    assert got == payload


def test_the_control_file_is_read_leniently() -> None:
    assert read_control(Path("/nonexistent/control.json")) == Impairment()
    rnd = random.Random(1)
    assert Impairment(200, 0, 0).hold_s(rnd) == pytest.approx(0.2)
    assert Impairment(200, 0, 100).hold_s(rnd) == pytest.approx(0.2 + LOSS_HOLD_MS / 1000)
    holds = [Impairment(200, 50, 0).hold_s(rnd) for _ in range(200)]
    assert 0.15 <= min(holds) < 0.17 and 0.23 < max(holds) <= 0.25


def test_a_malformed_control_file_means_no_impairment(tmp_path: Path) -> None:
    path = tmp_path / "control.json"
    path.write_text("{not json")
    assert read_control(path) == Impairment()
    path.write_text("[1, 2]")
    assert read_control(path) == Impairment()
