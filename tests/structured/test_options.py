"""SourceOptions: every readStream option checked once, with the option named."""

from __future__ import annotations

import pytest

from walstream.errors import ConfigError
from walstream.structured.errors import SourceOptionError
from walstream.structured.options import DEFAULT_CLEAN_MARGIN_MS, SourceOptions


def test_a_custom_receiver_with_json_args_and_kafka_settings() -> None:
    o = SourceOptions.parse({
        "Name": "clicks", "receiver": "myapp.receivers:Clicks",
        "receiver.args": '{"n": 3}', "numReceivers": "2",
        "kafka.bootstrap.servers": "b:9092", "kafka.security.protocol": "SSL",
        "maxRecordsPerTrigger": "500", "decode": "UTF8",
    })
    assert (o.name, o.receiver, o.receiver_args, o.num_receivers) == (
        "clicks", "myapp.receivers:Clicks", {"n": 3}, 2)
    assert o.bootstrap_servers == "b:9092"
    assert o.kafka_settings == (("security.protocol", "SSL"),)
    assert (o.max_records_per_trigger, o.max_blocks_per_trigger) == (500, None)
    assert o.decode == "utf-8" and not o.keyed
    assert o.clean_margin_ms == DEFAULT_CLEAN_MARGIN_MS


def test_the_built_in_sources() -> None:
    sock = SourceOptions.parse({"name": "s", "source": "socket", "host": "h", "port": "9"})
    assert (sock.source, sock.host, sock.port) == ("socket", "h", 9)
    kafka = SourceOptions.parse({"name": "k", "source": "Kafka", "topics": "a, b"})
    assert kafka.topics == ("a", "b") and kafka.keyed and kafka.group_id == "walstream-k"
    rate = SourceOptions.parse({"name": "r", "source": "rate", "rowsPerSecond": "50"})
    assert rate.rows_per_second == 50.0


@pytest.mark.parametrize(("options", "says"), [
    ({"receiver": "m:C"}, "option 'name' is required"),
    ({"name": "a/b", "receiver": "m:C"}, "option 'name'"),
    ({"name": "n"}, "exactly one of option 'receiver'"),
    ({"name": "n", "receiver": "m:C", "source": "rate"}, "exactly one"),
    ({"name": "n", "receiver": "no-colon"}, "'package.module:Class'"),
    ({"name": "n", "source": "http"}, "option 'source' must be one of"),
    ({"name": "n", "receiver": "m:C", "receiver.args": "{bad"}, "not JSON"),
    ({"name": "n", "receiver": "m:C", "receiver.args": "3"}, "JSON object"),
    ({"name": "n", "source": "rate", "receiver.args": "{}"}, "goes with option 'receiver'"),
    ({"name": "n", "source": "socket", "host": "h"}, "needs options 'host' and 'port'"),
    ({"name": "n", "source": "kafka"}, "needs option 'topics'"),
    ({"name": "n", "source": "rate", "rowsPerSecond": "0"}, "'rowsPerSecond'"),
    ({"name": "n", "source": "rate", "numReceivers": "0"}, "'numreceivers' must be at least 1"),
    ({"name": "n", "source": "rate", "maxBlocksPerTrigger": "x"}, "must be an integer"),
    ({"name": "n", "source": "rate", "decode": "latin-1"}, "option 'decode'"),
    ({"name": "n", "source": "rate", "startingOffsets": "latest"}, "unknown option"),
])
def test_a_bad_option_is_refused_by_name(options: dict[str, str], says: str) -> None:
    with pytest.raises(SourceOptionError, match=says) as info:
        SourceOptions.parse(options)
    assert isinstance(info.value, ConfigError)


def test_identity_tells_two_sources_apart_but_not_their_limits() -> None:
    a = SourceOptions.parse({"name": "n", "source": "rate", "maxBlocksPerTrigger": "3"})
    b = SourceOptions.parse({"name": "n", "source": "rate"})
    c = SourceOptions.parse({"name": "n", "source": "rate", "numReceivers": "2"})
    assert a.identity() == b.identity() != c.identity()
