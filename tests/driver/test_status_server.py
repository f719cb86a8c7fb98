"""The status server without Spark: its conf, its routes, its state file, its bound."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from driver.metrics import EngineMetrics
from driver.status_server import (
    HOST_KEY,
    MAX_CONCURRENT,
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


def test_requests_beyond_the_bound_are_refused_at_once() -> None:
    server = StatusServer(EngineMetrics("app"), "127.0.0.1", 0)
    url = server.start()
    port = int(url.rsplit(":", 1)[1].strip("/"))
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_CONCURRENT)]
    try:
        # Each idle connection holds a slot (its handler waits for a request line).
        wait_until(lambda: _get(url + "metrics")[0] == 503, 10, "a 503 past the bound")
    finally:
        for s in idle:
            s.close()
    try:
        wait_until(lambda: _get(url + "metrics")[0] == 200, 10, "served again")
    finally:
        server.stop()


def test_a_port_in_use_leaves_the_pipeline_without_the_page(
        caplog: pytest.LogCaptureFixture) -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        with caplog.at_level("ERROR", logger="driver.status_server"):
            assert serve_status(EngineMetrics("app"), "127.0.0.1", port) is None
        assert f"cannot bind 127.0.0.1:{port}" in caplog.text
        assert "running without the status page" in caplog.text
    finally:
        taken.close()
