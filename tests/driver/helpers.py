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
