"""Shared by the driver's unit tests: the batch interval and wait bound they use.

Their one wait is :func:`walstream.testing.wait_until` (bounded by ``WAIT_S``).
"""

from __future__ import annotations

from walstream.testing import WAIT_S

INTERVAL = 100  # ms: the batch interval (and timer period) of these tests

__all__ = ["INTERVAL", "WAIT_S"]
