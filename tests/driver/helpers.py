"""Shared by the driver's unit tests: the batch interval and wait bound they use,
and a follower of a receiver's command stream.

Their one wait is :func:`walstream.testing.wait_until` (bounded by ``WAIT_S``).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import grpc

from walstream.testing import WAIT_S

INTERVAL = 100  # ms: the batch interval (and timer period) of these tests

__all__ = ["INTERVAL", "WAIT_S", "CommandFollower"]


class CommandFollower:
    """Follows a Control stream (``DriverClient.control(stream)``) on a thread:
    ``got`` collects its commands but heartbeats, until STOP (kept) ends it."""

    def __init__(self, commands: Any) -> None:
        self.commands = commands
        self.got: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        with contextlib.suppress(grpc.RpcError):  # cancelled when no STOP came
            for cmd in self.commands:
                if cmd["kind"] != "HEARTBEAT":
                    self.got.append(cmd)
                if cmd["kind"] == "STOP":
                    return

    def until_stop(self, timeout_s: float) -> bool:
        """Whether STOP came within ``timeout_s``; if not, the stream is cancelled."""
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            self.commands.cancel()
            return False
        return True


def leaked_forms(secret: bytes | str) -> list[str]:
    """Every form a leak of ``secret`` could take in a log line or a repr: the text
    itself, its bytes' hex (either case), base64 (standard and URL-safe, with and
    without padding), Python's repr of the bytes and their Latin-1 reading."""
    import base64

    raw = secret.encode() if isinstance(secret, str) else secret
    forms = {raw.hex(), raw.hex().upper(), repr(raw)[2:-1], raw.decode("latin-1"),
             base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()}
    forms |= {f.rstrip("=") for f in forms}
    if isinstance(secret, str):
        forms.add(secret)
    return sorted(f for f in forms if len(f) >= 8)


def assert_no_leak(text: str, *secrets: bytes | str) -> None:
    """``text`` holds none of ``secrets`` in any form :func:`leaked_forms` knows."""
    for secret in secrets:
        found = [f for f in leaked_forms(secret) if f in text]
        assert not found, f"a secret leaked, as {found[0]!r}"
