"""A driver that is not certain to lead refuses block reports, retriably, before and
after logging them: a receiver then keeps its source unacknowledged, so the data
reaches the next leader instead of being logged past its cut and acknowledged."""

from __future__ import annotations

import pytest

from walstream.driver.errors import NotLeaderError
from walstream.driver.ha.errors import LeaseLostError, LeaseReleasedError
from walstream.driver.receiver_tracker.endpoint import LocalReceiverEndpoint
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.driver_client import DriverClient
from walstream.testing import MemoryWAL
from walstream.wal import RecordHandle

pytestmark = pytest.mark.timeout(60)


def _info(i: int = 0) -> ReceivedBlockInfo:
    return ReceivedBlockInfo(0, f"input-0-{i}", 10, RecordHandle("receiver-wal", 0, i),
                             (SourceRange("src", 0, i * 10, i * 10 + 10),))


class Lease:
    """A lease check that raises once ``lost`` after ``held_checks`` checks pass."""

    def __init__(self, held_checks: int = 10**9) -> None:
        self.checks = 0
        self.held_checks = held_checks

    def __call__(self) -> None:
        self.checks += 1
        if self.checks > self.held_checks:
            raise LeaseLostError("no renewal confirmed in time")


@pytest.fixture
def endpoint(local_endpoint: tuple[LocalReceiverEndpoint, MemoryWAL]
             ) -> tuple[LocalReceiverEndpoint, MemoryWAL]:
    return local_endpoint


def test_a_driver_that_leads_takes_blocks(
        endpoint: tuple[LocalReceiverEndpoint, MemoryWAL]) -> None:
    ep, wal = endpoint
    lease = Lease()
    ep.leadership = lease
    assert ep.add_block(_info())
    assert wal.writes == 1 and lease.checks == 2  # before and after logging


def test_a_released_lease_refuses_a_block_before_logging_it(
        endpoint: tuple[LocalReceiverEndpoint, MemoryWAL]) -> None:
    ep, wal = endpoint

    def released() -> None:
        raise LeaseReleasedError("high availability: the lease was released")

    ep.leadership = released
    with pytest.raises(NotLeaderError, match="not certain to lead"):
        ep.add_block(_info())
    assert wal.writes == 0 and ep.tracker.get_unallocated_blocks(0) == []


def test_a_lease_run_out_while_logging_refuses_the_logged_block(
        endpoint: tuple[LocalReceiverEndpoint, MemoryWAL]) -> None:
    """Logged, but the lease ran out before the answer: the record may lie past a new
    leader's cut, so the receiver must not acknowledge its source."""
    ep, wal = endpoint
    ep.leadership = Lease(held_checks=1)
    with pytest.raises(NotLeaderError, match="after logging"):
        ep.add_block(_info())
    assert wal.writes == 1


def test_over_grpc_a_refusal_is_a_signed_retriable_no() -> None:
    wal = MemoryWAL()
    blocks = ReceivedBlockTracker([0], wal)
    tracker = ReceiverTracker(blocks, [0])
    client = DriverClient(tracker.address, timeout_s=20)
    try:
        assert client.register_receiver(0, "h", "e").accepted
        lease = Lease(held_checks=2)
        tracker.leadership = lease
        assert client.add_block(_info(0))
        assert not client.add_block(_info(1))  # refused: the receiver keeps its source
        assert lease.checks == 3 and wal.writes == 1
        tracker.leadership = None  # leading again (a driver without HA): accepted
        assert client.add_block(_info(1))
    finally:
        client.close()
        tracker.stop()
        blocks.stop()
