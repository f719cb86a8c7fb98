"""ReceiverTracker over gRPC: registration rules and concurrent AddBlock durability."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from tests.driver.helpers import CommandFollower
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.scheduler.tracker_events import BlockAddition, decode_event
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.driver_client import DriverClient
from walstream.wal import BatchedWriteAheadLog, KafkaWriteAheadLog, RecordHandle
from walstream.wal.base import ForwardingWriteAheadLog, WriteAheadLog


class DurableSet(ForwardingWriteAheadLog):
    """Wraps a log and records which block ids are durable (their write returned)."""

    def __init__(self, wrapped: WriteAheadLog) -> None:
        super().__init__(wrapped)
        self.durable: set[str] = set()
        self._lock = threading.Lock()

    def write(self, record: bytes, time_ms: int) -> RecordHandle:
        handle = super().write(record, time_ms)
        event = decode_event(record)
        if isinstance(event, BlockAddition):
            with self._lock:
                self.durable.add(event.block.block_id)
        return handle


def _info(stream: int, i: int) -> ReceivedBlockInfo:
    return ReceivedBlockInfo(stream, f"input-{stream}-{i}", 10,
                             RecordHandle("receiver-wal", 0, i),
                             (SourceRange("src", stream, i * 10, i * 10 + 10),))


def test_registration_rules() -> None:
    tracker = ReceiverTracker(ReceivedBlockTracker([0, 1], None), [0, 1])
    client = DriverClient(tracker.address, timeout_s=10)
    try:
        assert client.register_receiver(0, "h", "e1").accepted
        dup = client.register_receiver(0, "h", "e2")
        assert not dup.accepted and "already registered" in dup.message
        unknown = client.register_receiver(9, "h", "e3")
        assert not unknown.accepted and "not an input stream" in unknown.message
        # An unregistered (or deregistered) receiver's blocks are refused with a reason.
        assert client.add_block(_info(1, 0)) is False
        client.deregister_receiver(0, "bye", "")
        assert client.add_block(_info(0, 0)) is False
        assert tracker.receivers[0].state == "deregistered"
        again = client.register_receiver(0, "h", "e4")  # a relaunch may register again
        assert again.accepted
    finally:
        client.close()
        tracker.stop()


@pytest.mark.parametrize("receivers", [8])
def test_concurrent_add_block_answers_only_after_durability(
    receivers: int, bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    wal = DurableSet(BatchedWriteAheadLog(KafkaWriteAheadLog(bootstrap, unique_name("drv"))))
    streams = list(range(receivers))
    blocks = ReceivedBlockTracker(streams, wal)
    tracker = ReceiverTracker(blocks, streams)
    violations: list[str] = []
    per_receiver = 60

    def receiver(stream: int) -> None:
        client = DriverClient(tracker.address, timeout_s=30)
        try:
            assert client.register_receiver(stream, "h", f"e{stream}").accepted
            for i in range(per_receiver):
                info = _info(stream, i)
                assert client.add_block(info)
                if info.block_id not in wal.durable:
                    violations.append(f"{info.block_id} answered before it was durable")
                if i % 10 == 0:  # a retried report (lost answer) must not double it
                    assert client.add_block(info)
        finally:
            client.close()

    threads = [threading.Thread(target=receiver, args=(s,)) for s in streams]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert violations == []
        for s in streams:
            assert [b.block_id for b in blocks.get_unallocated_blocks(s)] == [
                f"input-{s}-{i}" for i in range(per_receiver)]
            assert blocks.positions(s) == (SourceRange("src", s, per_receiver * 10,
                                                       per_receiver * 10),)
        replayed = ReceivedBlockTracker(streams, BatchedWriteAheadLog(
            KafkaWriteAheadLog(bootstrap, wal.wrapped.wrapped.name)))  # type: ignore[attr-defined]
        assert replayed.state() == blocks.state()
        replayed.stop()
    finally:
        tracker.stop()
        blocks.cleanup_old_batches(2**42, wait_for_completion=True)
        blocks.stop()


def _commands_until_stop(client: DriverClient, stream: int, timeout_s: float
                         ) -> tuple[list[dict[str, object]], bool]:
    """The commands a Control stream delivers (heartbeats left out) until STOP;
    ``(commands, stopped)``, stopped False when no STOP came within ``timeout_s``."""
    follower = CommandFollower(client.control(stream))
    stopped = follower.until_stop(timeout_s)
    return follower.got, stopped


def test_stop_after_many_rate_updates_and_cleanups_is_delivered() -> None:
    tracker = ReceiverTracker(ReceivedBlockTracker([0], None), [0])
    client = DriverClient(tracker.address, timeout_s=10)
    try:
        assert client.register_receiver(0, "h", "e1").accepted
        # Nobody follows the Control stream yet: every command waits at the driver.
        for i in range(3000):
            tracker.update_rate_limit(0, float(i + 1))
            tracker.cleanup_old_blocks(1000 + i)
        tracker.restart_receiver(0)
        got, stopped = _commands_until_stop(client, 0, timeout_s=5)
        assert stopped, f"no STOP after {len(got)} commands"
        # Coalesced: the highest cleanup threshold, the latest rate, then STOP.
        assert [c["kind"] for c in got] == ["CLEANUP_OLD_BLOCKS", "UPDATE_RATE_LIMIT", "STOP"]
        assert got[0]["thresh_time_ms"] == 1000 + 2999
        assert got[1]["rate_limit"] == 3000.0
        assert "restart" in str(got[2]["message"])
    finally:
        client.close()
        tracker.stop()
