"""StreamingContext failures end to end: a batch that cannot be prepared stops the
context and awaitTermination raises its error; a failed job's batch is not completed
and keeps its data."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from driver import KafkaUtils, StreamingContext
from driver.direct_stream import DirectKafkaInputDStream
from driver.errors import JobFailedError
from tests.api.helpers import wait_until

pytestmark = pytest.mark.spark


def test_direct_stream_probe_failing_stops_context_and_await_termination_raises_it(
        ssc: StreamingContext, bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """Kafka down for the end-offset probe: the batch is retried (bounded), then the
    context stops and awaitTermination raises the probe's error; no batch ran past it."""
    topic = topic_factory("probe-fails", partitions=1)
    stream = KafkaUtils.createDirectStream(ssc, [topic], {"bootstrap.servers": bootstrap})
    assert isinstance(stream, DirectKafkaInputDStream)
    calls: list[int] = []

    def kafka_down(topic: str, partition: int, at_least: int) -> int:
        calls.append(at_least)
        raise TimeoutError(f"no answer reading the end of {topic}[{partition}]")

    stream._end_offset = kafka_down  # type: ignore[method-assign]
    ran: list[Any] = []
    stream.foreachRDD(lambda t, rdd: ran.append(t))
    ssc.start()
    with pytest.raises(JobFailedError) as err:
        ssc.awaitTermination(60)
    assert isinstance(err.value.__cause__, TimeoutError)
    assert "no answer reading the end" in str(err.value)
    wait_until(lambda: ssc._state == "stopped", "the context stopped after the error")
    assert StreamingContext.getActive() is None
    assert ran == []  # no batch ran past the one that could not be prepared
    assert len(calls) == 4  # the first attempt and the 3 default retries
    time.sleep(0.2)
    assert not ssc.sparkContext._jsc.sc().isStopped()  # the application stops it
