"""SocketTextReceiver: lines of text from a TCP server (``socketTextStream``).

Connects, stores each line (``str``, newline stripped) through the block
generator, and reconnects with exponential backoff (``initial_backoff_s``
doubling up to ``max_backoff_s``) when the connection fails or the server closes
it, at most ``max_reconnects`` times in a row before the receiver stops with
the error. A socket has no positions to replay from: what the receiver stored is
durable in the WAL, what the server sent into a dead connection is gone, as in
Spark.

A line longer than ``max_line_bytes`` (default 8 MiB, the supervisor's default
``max_record_bytes``) is never held whole: it is reported as a bad record
(:class:`~walstream.receiver.errors.BadRecordError` naming the limit, under the
supervisor's ``bad_record_policy``: skipped, or the receiver stops) and dropped
up to its newline; the lines before and after it are stored as usual.

The lines of each ``recv`` go to the block generator together, in one block, with
one rate-limiter and lock round (:meth:`Receiver.storeMany` of items already in
their stored encoding). A line that is valid UTF-8 (with ``encoding`` UTF-8) is
stored as its own bytes behind the ``str`` tag, which is byte for byte what
storing the decoded ``str`` gives, without building that ``str``; any other line
is decoded with ``errors="replace"`` and encoded, as before. A reader sees the
same ``str`` either way.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import socket
import threading
from typing import Any

from walstream.errors import ConfigError
from walstream.receiver.errors import BadRecordError, BlockGeneratorStoppedError, ReceiverError
from walstream.receiver.items import STR_TAG, encode_item
from walstream.receiver.receiver import Receiver
from walstream.receiver.text_run import TextRun

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
        max_line_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        super().__init__()
        if max_line_bytes < 1:
            raise ConfigError("max_line_bytes must be >= 1")
        self.max_line_bytes = max_line_bytes
        self.host = host
        self.port = port
        self.encoding = encoding
        try:  # an unknown encoding fails here, not in the receiving thread
            self._codec = codecs.lookup(encoding).name
        except LookupError as exc:
            raise ConfigError(f"unknown encoding {encoding!r}") from exc
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
            except (BlockGeneratorStoppedError, BadRecordError):
                return  # the supervisor is stopping (a bad record under policy "fail")
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
        limit = self.max_line_bytes
        buf = b""
        skipping = False  # inside a line over the limit: drop up to its newline
        while not stopped.is_set():
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                if buf and not skipping:
                    self._store_text(buf)
                return
            buf += chunk
            end = buf.rfind(b"\n")
            if end >= 0:  # complete lines: up to the last newline
                text: bytes | None
                text, buf = buf[:end], buf[end + 1:]
                if skipping:  # the tail of the over-long line, reported already
                    skipping = False
                    first = text.find(b"\n")
                    text = None if first < 0 else text[first + 1:]
                if text is not None:
                    self._store_text(text)
            if len(buf) > limit:
                # Never hold more than the limit (plus one chunk) of a line.
                if not skipping:
                    self._line_too_long(len(buf), complete=False)
                skipping, buf = True, b""

    def _store_text(self, text: bytes) -> None:
        """Store the lines of ``text`` (complete lines joined by newlines) in order, in
        one block. The usual text goes to the generator as one run, never split
        into lines: no line can be over ``max_line_bytes`` when the whole text is
        not, it holds no carriage return to strip, and its bytes are their lines'
        stored form. Any other is split and stored line by line."""
        if (len(text) <= self.max_line_bytes and b"\r" not in text
                and self._is_stored_form(text)):
            self.supervisor.push_many_encoded(TextRun.of_text(STR_TAG, text))
        else:
            self._store_lines(text.split(b"\n"))

    def _store_lines(self, lines: list[bytes]) -> None:
        """Store complete lines (newline removed) in order, in one block; a line over
        ``max_line_bytes`` is reported as a bad record once the lines before it are
        handed to the block generator."""
        limit = self.max_line_bytes
        if any(len(line) > limit for line in lines):
            start = 0
            for i, line in enumerate(lines):
                if len(line) > limit:
                    self._store_encoded(lines[start:i])
                    self._line_too_long(len(line))
                    start = i + 1
            lines = lines[start:]
        self._store_encoded(lines)

    def _store_encoded(self, lines: list[bytes]) -> None:
        if not lines:
            return
        if any(line.endswith(b"\r") for line in lines):
            lines = [line.rstrip(b"\r") for line in lines]
        # Lines come from a split on newlines, so none holds one: stored in their
        # raw form they are always a run.
        text = b"\n".join(lines)
        if self._is_stored_form(text):
            self.supervisor.push_many_encoded(TextRun.of_text(STR_TAG, text))
        else:
            self.supervisor.push_many_encoded(
                [encode_item(line.decode(self.encoding, "replace")) for line in lines])

    def _is_stored_form(self, text: bytes) -> bool:
        """Whether each line's bytes in ``text`` are the UTF-8 of its decoded ``str``:
        ASCII under any ASCII-compatible codec this checks for, or valid UTF-8
        under UTF-8. A newline is ASCII and never inside a multi-byte sequence, so
        the text is valid exactly when each of its lines is."""
        if self._codec not in ("utf-8", "ascii"):
            return False
        if text.isascii():
            return True
        if self._codec == "ascii":
            return False
        try:
            text.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    def _line_too_long(self, size: int, complete: bool = True) -> None:
        what = f"{size} bytes" if complete else f"over {size} bytes so far"
        self.supervisor.report_bad_record(BadRecordError(
            f"socket line of {what} from {self.host}:{self.port} exceeds "
            f"max_line_bytes={self.max_line_bytes}; skipped up to its newline"))
