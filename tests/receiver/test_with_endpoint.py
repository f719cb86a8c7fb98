"""The supervisor against the driver's real in-process endpoint and tracker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.receiver.doubles import ScriptReceiver, src, store_each
from walstream.driver.receiver_tracker.endpoint import LocalReceiverEndpoint
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver.block_generator import BlockGeneratorConfig
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.errors import ReceiverRefusedError
from walstream.receiver.supervisor import ReceiverSupervisor
from walstream.receiver.supervisor_config import SupervisorConfig
from walstream.testing import MemoryWAL, wait_until

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def driver() -> Iterator[tuple[ReceivedBlockTracker, LocalReceiverEndpoint]]:
    driver_wal = MemoryWAL()
    tracker = ReceivedBlockTracker([7], driver_wal)
    yield tracker, LocalReceiverEndpoint(tracker, [7])
    driver_wal.close()


def items_of(wal: MemoryWAL, infos: list[ReceivedBlockInfo]) -> list[object]:
    from walstream.receiver.block import Block
    from walstream.receiver.items import decode_item

    return [decode_item(r) for i in infos for r in Block.decode(wal.read(i.handle)).records]


def test_blocks_reach_the_tracker(
    driver: tuple[ReceivedBlockTracker, LocalReceiverEndpoint], wal: MemoryWAL
) -> None:
    tracker, endpoint = driver
    receiver = ScriptReceiver(store_each(100))
    sup = ReceiverSupervisor(receiver, 7, wal, endpoint, BlockGeneratorConfig(block_interval_ms=10))
    sup.start()
    wait_until(receiver.script_done)
    sup.stop("done", None)
    assert sup.error is None
    assert items_of(wal, tracker.get_unallocated_blocks(7)) == list(range(100))
    assert endpoint.receivers[7].state == "deregistered"


def test_a_second_receiver_for_the_same_stream_is_refused(
    driver: tuple[ReceivedBlockTracker, LocalReceiverEndpoint], wal: MemoryWAL
) -> None:
    _, endpoint = driver
    first = ReceiverSupervisor(ScriptReceiver(), 7, wal, endpoint)
    second = ReceiverSupervisor(ScriptReceiver(), 7, wal, endpoint)
    first.start()
    try:
        with pytest.raises(ReceiverRefusedError, match="already registered"):
            second.start()
        assert endpoint.receivers[7].state == "active"  # the refused one changed nothing
    finally:
        first.stop("done", None)


def test_restart_with_data_in_flight_keeps_the_stream_alive(
    driver: tuple[ReceivedBlockTracker, LocalReceiverEndpoint], wal: MemoryWAL
) -> None:
    """Blocks stored before a restart are reported while the driver still knows the
    receiver (it refuses AddBlock from a deregistered one)."""
    tracker, endpoint = driver

    def script(r: ScriptReceiver) -> None:
        first = r.starts == 1
        for i in range(50) if first else range(50, 100):
            r.store(i, src(i))
        if first:
            r.restart("source hiccup")

    receiver = ScriptReceiver(script)
    sup = ReceiverSupervisor(
        receiver, 7, wal, endpoint,
        BlockGeneratorConfig(block_interval_ms=200),  # the defaults of both configs
        SupervisorConfig(restart_delay_s=0.6, report_backoff_s=0.05),
    )
    sup.start()
    wait_until(lambda: receiver.starts == 2 or sup.stopped.is_set(), what="the restart")
    wait_until(receiver.script_done)
    sup.stop("done", None)
    assert sup.error is None, f"the restart killed the stream: {sup.error!r}"
    assert receiver.starts == 2
    assert items_of(wal, tracker.get_unallocated_blocks(7)) == list(range(100))
