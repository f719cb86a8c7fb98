"""The driver's status server: ``/metrics``, ``/api/status`` and ``/`` on one port.

``spark.walstream.ui.port`` (default 0: a free port; -1: no server) and
``spark.walstream.ui.host`` (default: the receiver endpoint's bind address rule
of :mod:`driver.endpoint_conf`, so loopback under ``local[...]``). The server is
the standard library's, on a daemon thread, and bounded: at most
:data:`MAX_CONCURRENT` requests are served at once (more are answered 503
straight away) and a client that sends nothing is dropped after
:data:`REQUEST_TIMEOUT_S`. Nothing it serves loads anything from elsewhere.

While it runs, a small state file (``status.json``: the URL, the pid, the app
id) tells ``walstream status`` where to look: in the local checkpoint directory
when checkpointing is on, else in ``$WALSTREAM_HOME``; it is removed on stop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from driver.endpoint_conf import endpoint_addresses, host_port
from driver.metrics import EngineMetrics
from driver.status_page import PAGE_HTML
from walstream.errors import ConfigError
from walstream.status_view import STATE_FILE

log = logging.getLogger(__name__)

PORT_KEY = "spark.walstream.ui.port"
HOST_KEY = "spark.walstream.ui.host"
MAX_CONCURRENT = 8
REQUEST_TIMEOUT_S = 10.0


def ui_address(conf: Mapping[str, str]) -> tuple[str, int] | None:
    """(host, port) the status server binds as ``conf`` sets them; None when off."""
    raw = str(conf.get(PORT_KEY, "0")).strip()
    try:
        port = int(raw)
    except ValueError:
        raise ConfigError(f"{PORT_KEY} must be a port number or -1, not {raw!r}") from None
    if port == -1:
        return None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{PORT_KEY} must be in [0, 65535] or -1, not {port}")
    host = conf.get(HOST_KEY) or endpoint_addresses(conf).bind_host
    return host, port


def state_file_dir(checkpoint_dir: str | None, home: str) -> str:
    """Where ``status.json`` goes: a local checkpoint directory, else ``home``."""
    if checkpoint_dir and "://" not in checkpoint_dir:
        return os.path.abspath(checkpoint_dir)
    if checkpoint_dir and checkpoint_dir.startswith("file://"):
        return checkpoint_dir[len("file://"):]
    return home


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Bounded: requests beyond MAX_CONCURRENT get a 503 without a thread of their own.
    request_queue_size = 16

    def __init__(self, addr: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 status: StatusServer) -> None:
        self.status = status
        self.slots = threading.BoundedSemaphore(MAX_CONCURRENT)
        if ":" in addr[0]:
            self.address_family = socket.AF_INET6
        super().__init__(addr, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = REQUEST_TIMEOUT_S
    protocol_version = "HTTP/1.0"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        status = self.server.status
        try:
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(status.metrics.registry))
            elif path == "/api/status":
                body = json.dumps(status.snapshot(), sort_keys=True).encode()
                self._send(200, "application/json", body)
            elif path in ("/", "/index.html"):
                self._send(200, "text/html; charset=utf-8", PAGE_HTML.encode())
            else:
                self._send(404, "text/plain", b"not found\n")
        except Exception as exc:  # a broken figure must not kill the server
            log.exception("status server: %s failed", path)
            self._send(500, "text/plain", f"{type(exc).__name__}\n".encode())

    def _send(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("status server: " + format, *args)


class StatusServer:
    """Serves ``metrics`` (and ``extra()``, merged into ``/api/status``) on
    ``host:port`` from :meth:`start` until :meth:`stop`."""

    def __init__(self, metrics: EngineMetrics, host: str, port: int,
                 extra: Callable[[], dict[str, Any]] | None = None,
                 state_dir: str | None = None) -> None:
        self.metrics = metrics
        self.host, self.port = host, port
        self._extra = extra
        self._state_dir = state_dir
        self._state_path: str | None = None
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def snapshot(self) -> dict[str, Any]:
        out = self.metrics.snapshot()
        if self._extra is not None:
            out.update(self._extra())
        out["url"] = self.url
        return out

    def start(self) -> str:
        """Bind, serve on a daemon thread, write the state file; returns the URL."""
        try:
            httpd = self._httpd = _Server((self.host, self.port), _Handler, self)
        except OSError as exc:
            raise OSError(f"status server cannot bind {host_port(self.host, self.port)} "
                          f"({PORT_KEY}, {HOST_KEY}): {exc.strerror or exc}") from None
        port = httpd.server_address[1]
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        self.url = f"http://{host_port(shown, port)}/"
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="status-server", daemon=True)
        self._thread.start()
        self._write_state()
        return self.url

    def _write_state(self) -> None:
        if not self._state_dir:
            return
        path = os.path.join(self._state_dir, STATE_FILE)
        try:
            os.makedirs(self._state_dir, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            # Private like the checkpoint files beside it, and never through a symlink.
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with open(fd, "w") as f:
                json.dump({"url": self.url, "pid": os.getpid(),
                           "app_id": self.metrics.app_id}, f)
            os.replace(tmp, path)
            self._state_path = path
        except OSError as exc:
            log.warning("status server: cannot write %s: %s", path, exc)

    def stop(self) -> None:
        if self._state_path is not None:
            try:
                with open(self._state_path) as f:
                    mine = json.load(f).get("pid") == os.getpid()
                if mine:  # another driver may have taken the file over since
                    os.remove(self._state_path)
            except (OSError, ValueError):
                pass
            self._state_path = None
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)


def serve_status(metrics: EngineMetrics, host: str, port: int,
                 extra: Callable[[], dict[str, Any]] | None = None,
                 state_dir: str | None = None) -> StatusServer | None:
    """A started :class:`StatusServer`, its URL logged; None when it cannot bind
    (logged: the pipeline runs on without the page)."""
    server = StatusServer(metrics, host, port, extra=extra, state_dir=state_dir)
    try:
        url = server.start()
    except OSError as exc:
        log.error("%s; running without the status page", exc)
        return None
    log.info("walstream status page of %s: %s (metrics: %smetrics)", metrics.app_id, url, url)
    return server
