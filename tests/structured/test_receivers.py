"""The receivers a source's options build."""

from __future__ import annotations

import pytest

from walstream.receiver.kafka_receiver import KafkaReceiver
from walstream.receiver.rate_receiver import RateGeneratorReceiver
from walstream.receiver.socket_receiver import SocketTextReceiver
from walstream.structured.errors import SourceOptionError
from walstream.structured.options import SourceOptions
from walstream.structured.receivers import build_receivers
from walstream.testing.sequence_receiver import SequenceReceiver


def build(**opts: str) -> dict[int, object]:
    return dict(build_receivers(SourceOptions.parse({"name": "n", **opts}), "b:9092"))


def test_built_in_sources() -> None:
    sock = build(source="socket", host="h", port="7", numReceivers="2")
    assert sorted(sock) == [0, 1] and all(isinstance(r, SocketTextReceiver)
                                          for r in sock.values())
    rate = build(source="rate", rowsPerSecond="5", numReceivers="2")
    assert [r.seed for r in rate.values()] == [0, 1]  # type: ignore[attr-defined]
    assert all(isinstance(r, RateGeneratorReceiver) for r in rate.values())


def test_a_kafka_source_splits_its_topics_between_its_receivers() -> None:
    got = build(source="kafka", topics="a,b,c", numReceivers="2", groupId="g")
    assert all(isinstance(r, KafkaReceiver) for r in got.values())
    assert [sorted(r.topics) for r in got.values()] == [["a", "c"], ["b"]]  # type: ignore[attr-defined]
    assert {r.group_id for r in got.values()} == {"g"}  # type: ignore[attr-defined]
    with pytest.raises(SourceOptionError, match="at most one receiver per topic"):
        build(source="kafka", topics="a", numReceivers="2")


def test_a_user_receiver_with_keyword_or_positional_arguments() -> None:
    spec = "walstream.testing.sequence_receiver:SequenceReceiver"
    kw = build(receiver=spec, **{"receiver.args": '{"total": 5, "prefix": "x"}'})
    assert isinstance(kw[0], SequenceReceiver) and kw[0].record(3) == "x-3"
    pos = build(receiver=spec, **{"receiver.args": "[7]"})
    assert pos[0].total == 7  # type: ignore[attr-defined]


@pytest.mark.parametrize(("spec", "args", "says"), [
    ("no_such_module_x:R", None, "cannot load"),
    ("walstream.testing.sequence_receiver:Nope", None, "cannot load"),
    ("json:JSONDecoder", None, "not a walstream Receiver"),
    ("walstream.testing.sequence_receiver:SequenceReceiver", '{"bogus": 1}', "do not fit"),
])
def test_a_receiver_that_cannot_be_built_is_refused_clearly(spec: str, args: str | None,
                                                             says: str) -> None:
    opts = {"receiver": spec} | ({"receiver.args": args} if args else {})
    with pytest.raises(SourceOptionError, match=says):
        build(**opts)
