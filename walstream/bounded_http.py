"""A small HTTP/1.0 server that no peer reaching its port can starve.

The standard library's threading server gives every connection a thread before a
byte of its request arrived, and times out each read, not the request: a few
clients sending one byte every few seconds hold every thread, and everyone else
waits. Here:

1. Connections are served by one asyncio loop (:class:`LoopThread`), so an open
   connection costs a socket and a few hundred bytes, not a thread. At most
   ``max_connections`` are open; a new one beyond that closes the oldest
   connection that has not finished sending its request (a slow or idle peer
   never keeps a prompt one out).
2. A request (request line, headers and body) must arrive whole within
   ``request_deadline_s``, in at most ``max_header_bytes`` and
   ``max_body_bytes``; else it is answered 408, 431 or 413 and closed.
3. Only then does ``gate(request)`` run, on the loop (it must be quick: a token
   comparison): a response from it is sent at once, so an unauthenticated peer
   never reaches a worker.
4. The handler runs on one of ``workers`` threads; at most ``max_queued`` complete
   requests wait for one, and beyond that the answer is 503 at once. A handler
   that has not answered within ``handler_deadline_s`` (when set) gets a 503 sent
   for it.
5. The response must be taken by the peer within ``write_deadline_s``; the
   connection is closed after it (HTTP/1.0, no keep-alive).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout", 413: "Payload Too Large",
            431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}


@dataclass(frozen=True)
class Limits:
    """The server's bounds (module doc, steps 1-5)."""

    max_connections: int = 256
    request_deadline_s: float = 5.0
    max_header_bytes: int = 16 * 1024
    max_body_bytes: int = 1 << 20
    workers: int = 4
    max_queued: int = 64
    handler_deadline_s: float | None = None
    write_deadline_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_header_bytes", "workers", "max_queued"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.max_body_bytes < 0 or self.request_deadline_s <= 0 or (
                self.write_deadline_s <= 0):
            raise ValueError("body size and deadlines must be positive")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: Mapping[str, str]  # names lower-cased
    body: bytes
    peer: str


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str = "text/plain"
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[Request], Response]
Gate = Callable[[Request], "Response | None"]


class LoopThread:
    """An asyncio loop on a daemon thread of its own, for servers to share."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 10.0) -> T:
        """Run ``coro`` on the loop and wait for its result (bounded)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.close()


class _Conn:
    __slots__ = ("complete", "writer")

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.complete = False  # its whole request arrived


class BoundedHttpServer:
    """Serves ``handler`` on ``host:port`` (0: any free port) within ``limits``;
    :meth:`start` binds and returns the port, :meth:`stop` closes everything."""

    def __init__(self, host: str, port: int, handler: Handler, *, gate: Gate | None = None,
                 limits: Limits | None = None, name: str = "http",
                 loop: LoopThread | None = None) -> None:
        self.host, self.port = host, port
        self.limits = limits or Limits()
        self.name = name
        self._handler = handler
        self._gate = gate
        self._own_loop = loop is None
        self._loop = loop or LoopThread(f"{name}-loop")
        self._pool = concurrent.futures.ThreadPoolExecutor(self.limits.workers,
                                                           thread_name_prefix=f"{name}-worker")
        self._open: dict[int, _Conn] = {}  # insertion order: oldest first
        self._queued = 0
        self._server: asyncio.base_events.Server | None = None
        self.evicted = 0  # connections closed to make room (step 1)
        self.refused = 0  # requests answered 408/413/431/503 by the bounds

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> int:
        async def bind() -> asyncio.base_events.Server:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            return await asyncio.start_server(
                self._serve, self.host or None, self.port, family=family,
                limit=self.limits.max_header_bytes, reuse_address=True, backlog=128)

        try:
            self._server = self._loop.run(bind())
        except BaseException:
            self._close_loop()
            raise
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    def stop(self) -> None:
        server, self._server = self._server, None

        async def close() -> None:
            if server is not None:
                server.close()
            for conn in list(self._open.values()):
                conn.writer.close()
            self._open.clear()

        with contextlib.suppress(Exception):
            self._loop.run(close(), 5.0)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._close_loop()

    def _close_loop(self) -> None:
        if self._own_loop:
            self._loop.stop()

    # -- one connection ----------------------------------------------------------

    def _admit(self, conn: _Conn) -> bool:
        """Step 1: room for ``conn``, by closing the oldest incomplete connection if
        the server is full; False when every open connection is being answered."""
        if len(self._open) >= self.limits.max_connections:
            oldest = next((k for k, c in self._open.items() if not c.complete), None)
            if oldest is None:
                return False
            self._open.pop(oldest).writer.close()
            self.evicted += 1
        self._open[id(conn)] = conn
        return True

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Conn(writer)
        if not self._admit(conn):
            self.refused += 1
            writer.close()
            return
        try:
            await self._answer(reader, conn)
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass  # the peer left, or was evicted
        except Exception:
            log.exception("%s: a connection failed", self.name)
        finally:
            self._open.pop(id(conn), None)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, conn: _Conn) -> None:
        peer = str(conn.writer.get_extra_info("peername"))
        try:
            request = await asyncio.wait_for(self._read(reader, peer),
                                             self.limits.request_deadline_s)
        except TimeoutError:
            self.refused += 1
            await self._write(conn, Response(408))
            return
        except _RefusedError as refused:
            self.refused += 1
            await self._write(conn, refused.response)
            return
        conn.complete = True
        early = self._gate(request) if self._gate is not None else None
        if early is not None:
            await self._write(conn, early)
            return
        if self._queued >= self.limits.max_queued:
            self.refused += 1
            await self._write(conn, Response(503, body=b"busy\n"))
            return
        self._queued += 1
        try:
            future = asyncio.get_running_loop().run_in_executor(self._pool, self._handle,
                                                                request)
            response = await asyncio.wait_for(future, self.limits.handler_deadline_s)
        except TimeoutError:
            response = Response(503, body=b"no answer in time\n")
        finally:
            self._queued -= 1
        await self._write(conn, response)

    def _handle(self, request: Request) -> Response:
        try:
            return self._handler(request)
        except Exception as exc:  # a failing handler answers 500, the server goes on
            log.exception("%s: %s %s failed", self.name, request.method, request.path[:200])
            return Response(500, body=f"{type(exc).__name__}\n".encode())

    async def _read(self, reader: asyncio.StreamReader, peer: str) -> Request:
        """Step 2: the request line, headers and body, within the limits."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise _RefusedError(Response(431)) from None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            raise _RefusedError(Response(400, body=b"bad request line\n"))
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep:
                raise _RefusedError(Response(400, body=b"bad header\n"))
            headers[name.strip().lower()] = value.strip()
        try:
            size = int(headers.get("content-length", "0"))
        except ValueError:
            raise _RefusedError(Response(400, body=b"bad content-length\n")) from None
        if not 0 <= size <= self.limits.max_body_bytes:
            raise _RefusedError(Response(413))
        body = await reader.readexactly(size) if size else b""
        return Request(parts[0], parts[1], headers, body, peer)

    async def _write(self, conn: _Conn, response: Response) -> None:
        """Step 5: the whole response, taken by the peer within the deadline."""
        reason = _REASONS.get(response.status, "")
        head = [f"HTTP/1.0 {response.status} {reason}",
                f"Content-Type: {response.content_type}",
                f"Content-Length: {len(response.body)}", "Connection: close",
                *(f"{k}: {v}" for k, v in response.headers.items())]
        conn.writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + response.body)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(conn.writer.drain(), self.limits.write_deadline_s)


class _RefusedError(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response

