"""A launched stream takes only blocks of its own receiver WAL whose source ranges name
topics its receiver declares; anything else is refused before it is logged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from walstream.driver.errors import ForeignBlockError
from walstream.driver.receiver_tracker.stream_binding import StreamBinding
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.driver_client import DriverClient
from walstream.receiver.errors import EndpointPermissionError
from walstream.receiver.kafka_receiver import KafkaReceiver
from walstream.receiver.rate_receiver import RateGeneratorReceiver
from walstream.receiver.receiver import Receiver
from walstream.receiver.socket_receiver import SocketTextReceiver
from walstream.receiver.source_topics import declared_source_topics
from walstream.receiver.task import ReceiverTaskSpec
from walstream.testing import MemoryWAL
from walstream.wal import RecordHandle
from walstream.wal.segments import marker_topic, segment_topic

pytestmark = pytest.mark.timeout(60)

PREFIX = "walstream.wal."


def _seg(name: str, prefix: str = PREFIX) -> str:
    return segment_topic(prefix, name, 60_000, 120_000)


def _info(topic: str, *sources: str, stream: int = 1, i: int = 0) -> ReceivedBlockInfo:
    return ReceivedBlockInfo(stream, f"input-{stream}-{i}", 1, RecordHandle(topic, 0, i),
                             tuple(SourceRange(t, 0, i, i + 1) for t in sources))


class _Declaring(Receiver):
    def __init__(self, topics: list[str] | None) -> None:
        super().__init__()
        self.topics = topics

    def source_topics(self) -> list[str] | None:
        return self.topics

    def onStart(self) -> None:
        pass

    def onStop(self) -> None:
        pass


class _Silent(_Declaring):
    source_topics = None  # type: ignore[assignment]


@pytest.mark.parametrize(("receiver", "topics"), [
    (KafkaReceiver("b:1", "g", {"clicks": 1, "views": 2}), {"clicks", "views"}),
    (RateGeneratorReceiver(10.0, seed=4), {"generator-4"}),
    (SocketTextReceiver("localhost", 9), set()),
    (_Declaring(["a", "b"]), {"a", "b"}),
    (_Declaring(None), set()),
    (_Silent(["x"]), set()),
], ids=["kafka", "rate", "socket", "declares", "declares-none", "no-method"])
def test_receivers_declare_their_source_topics(receiver: Receiver, topics: set[str]) -> None:
    assert declared_source_topics(receiver) == topics


def test_a_binding_comes_from_the_receivers_spec() -> None:
    spec = ReceiverTaskSpec(3, KafkaReceiver("b:1", "g", {"clicks": 1}), "d:1", "b:1",
                            "app-receiver-3", wal_options={"topic_prefix": "team.wal."})
    assert StreamBinding.of_spec(spec) == StreamBinding(3, "team.wal.", "app-receiver-3",
                                                        frozenset({"clicks"}))
    default = ReceiverTaskSpec(3, SocketTextReceiver("h", 1), "d:1", "b:1", "app-receiver-3")
    assert StreamBinding.of_spec(default).wal_topic_prefix == PREFIX


BINDING = StreamBinding(1, PREFIX, "app-receiver-1", frozenset({"clicks"}))


def test_a_block_of_the_streams_own_wal_and_sources_is_accepted() -> None:
    BINDING.check(_info(_seg("app-receiver-1"), "clicks"))
    BINDING.check(_info(_seg("app-receiver-1")))  # no source ranges


@pytest.mark.parametrize("topic", [
    _seg("app-receiver-2"),  # another stream's WAL
    _seg("app-receiver-10"),  # a stream whose name extends this one's
    _seg("app-driver"),  # the driver's WAL
    _seg("app-receiver-1", prefix="other."),  # another prefix
    marker_topic(PREFIX, "app-receiver-1", 60_000),  # the WAL's clean marker
    "app-receiver-1",
    PREFIX + "app-receiver-1--0000000060000",
], ids=["other-stream", "longer-name", "driver", "other-prefix", "marker", "bare", "no-end"])
def test_a_handle_outside_the_streams_wal_is_refused(topic: str) -> None:
    with pytest.raises(ForeignBlockError, match="not a segment of the stream's receiver WAL"):
        BINDING.check(_info(topic, "clicks"))


def test_a_source_range_of_an_undeclared_topic_is_refused() -> None:
    with pytest.raises(ForeignBlockError, match=r"'views'.*declares: clicks"):
        BINDING.check(_info(_seg("app-receiver-1"), "clicks", "views"))
    silent = StreamBinding(1, PREFIX, "app-receiver-1")
    with pytest.raises(ForeignBlockError, match=r"declares: none.*source_topics"):
        silent.check(_info(_seg("app-receiver-1"), "clicks"))
    silent.check(_info(_seg("app-receiver-1")))


def test_a_block_of_another_stream_id_is_refused() -> None:
    with pytest.raises(ForeignBlockError, match="names stream 2"):
        BINDING.check(_info(_seg("app-receiver-1"), stream=2))


@pytest.fixture
def bound() -> Iterator[tuple[ReceiverTracker, MemoryWAL, DriverClient]]:
    wal = MemoryWAL()
    blocks = ReceivedBlockTracker([0, 1], wal)
    tracker = ReceiverTracker(blocks, [0, 1])
    tracker.bind(BINDING)
    client = DriverClient(tracker.address, timeout_s=10)
    assert client.register_receiver(1, "h", "e").accepted
    yield tracker, wal, client
    client.close()
    tracker.stop()
    blocks.stop()


def _refused_and_nothing_logged(tracker: ReceiverTracker, wal: MemoryWAL, client: DriverClient,
                                info: ReceivedBlockInfo, match: str) -> None:
    with pytest.raises(EndpointPermissionError, match=match):
        client.add_block(info)
    assert wal.writes == 0
    assert tracker.tracker.get_unallocated_blocks(1) == []
    assert tracker.tracker.positions(1) == ()


def test_a_block_naming_another_streams_wal_is_refused_over_grpc(
    bound: tuple[ReceiverTracker, MemoryWAL, DriverClient],
) -> None:
    tracker, wal, client = bound
    _refused_and_nothing_logged(tracker, wal, client, _info(_seg("app-receiver-0"), "clicks"),
                                "not a segment of the stream's receiver WAL")
    assert client.add_block(_info(_seg("app-receiver-1"), "clicks"))  # its own goes in


def test_a_block_with_a_foreign_source_range_is_refused_over_grpc(
    bound: tuple[ReceiverTracker, MemoryWAL, DriverClient],
) -> None:
    tracker, wal, client = bound
    _refused_and_nothing_logged(tracker, wal, client,
                                _info(_seg("app-receiver-1"), "payments"),
                                r"'payments'.*does not read")
    assert client.add_block(_info(_seg("app-receiver-1"), "clicks"))
    assert [(r.topic, r.until_offset) for r in tracker.tracker.positions(1)] == [("clicks", 1)]


def test_launching_receivers_binds_each_stream_to_its_spec() -> None:
    blocks = ReceivedBlockTracker([0, 1], None)
    tracker = ReceiverTracker(blocks, [0, 1])
    specs = [ReceiverTaskSpec(0, SocketTextReceiver("h", 1), tracker.address, "b:1",
                              "app-receiver-0"),
             ReceiverTaskSpec(1, KafkaReceiver("b:1", "g", {"clicks": 1}), tracker.address,
                              "b:1", "app-receiver-1")]
    no_spark: Any = object()  # each launch fails at once; the bindings come first
    try:
        tracker.start_all_receivers(no_spark, specs, relaunch_delay_s=0, max_relaunches=0)
        assert tracker.receivers[0].binding == StreamBinding(0, PREFIX, "app-receiver-0")
        assert tracker.receivers[1].binding == BINDING
    finally:
        tracker.stop_all_receivers(5)
        tracker.stop()
        blocks.stop()
