"""A peer without the application's secret that tries to starve a port: connections
that never speak, connections that send a request a byte at a time, garbage, and
(on the receiver endpoint) HTTP/2 streams that send their headers and nothing else.

Every socket and call it opens is closed by :meth:`Adversary.close`; a dribbling
thread sends one byte per connection about every second until then.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

#: The receiver endpoint's methods (walstream/rpc/messages.py).
ENDPOINT_METHODS = ("RegisterReceiver", "AddBlock", "Report", "Control")


class Adversary:
    """Opens what it is asked to against ``host:port`` pairs and holds it."""

    def __init__(self) -> None:
        self._sockets: list[socket.socket] = []
        self._dribblers: list[socket.socket] = []
        self._calls: list[Any] = []
        self._channels: list[Any] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def idle(self, host: str, port: int, n: int) -> None:
        """``n`` connections that never send a byte."""
        self.garbage(host, port, n, b"")

    def garbage(self, host: str, port: int, n: int, payload: bytes) -> None:
        """``n`` connections that send ``payload`` (no valid request) and stay open."""
        self._sockets += self._open(host, port, n, payload)

    @staticmethod
    def _open(host: str, port: int, n: int, payload: bytes) -> list[socket.socket]:
        opened = []
        for _ in range(n):
            s = socket.create_connection((host, port), timeout=10)
            if payload:
                with contextlib.suppress(OSError):
                    s.sendall(payload)
            opened.append(s)
        return opened

    def dribble(self, host: str, port: int, n: int, start: bytes) -> None:
        """``n`` connections that send ``start`` and then one more byte each second."""
        self._dribblers += self._open(host, port, n, start)
        if self._thread is None:
            self._thread = threading.Thread(target=self._dribble, daemon=True,
                                            name="adversary-dribble")
            self._thread.start()

    def header_only_streams(self, address: str, n: int, service: str) -> None:
        """``n`` gRPC streams to ``service``'s methods, without credentials, that send
        their headers and then nothing until :meth:`close`."""
        import grpc

        channel = grpc.insecure_channel(address)
        self._channels.append(channel)
        for i in range(n):
            method = ENDPOINT_METHODS[i % len(ENDPOINT_METHODS)]
            stream = channel.stream_unary(f"/{service}/{method}")
            self._calls.append(stream.future(self._never()))

    def refused_streams(self) -> tuple[int, int]:
        """``(answered, opened)``: how many header-only streams were answered already."""
        return sum(1 for c in self._calls if c.done()), len(self._calls)

    def _never(self) -> Iterator[bytes]:
        self._stop.wait()
        return
        yield b""  # a generator

    def _dribble(self) -> None:
        while not self._stop.wait(1.0):
            for s in list(self._dribblers):
                with contextlib.suppress(OSError):
                    s.sendall(b"x")

    def close(self) -> None:
        self._stop.set()
        for call in self._calls:
            call.cancel()
        for channel in self._channels:
            channel.close()
        for s in self._sockets + self._dribblers:
            with contextlib.suppress(OSError):
                s.close()
        if self._thread is not None:
            self._thread.join(5)
