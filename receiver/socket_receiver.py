"""SocketTextReceiver: lines of text from a TCP server (``socketTextStream``).

Connects, stores each line (``str``, newline stripped) through the block
generator, and reconnects with exponential backoff (``initial_backoff_s``
doubling up to ``max_backoff_s``) when the connection fails or the server closes
it, at most ``max_reconnects`` times in a row before the receiver stops with
the error. A socket has no positions to replay from: what the receiver stored is
durable in the WAL, what the server sent into a dead connection is gone, as in
Spark.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from typing import Any

from receiver.errors import BlockGeneratorStoppedError, ReceiverError
from receiver.receiver import Receiver

log = logging.getLogger(__name__)


class SocketTextReceiver(Receiver):
    def __init__(
        self,
        host: str,
        port: int,
        encoding: str = "utf-8",
        initial_backoff_s: float = 0.1,
        max_backoff_s: float = 5.0,
        max_reconnects: int = 1000,
        connect_timeout_s: float = 10.0,
    ) -> None:
        super().__init__()
        self.host = host
        self.port = port
        self.encoding = encoding
        self.initial_backoff_s = initial_backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_reconnects = max_reconnects
        self.connect_timeout_s = connect_timeout_s
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self.connections = 0

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.update(_thread=None, _sock=None)
        return state

    def onStart(self) -> None:
        self._thread = threading.Thread(target=self._receive, name="socket-receiver", daemon=True)
        self._thread.start()

    def onStop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._thread = None

    def _receive(self) -> None:
        stopped = self.stopped_event()
        failures = 0
        backoff = self.initial_backoff_s
        while not stopped.is_set():
            try:
                with socket.create_connection((self.host, self.port),
                                              timeout=self.connect_timeout_s) as sock:
                    sock.settimeout(0.5)
                    self._sock = sock
                    self.connections += 1
                    failures, backoff = 0, self.initial_backoff_s
                    self._read_lines(sock, stopped)
                reason = "the server closed the connection"
            except BlockGeneratorStoppedError:
                return
            except OSError as exc:
                reason = f"connection to {self.host}:{self.port} failed: {exc}"
            if stopped.is_set():
                return
            failures += 1
            if failures > self.max_reconnects:
                err = ReceiverError(f"gave up after {self.max_reconnects} reconnects: {reason}")
                self.stop(str(err))
                return
            log.info("socket receiver: %s; reconnecting in %.1fs", reason, backoff)
            if stopped.wait(backoff):
                return
            backoff = min(self.max_backoff_s, backoff * 2)

    def _read_lines(self, sock: socket.socket, stopped: threading.Event) -> None:
        buf = b""
        while not stopped.is_set():
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                if buf:
                    self.store(buf.decode(self.encoding, "replace"))
                return
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                self.store(line.rstrip(b"\r").decode(self.encoding, "replace"))
