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
text; the client raises the same :mod:`walstream.structured.errors` type.

No peer that reaches the loopback ports can stop the queries: both are served by
one asyncio loop (walstream/bounded_http.py), so an open connection costs no
thread; a call must arrive whole within its deadline and is refused without its
token before it reaches a worker; a session must say its hello (a JSON object
with the token) within :data:`HELLO_DEADLINE_S`, and at most
:data:`MAX_PENDING_HELLOS` may be waiting, the oldest closed to make room.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import secrets
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from walstream.bounded_http import BoundedHttpServer, Limits, LoopThread, Request, Response
from walstream.safe_text import escape_controls
from walstream.structured import errors
from walstream.structured.errors import ServiceError, SourceError
from walstream.structured.options import SourceOptions

log = logging.getLogger(__name__)

#: The largest request body the service reads (options and offsets are small).
MAX_BODY_BYTES = 1 << 20
#: How long the reader waits for one call; an engine's first call replays its
#: driver log and launches its receivers.
CALL_TIMEOUT_S = 300.0
#: The service's bounds: calls arrive whole within 10 s; eight workers answer (a
#: call may wait on an engine's start), at most 64 wait for one.
LIMITS = Limits(max_connections=512, request_deadline_s=10.0, max_body_bytes=MAX_BODY_BYTES,
                workers=8, max_queued=64, write_deadline_s=30.0)
#: A session's hello must arrive within this; at most this many wait for theirs.
HELLO_DEADLINE_S = 10.0
MAX_PENDING_HELLOS = 64
MAX_HELLO_BYTES = 4096
#: At most one warning about bad sessions per this many seconds.
WARN_EVERY_S = 10.0

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
        self._closing = threading.Event()
        self._loop = LoopThread("walstream-source-service")
        self._server = BoundedHttpServer("127.0.0.1", 0, self._serve, gate=self._gate,
                                         limits=LIMITS, name="walstream-source-service",
                                         loop=self._loop)
        self.address = f"127.0.0.1:{self._server.start()}"
        self._pending: dict[int, asyncio.StreamWriter] = {}  # hellos not said yet
        self._bad_sessions, self._warned_at = 0, -WARN_EVERY_S
        self._sessions = self._loop.run(asyncio.start_server(
            self._hold_session, "127.0.0.1", 0, limit=MAX_HELLO_BYTES))
        self.session_address = f"127.0.0.1:{self._sessions.sockets[0].getsockname()[1]}"
        self._dir = tempfile.mkdtemp(prefix="walstream-source-")
        os.chmod(self._dir, 0o700)
        self.info_file = os.path.join(self._dir, "service.json")
        fd = os.open(self.info_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"address": self.address, "sessions": self.session_address,
                       "token": self.token}, f)

    @staticmethod
    def _answer(status: int, body: dict[str, Any]) -> Response:
        return Response(status, "application/json", json.dumps(body).encode())

    def _gate(self, req: Request) -> Response | None:
        """On the service's loop, before any worker: a call without the token, or not
        a POST, is answered at once."""
        given = req.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            return self._answer(401, {"error": "ServiceError", "message":
                                      "the walstream source service refused a call "
                                      "without its token"})
        if req.method != "POST":
            return self._answer(405, {"error": "ServiceError", "message": "POST only"})
        return None

    def _serve(self, req: Request) -> Response:
        status, body = 200, {}
        try:
            op = req.path.rsplit("/", 1)[-1]
            handler = self._handlers.get(op)
            if handler is None:
                raise ServiceError(f"unknown operation {op[:100]!r}")
            try:
                request = json.loads(req.body or b"{}")
            except ValueError as exc:
                raise ServiceError(f"a request body that is not JSON: {exc}") from None
            if not isinstance(request, dict):
                raise ServiceError("a request body that is not a JSON object")
            body = {"result": handler(request)}
        except Exception as exc:
            status = 400 if isinstance(exc, SourceError) else 500
            if status == 500:
                log.exception("walstream source service: %s failed", req.path[:200])
            body = {"error": type(exc).__name__, "message": str(exc)}
        return self._answer(status, body)

    async def _hold_session(self, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
        """A reader process's session: one line ``{"token", "name", "session"}`` within
        :data:`HELLO_DEADLINE_S`, then nothing until the connection closes, which the
        kernel does when that process ends, however it ends. Costs no thread."""
        name, session = None, ""
        key = id(writer)
        if len(self._pending) >= MAX_PENDING_HELLOS:  # room: close the oldest
            oldest = next(iter(self._pending))
            self._pending.pop(oldest).close()
        self._pending[key] = writer
        try:
            try:
                line = await asyncio.wait_for(reader.readuntil(b"\n"), HELLO_DEADLINE_S)
            finally:
                self._pending.pop(key, None)
            hello = json.loads(line)
            if not isinstance(hello, dict):
                raise ValueError("a hello that is not a JSON object")
            if not hmac.compare_digest(str(hello.get("token", "")).encode(),
                                       self.token.encode()):
                log.warning("walstream source service: a session without its token")
                return
            name, session = str(hello["name"]), str(hello["session"])
            if self._on_session is not None:
                await asyncio.get_running_loop().run_in_executor(
                    None, self._on_session, name, session, True)
            writer.write(b"ok\n")
            await asyncio.wait_for(writer.drain(), HELLO_DEADLINE_S)
            while await reader.read(4096):
                pass
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            if name is None:  # silent, gone, or closed to make room: not news
                log.debug("walstream source service: a session ended before its hello: %r",
                          exc)
        except (ValueError, KeyError, asyncio.LimitOverrunError) as exc:
            if name is None:
                self._warn_bad_session(escape_controls(str(exc))[:300])
        finally:
            writer.close()
        if name is not None and self._on_session is not None \
                and not self._closing.is_set():
            await asyncio.get_running_loop().run_in_executor(
                None, self._on_session, name, session, False)

    def _warn_bad_session(self, why: str) -> None:
        """At most one warning per :data:`WARN_EVERY_S`, with the count since the last,
        so a peer sending garbage cannot flood the driver's log."""
        self._bad_sessions += 1
        now = time.monotonic()
        if now - self._warned_at < WARN_EVERY_S:
            return
        count, self._bad_sessions, self._warned_at = self._bad_sessions, 0, now
        log.warning("walstream source service: %d bad session(s), the last: %s", count, why)

    def close(self) -> None:
        self._closing.set()

        async def close_sessions() -> None:
            self._sessions.close()
            for writer in list(self._pending.values()):
                writer.close()

        with contextlib.suppress(Exception):
            self._loop.run(close_sessions(), 5.0)
        self._server.stop()
        self._loop.stop()
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
