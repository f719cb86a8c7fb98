"""A gate in front of a broker that lets in only clients carrying a required setting.

The embedded broker cannot require SASL, so the chaos and cluster tests prove that
the application's Kafka settings reach every client another way: a TCP proxy
reads the first request of each connection and admits it only when its header's
``client_id`` (librdkafka's ``client.id`` setting) is the required one; any other
connection is recorded and closed. The broker behind it advertises the gate's
address, so every connection a client makes, including those to the partition
leader, passes through it.

Kafka request header (v1 and v2, every request a librdkafka client sends):
``int32 size, int16 api_key, int16 api_version, int32 correlation_id,
nullable string client_id`` (``int16`` length, -1 for null).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from dataclasses import dataclass, field

_HEADER = struct.Struct(">ihhih")  # size, api_key, api_version, correlation_id, id length
#: A first request larger than this is not a Kafka client's: refuse it.
MAX_FIRST_REQUEST = 1 << 20
#: How long a connection may take to send its first request.
FIRST_REQUEST_TIMEOUT_S = 30.0


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed before the first request was complete")
        data.extend(chunk)
    return bytes(data)


def client_id_of(first_request: bytes) -> str | None:
    """The ``client_id`` of a Kafka request (size prefix included); None if null."""
    _size, _key, _version, _corr, length = _HEADER.unpack_from(first_request)
    if length < 0:
        return None
    start = _HEADER.size
    return first_request[start:start + length].decode("utf-8", "replace")


@dataclass
class KafkaGate:
    """Listens on ``host:port`` (0: a free one) and forwards admitted connections to
    ``upstream`` (``host:port``). ``admitted`` and ``refused`` list client ids."""

    upstream: str
    required_client_id: str
    host: str = "127.0.0.1"
    port: int = 0
    admitted: list[str | None] = field(default_factory=list)
    refused: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server = socket.create_server((self.host, self.port))
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept, name="kafka-gate", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def forget(self) -> None:
        """Clear ``admitted`` and ``refused``: what follows is a new phase."""
        with self._lock:
            self.admitted.clear()
            self.refused.clear()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)

    def _serve(self, conn: socket.socket) -> None:
        self._track(conn)
        try:
            conn.settimeout(FIRST_REQUEST_TIMEOUT_S)
            head = _recv_exactly(conn, _HEADER.size)
            size = struct.unpack_from(">i", head)[0]
            if not _HEADER.size - 4 <= size <= MAX_FIRST_REQUEST:
                raise ConnectionError(f"not a Kafka request (size {size})")
            first = head + _recv_exactly(conn, size + 4 - _HEADER.size)
            conn.settimeout(None)
        except (OSError, ConnectionError):
            self._close(conn)
            return
        client_id = client_id_of(first)
        with self._lock:
            ok = client_id == self.required_client_id
            (self.admitted if ok else self.refused).append(client_id)
        if not ok:
            self._close(conn)
            return
        host, _, port = self.upstream.rpartition(":")
        try:
            up = socket.create_connection((host, int(port)), timeout=10)
        except OSError:
            self._close(conn)
            return
        up.settimeout(None)
        self._track(up)
        up.sendall(first)
        threading.Thread(target=self._pipe, args=(up, conn), daemon=True).start()
        self._pipe(conn, up)

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            self._close(src)
            self._close(dst)

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()

    def close(self) -> None:
        """Stop accepting and cut every open connection."""
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._server.close()
        with self._lock:
            open_sockets = list(self._sockets)
        for sock in open_sockets:
            self._close(sock)
        self._thread.join(5)

    def __enter__(self) -> KafkaGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
