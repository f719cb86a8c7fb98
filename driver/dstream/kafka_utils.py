"""KafkaUtils: ``pyspark.streaming.kafka``'s API, back for Python users.

``createStream`` is receiver-based: a KafkaReceiver per stream stores records
in its Kafka WAL and resumes from the positions the driver acknowledged, so
ingestion is exactly once. The first argument takes Kafka bootstrap servers
where Spark took a ZooKeeper quorum.

``createDirectStream`` has no receiver: each batch reads the offset range the
driver decided for it, from the last batch's end to the partition's end found
by a Fetch's EOF (ListOffsets is wrong on the embedded broker).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from walstream.errors import ConfigError
from walstream.receiver.kafka_receiver import KafkaReceiver, utf8_decoder

Decoder = Callable[[bytes | None], Any]


def _bootstrap(kafka_params: dict[str, Any] | None, fallback: str | None = None) -> str:
    params = kafka_params or {}
    value = params.get("bootstrap.servers") or params.get("metadata.broker.list") or fallback
    if not value:
        raise ConfigError("kafkaParams need 'bootstrap.servers' (or Spark's "
                          "'metadata.broker.list')")
    return str(value)


class KafkaUtils:
    @staticmethod
    def createStream(ssc: Any, bootstrapServers: str, groupId: str,  # noqa: N802, N803
                     topics: dict[str, int], kafkaParams: dict[str, Any] | None = None,  # noqa: N803
                     storageLevel: Any = None,  # noqa: N803
                     keyDecoder: Decoder = utf8_decoder,  # noqa: N803
                     valueDecoder: Decoder = utf8_decoder) -> Any:  # noqa: N803
        """A receiver-based stream of ``(key, value)`` pairs from ``topics``."""
        params = {k: v for k, v in (kafkaParams or {}).items()
                  if k not in ("bootstrap.servers", "metadata.broker.list", "group.id",
                               "zookeeper.connect", "zookeeper.connection.timeout.ms")}
        receiver = KafkaReceiver(bootstrapServers, groupId, topics, params,
                                 key_decoder=keyDecoder, value_decoder=valueDecoder)
        return ssc.receiverStream(receiver)

    @staticmethod
    def createDirectStream(ssc: Any, topics: list[str], kafkaParams: dict[str, Any],  # noqa: N802, N803
                           fromOffsets: dict[Any, int] | None = None,  # noqa: N803
                           keyDecoder: Decoder = utf8_decoder,  # noqa: N803
                           valueDecoder: Decoder = utf8_decoder) -> Any:  # noqa: N803
        """A receiver-less stream of ``(key, value)`` pairs; each batch an offset range."""
        from walstream.driver.dstream.direct_stream import DirectKafkaInputDStream

        return DirectKafkaInputDStream(ssc, list(topics), _bootstrap(kafkaParams),
                                       dict(kafkaParams), fromOffsets or {},
                                       keyDecoder, valueDecoder)
