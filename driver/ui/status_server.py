"""The driver's status server: ``/metrics``, ``/api/status`` and ``/`` on one port.

``spark.walstream.ui.port`` (default 0: a free port; -1: no server) and
``spark.walstream.ui.host`` (default: the receiver endpoint's bind address rule
of :mod:`walstream.driver.receiver_tracker.endpoint_conf`, so loopback under
``local[...]``). The server is
:class:`walstream.bounded_http.BoundedHttpServer` with :data:`LIMITS`: a peer that
opens connections and never speaks, or dribbles its request, costs no thread and
is closed at the request deadline or when a newer connection needs the room, so
a scrape is answered whatever else holds the port. Nothing it serves loads
anything from elsewhere.

While it runs, a small state file (``status.json``: the URL, the pid, the app
id) tells ``walstream status`` where to look: in the local checkpoint directory
when checkpointing is on, else in ``$WALSTREAM_HOME``; it is removed on stop.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from walstream.bounded_http import BoundedHttpServer, Limits, Request, Response
from walstream.driver.receiver_tracker.endpoint_conf import endpoint_addresses, host_port
from walstream.driver.ui.metrics import EngineMetrics
from walstream.driver.ui.status_page import PAGE_HTML
from walstream.errors import ConfigError
from walstream.status_view import STATE_FILE

log = logging.getLogger(__name__)

PORT_KEY = "spark.walstream.ui.port"
HOST_KEY = "spark.walstream.ui.host"
#: No peer can starve the page (walstream/bounded_http.py): connections cost no
#: thread, a request must arrive whole within 5 s, two workers answer (a scrape is
#: a few milliseconds) and each answer is bounded in time.
LIMITS = Limits(max_connections=512, request_deadline_s=5.0, max_body_bytes=0, workers=2,
                max_queued=32, handler_deadline_s=10.0, write_deadline_s=10.0)


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


def _serve(status: StatusServer, request: Request) -> Response:
    if request.method not in ("GET", "HEAD"):
        return Response(405, body=b"GET only\n")
    path = request.path.split("?", 1)[0]
    headers = {"Cache-Control": "no-store"}
    if path == "/metrics":
        return Response(200, CONTENT_TYPE_LATEST, generate_latest(status.metrics.registry),
                        headers)
    if path == "/api/status":
        body = json.dumps(status.snapshot(), sort_keys=True).encode()
        return Response(200, "application/json", body, headers)
    if path in ("/", "/index.html"):
        return Response(200, "text/html; charset=utf-8", PAGE_HTML.encode(), headers)
    return Response(404, body=b"not found\n")


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
        self._httpd: BoundedHttpServer | None = None
        self.url = ""

    def snapshot(self) -> dict[str, Any]:
        out = self.metrics.snapshot()
        if self._extra is not None:
            out.update(self._extra())
        out["url"] = self.url
        return out

    def start(self) -> str:
        """Bind, serve on a daemon thread, write the state file; returns the URL."""
        httpd = BoundedHttpServer(self.host, self.port, lambda r: _serve(self, r),
                                  limits=LIMITS, name="status-server")
        try:
            port = httpd.start()
        except OSError as exc:
            raise OSError(f"status server cannot bind {host_port(self.host, self.port)} "
                          f"({PORT_KEY}, {HOST_KEY}): {exc.strerror or exc}") from None
        self._httpd = httpd
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        self.url = f"http://{host_port(shown, port)}/"
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
            httpd.stop()


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
