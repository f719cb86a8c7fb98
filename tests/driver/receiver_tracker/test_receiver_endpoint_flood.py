"""No peer without the application's secret can hold what the receivers need: 500
header-only streams to every method, 500 connections that never speak and 200
that send garbage leave registration and AddBlock answered at once."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.driver_client import DriverClient
from walstream.rpc import messages as m
from walstream.testing import MemoryWAL
from walstream.wal import RecordHandle

pytestmark = pytest.mark.timeout(120)
METHODS = ("RegisterReceiver", "AddBlock", "Report", "Control")


def _info(i: int) -> ReceivedBlockInfo:
    return ReceivedBlockInfo(0, f"input-0-{i}", 10, RecordHandle("receiver-wal", 0, i),
                             (SourceRange("src", 0, i * 10, i * 10 + 10),))


def _never(stop: threading.Event) -> Iterator[bytes]:
    """A request stream that sends headers and then nothing until ``stop``."""
    stop.wait()
    return
    yield b""  # a generator


@pytest.fixture
def endpoint(grpc_endpoint: tuple[ReceiverTracker, MemoryWAL]
             ) -> tuple[ReceiverTracker, MemoryWAL]:
    return grpc_endpoint


def test_header_only_streams_idle_and_garbage_connections_starve_no_receiver(
        endpoint: tuple[ReceiverTracker, MemoryWAL]) -> None:
    tracker, wal = endpoint
    host, port = tracker.address.rsplit(":", 1)
    stop = threading.Event()
    channel = grpc.insecure_channel(tracker.address)
    calls: list[Any] = []
    idle: list[socket.socket] = []
    try:
        for i in range(500):  # no token: each is refused, none may hold a slot
            method = METHODS[i % len(METHODS)]
            stream = channel.stream_unary(f"/{m.SERVICE}/{method}")
            calls.append(stream.future(_never(stop)))
        for i in range(700):
            s = socket.create_connection((host, int(port)))
            if i >= 500:
                s.sendall(b"\x00garbage that is no HTTP/2 preface\r\n\r\n")
            idle.append(s)
        time.sleep(1.0)  # let the server take them all in
        client = DriverClient(tracker.address, timeout_s=5)
        try:
            started = time.monotonic()
            assert client.register_receiver(0, "h", "e").accepted
            for i in range(20):
                assert client.add_block(_info(i))
            took = time.monotonic() - started
        finally:
            client.close()
        assert took < 5.0, took
        assert wal.writes == 20
        refused = [c for c in calls if c.done() and c.code() is grpc.StatusCode.UNAUTHENTICATED]
        assert len(refused) == len(calls), (
            f"{len(refused)} of {len(calls)} header-only streams refused at once")
    finally:
        stop.set()
        for c in calls:
            c.cancel()
        channel.close()
        for s in idle:
            s.close()
