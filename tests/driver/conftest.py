"""Fixtures of the driver's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.driver.generator_harness import Harness
from walstream.driver.receiver_tracker.endpoint import LocalReceiverEndpoint
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.testing import MemoryWAL


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.close()


@pytest.fixture
def grpc_endpoint() -> Iterator[tuple[ReceiverTracker, MemoryWAL]]:
    """A gRPC receiver endpoint for streams 0 and 1 over a memory WAL; stopped after."""
    wal = MemoryWAL()
    blocks = ReceivedBlockTracker([0, 1], wal)
    tracker = ReceiverTracker(blocks, [0, 1])
    yield tracker, wal
    tracker.stop()
    blocks.stop()


@pytest.fixture
def local_endpoint() -> Iterator[tuple[LocalReceiverEndpoint, MemoryWAL]]:
    """An in-process endpoint for stream 0 over a memory WAL, its receiver registered."""
    wal = MemoryWAL()
    tracker = ReceivedBlockTracker([0], wal)
    ep = LocalReceiverEndpoint(tracker, [0])
    assert ep.register_receiver(0, "h", "e").accepted
    yield ep, wal
    tracker.stop()
