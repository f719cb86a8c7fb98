"""The source service: calls with the token answered, others refused; errors keep
their type across the wire; a reader process's session ends when it dies."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from walstream.structured.errors import OffsetError, ServiceError
from walstream.structured.service import ServiceClient, SourceService
from walstream.testing import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def service() -> Any:
    events: list[tuple[str, bool]] = []

    def latest(body: dict[str, Any]) -> Any:
        if body.get("start") == "bad":
            raise OffsetError("not an offset of ours")
        return {"echo": body["options"]["name"], "start": body.get("start")}

    svc = SourceService({"latest": latest},
                        on_session=lambda n, _session, o: events.append((n, o)))
    svc.events = events  # type: ignore[attr-defined]
    yield svc
    svc.close()


def test_a_call_is_answered_and_its_error_keeps_its_type(service: Any) -> None:
    client = ServiceClient(service.info_file, "src", {"name": "src"})
    try:
        assert client.call("latest", start=3) == {"echo": "src", "start": 3}
        with pytest.raises(OffsetError, match="not an offset of ours"):
            client.call("latest", start="bad")
        with pytest.raises(ServiceError, match="unknown operation"):
            client.call("nope")
    finally:
        client.close()


def test_the_address_file_is_private_and_a_call_without_the_token_is_refused(
    service: Any
) -> None:
    assert Path(service.info_file).stat().st_mode & 0o777 == 0o600
    address = json.loads(Path(service.info_file).read_text())["address"]
    req = urllib.request.Request(f"http://{address}/v1/latest", data=b"{}", method="POST",
                                 headers={"Authorization": "Bearer guessed"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 401  # refused on the loop, before any worker
    body = json.loads(info.value.read())
    assert body["error"] == "ServiceError" and "without its token" in body["message"]


def test_no_service_file_says_to_register(tmp_path: Path) -> None:
    with pytest.raises(ServiceError, match=r"walstream.register\(spark\)"):
        ServiceClient(str(tmp_path / "absent.json"), "src", {})


def test_a_session_ends_when_its_process_is_killed(service: Any) -> None:
    code = ("import sys, time\n"
            "from walstream.structured.service import ServiceClient\n"
            f"c = ServiceClient({service.info_file!r}, 'src', {{}})\n"
            "print('open', flush=True)\n"
            "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "open"
        wait_until(lambda: service.events == [("src", True)], 10, "the session to open")
        proc.kill()  # SIGKILL: no close, no stop call
        wait_until(lambda: service.events == [("src", True), ("src", False)], 10,
                   "the session to end with the process")
    finally:
        proc.kill()
        proc.wait(10)


def test_idle_and_dribbling_peers_and_garbage_hellos_stop_no_call_and_no_session(
        service: Any, caplog: pytest.LogCaptureFixture) -> None:
    """500 connections to each port that never speak or dribble, and hellos that are
    not JSON objects: a real reader still opens its session and its calls are
    answered at once; the garbage is refused with a warning, never a traceback."""
    import socket
    import time

    info = json.loads(Path(service.info_file).read_text())
    http_host, http_port = info["address"].split(":")
    sess_host, sess_port = info["sessions"].split(":")
    hogs = [socket.create_connection((http_host, int(http_port))) for _ in range(250)]
    hogs += [socket.create_connection((sess_host, int(sess_port))) for _ in range(250)]
    try:
        for s in hogs[:100]:
            s.sendall(b"POST /v1/latest HTTP/1.0\r\nContent-Le")  # a request never finished
        for s in hogs[250:350]:
            s.sendall(b'{"tok')  # a hello never finished
        for garbage in (b"[1, 2]\n", b'"a string"\n', b"\xff\xfe\n", b"null\n"):
            with socket.create_connection((sess_host, int(sess_port))) as g:
                g.sendall(garbage)
                g.settimeout(10)
                assert g.recv(16) == b""  # refused and closed
        started = time.monotonic()
        client = ServiceClient(service.info_file, "src", {"name": "src"})
        try:
            assert client.call("latest", start=1) == {"echo": "src", "start": 1}
        finally:
            client.close()
        assert time.monotonic() - started < 2.0
    finally:
        for s in hogs:
            s.close()
    assert "Traceback" not in caplog.text
    assert "bad session(s)" in caplog.text  # one line, however many
