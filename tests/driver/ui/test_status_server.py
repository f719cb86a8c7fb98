"""The status server without Spark: its conf, its routes, its state file, its bound."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from walstream.driver.ui.metrics import EngineMetrics
from walstream.driver.ui.status_server import (
    HOST_KEY,
    LIMITS,
    PORT_KEY,
    StatusServer,
    serve_status,
    state_file_dir,
    ui_address,
)
from walstream.errors import ConfigError
from walstream.status_view import STATE_FILE, fetch_status, find_url, format_status
from walstream.testing import wait_until


def test_ui_address_from_conf() -> None:
    assert ui_address({"spark.master": "local[2]"}) == ("127.0.0.1", 0)
    assert ui_address({"spark.master": "local[2]", PORT_KEY: "-1"}) is None
    assert ui_address({"spark.master": "local[2]", PORT_KEY: "4050",
                       HOST_KEY: "0.0.0.0"}) == ("0.0.0.0", 4050)
    assert ui_address({"spark.master": "spark://m:7077",
                       "spark.driver.host": "10.0.0.5"}) == ("10.0.0.5", 0)
    for bad in ("http", "70000", "-2"):
        with pytest.raises(ConfigError, match=PORT_KEY):
            ui_address({PORT_KEY: bad})


def test_state_file_dir() -> None:
    assert state_file_dir("cp", "/home") == os.path.abspath("cp")
    assert state_file_dir("file:///x/cp", "/home") == "/x/cp"
    assert state_file_dir("s3://bucket/cp", "/home") == "/home"
    assert state_file_dir(None, "/home") == "/home"


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError):  # a refusal may reset before its answer is read
        return 0, b""


def test_routes_state_file_and_cli_view(tmp_path: Path) -> None:
    metrics = EngineMetrics("app-1")
    server = StatusServer(metrics, "127.0.0.1", 0, extra=lambda: {"batch_interval_ms": 500},
                          state_dir=str(tmp_path))
    url = server.start()
    try:
        assert url.startswith("http://127.0.0.1:")
        assert json.loads((tmp_path / STATE_FILE).read_text())["pid"] == os.getpid()
        assert (tmp_path / STATE_FILE).stat().st_mode & 0o777 == 0o600
        assert find_url(tmp_path) == url
        code, body = _get(url + "metrics")
        assert code == 200 and b"walstream_batches_completed_total 0.0" in body
        code, body = _get(url + "nothing")
        assert code == 404
        status = fetch_status(url)
        assert status["app_id"] == "app-1" and status["batch_interval_ms"] == 500
        text = format_status(status)
        assert text.startswith("app app-1") and "(none)" in text
    finally:
        server.stop()
    assert not (tmp_path / STATE_FILE).exists()
    with pytest.raises(ConfigError, match="no running driver"):
        find_url(tmp_path)


def test_a_stale_state_file_is_named_as_such(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text(json.dumps({"url": "http://x/", "pid": 2 ** 22 + 1}))
    with pytest.raises(ConfigError, match="not running"):
        find_url(tmp_path)


def test_idle_and_dribbling_peers_cannot_starve_a_scrape() -> None:
    """600 connections that never speak or send a byte at a time (more than the
    server keeps open): every scrape is still answered within a second, and a
    dribbled request is cut at its deadline however often it sends."""
    import time

    server = StatusServer(EngineMetrics("app"), "127.0.0.1", 0)
    url = server.start()
    port = int(url.rsplit(":", 1)[1].strip("/"))
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
    dribblers = [socket.create_connection(("127.0.0.1", port)) for _ in range(300)]
    try:
        for s in dribblers:
            s.sendall(b"GET /metr")
        slowest = 0.0
        for _ in range(10):
            for s in dribblers[:50]:
                with contextlib.suppress(OSError):
                    s.sendall(b"i")  # a byte now and then keeps no thread busy
            started = time.monotonic()
            status, body = _get(url + "metrics")
            slowest = max(slowest, time.monotonic() - started)
            assert status == 200 and b"walstream" in body
        assert slowest < 1.0, slowest
        # The dribblers' requests never completed: each is closed by its deadline.
        wait_until(lambda: _closed(dribblers[-1]), LIMITS.request_deadline_s + 5,
                   "a dribbled request to be cut at its deadline")
    finally:
        for s in idle + dribblers:
            s.close()
        server.stop()


def _closed(s: socket.socket) -> bool:
    """Whether the server closed ``s`` (its answer read, then end of stream)."""
    s.settimeout(0.05)
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return True
    except (TimeoutError, BlockingIOError):
        return False
    except OSError:
        return True


def test_a_port_in_use_leaves_the_pipeline_without_the_page(
        caplog: pytest.LogCaptureFixture) -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        with caplog.at_level("ERROR", logger="walstream.driver.ui.status_server"):
            assert serve_status(EngineMetrics("app"), "127.0.0.1", port) is None
        assert f"cannot bind 127.0.0.1:{port}" in caplog.text
        assert "running without the status page" in caplog.text
    finally:
        taken.close()
