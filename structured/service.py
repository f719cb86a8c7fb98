"""The source service: the driver-side half of every ``walstream`` source.

Spark runs a Python data source's stream reader (``initialOffset``,
``latestOffset``, ``partitions``, ``commit``) in a Python process of its own,
started by the driver's JVM, with no SparkContext. Receivers need one: they are
Spark jobs. So the engines live in the user's driver process, which
:func:`structured.register` gave a service bound to loopback, and the reader calls
it over HTTP with a bearer token. Address and token are in a file only this user
can read (``0600`` in a ``0700`` directory); the data source class carries the
file's path, never the token, since Spark ships the reader to executors too.

Each call is answered after its effect is durable (an allocation is logged
before its time is returned). A call that fails answers its error's type and
text; the client raises the same :mod:`structured.errors` type.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import secrets
import socket
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from structured import errors
from structured.errors import ServiceError, SourceError
from structured.options import SourceOptions

log = logging.getLogger(__name__)

#: The largest request body the service reads (options and offsets are small).
MAX_BODY_BYTES = 1 << 20
#: How long the reader waits for one call; an engine's first call replays its
#: driver log and launches its receivers.
CALL_TIMEOUT_S = 300.0

Handler = Callable[[dict[str, Any]], Any]


class SourceService:
    """Loopback HTTP endpoint over ``handlers`` (operation name -> function of the
    request's JSON body, answering JSON); :meth:`close` stops it."""

    def __init__(self, handlers: dict[str, Handler],
                 on_session: Callable[[str, str, bool], None] | None = None) -> None:
        """``on_session(name, session, True)``: a reader process opened session
        ``session`` with source ``name``; ``on_session(name, session, False)``: it
        ended (the process exited or was killed; see :class:`ServiceClient`)."""
        self._handlers = dict(handlers)
        self._on_session = on_session
        self.token = secrets.token_urlsafe(32)
        service = self

        class _Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                service._serve(self)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("source service: " + format, *args)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._sessions = socket.create_server(("127.0.0.1", 0))
        self._sessions.settimeout(None)
        self.session_address = f"127.0.0.1:{self._sessions.getsockname()[1]}"
        self._closing = threading.Event()
        threading.Thread(target=self._accept_sessions, name="walstream-source-sessions",
                         daemon=True).start()
        self._dir = tempfile.mkdtemp(prefix="walstream-source-")
        os.chmod(self._dir, 0o700)
        self.info_file = os.path.join(self._dir, "service.json")
        fd = os.open(self.info_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"address": self.address, "sessions": self.session_address,
                       "token": self.token}, f)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="walstream-source-service", daemon=True)
        self._thread.start()

    def _serve(self, req: BaseHTTPRequestHandler) -> None:
        status, body = 200, {}
        try:
            given = req.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
                raise ServiceError("the walstream source service refused a call without "
                                   "its token")
            size = int(req.headers.get("Content-Length", "0"))
            if not 0 <= size <= MAX_BODY_BYTES:
                raise ServiceError(f"request of {size} bytes (at most {MAX_BODY_BYTES})")
            op = req.path.rsplit("/", 1)[-1]
            handler = self._handlers.get(op)
            if handler is None:
                raise ServiceError(f"unknown operation {op!r}")
            body = {"result": handler(json.loads(req.rfile.read(size) or b"{}"))}
        except Exception as exc:
            status = 400 if isinstance(exc, SourceError) else 500
            if status == 500:
                log.exception("walstream source service: %s failed", req.path)
            body = {"error": type(exc).__name__, "message": str(exc)}
        data = json.dumps(body).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    def _accept_sessions(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._sessions.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._hold_session, args=(conn,),
                             name="walstream-source-session", daemon=True).start()

    def _hold_session(self, conn: socket.socket) -> None:
        """A reader process's session: one line ``{"token", "name", "session"}``, then nothing
        until the connection closes, which the kernel does when that process ends,
        however it ends."""
        name, session = None, ""
        with conn:
            try:
                conn.settimeout(10.0)
                line = conn.makefile("rb").readline(MAX_BODY_BYTES)
                hello = json.loads(line)
                if not hmac.compare_digest(str(hello.get("token", "")).encode(),
                                           self.token.encode()):
                    log.warning("walstream source service: a session without its token")
                    return
                name, session = str(hello["name"]), str(hello["session"])
                if self._on_session is not None:
                    self._on_session(name, session, True)
                conn.sendall(b"ok\n")
                conn.settimeout(None)
                while conn.recv(4096):
                    pass
            except (OSError, ValueError, KeyError) as exc:
                if name is None:
                    log.warning("walstream source service: a bad session: %s", exc)
        if name is not None and self._on_session is not None \
                and not self._closing.is_set():
            self._on_session(name, session, False)

    def close(self) -> None:
        self._closing.set()
        self._sessions.close()
        self._server.shutdown()
        self._server.server_close()
        with contextlib.suppress(OSError):
            os.remove(self.info_file)
            os.rmdir(self._dir)


class ServiceClient:
    """The reader's side: one call per stream-reader method."""

    def __init__(self, info_file: str, name: str, options: dict[str, str]) -> None:
        try:
            with open(info_file) as f:
                info = json.load(f)
        except (OSError, ValueError) as exc:
            raise ServiceError(
                f"the walstream source service is not running in this driver ({exc}): call "
                "walstream.register(spark) in the driver before readStream") from exc
        self._url = f"http://{info['address']}/v1/"
        self._token = str(info["token"])
        self._options = dict(options)
        #: This reader's session id, sent with every call: the service tells the
        #: queries reading one source apart by it.
        self.session_id = secrets.token_hex(8)
        self._session = self._open_session(str(info["sessions"]), name)

    def _open_session(self, address: str, name: str) -> socket.socket:
        """The session that ties the source's engine to this process: when the
        process ends (Spark destroys a stopped query's reader process without
        always calling ``stop``), the kernel closes it and the service stops the
        engine."""
        host, _, port = address.rpartition(":")
        try:
            sock = socket.create_connection((host, int(port)), timeout=30.0)
            sock.sendall(json.dumps({"token": self._token, "name": name,
                                     "session": self.session_id}).encode() + b"\n")
            if sock.makefile("rb").readline(16) != b"ok\n":
                raise OSError("the service refused the session")
        except OSError as exc:
            raise ServiceError(f"the walstream source service at {address} refused a "
                               f"session: {exc}") from exc
        return sock

    def close(self) -> None:
        self._session.close()

    def call(self, op: str, **fields: Any) -> Any:
        data = json.dumps({"options": self._options, "session": self.session_id,
                           **fields}).encode()
        req = urllib.request.Request(self._url + op, data=data, method="POST", headers={
            "Authorization": f"Bearer {self._token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=CALL_TIMEOUT_S) as resp:
                return json.loads(resp.read())["result"]
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read())
            except ValueError:
                raise ServiceError(f"source service: HTTP {exc.code} on {op}") from exc
            cls = getattr(errors, str(body.get("error")), None)
            if not (isinstance(cls, type) and issubclass(cls, SourceError)):
                cls = ServiceError
            raise cls(f"{body.get('error')}: {body.get('message')}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ServiceError(f"the walstream source service at {self._url} did not "
                               f"answer {op}: {exc}") from exc


def options_of(body: dict[str, Any]) -> SourceOptions:
    return SourceOptions.parse(body.get("options") or {})
