"""walstream: Spark Streaming's receiver design with Kafka topics as write-ahead logs.

The user's entry point. Port a PySpark streaming app by changing its imports::

    from walstream import StreamingContext   # was: from pyspark.streaming import ...
    from walstream import KafkaUtils         # was: from pyspark.streaming.kafka import ...

``from walstream.driver import StreamingContext, KafkaUtils`` keeps working. The names below
are loaded on first use: this package is also imported by every executor process
(its errors and codecs), which must not pay for the driver side.

The top-level packages follow Spark's streaming roles:

* ``wal``        -- the Kafka-topic write-ahead log (WriteAheadLog contract)
* ``receiver``   -- Receiver, BlockGenerator, ReceiverSupervisor (executor side)
* ``driver``     -- trackers, job generation, the PySpark batch jobs
* ``checkpoint`` -- checkpoints and getOrCreate recovery
* ``structured`` -- receivers as a Structured Streaming source (``walstream.register``)
* ``walstream``  -- this entry point and what the others share: the root error,
  versioned Avro codec, the embedded broker manager and the ``walstream`` command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from walstream.lazy_exports import lazy_exports

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "StreamingContext": "walstream.driver.dstream.streaming_context",
    "DStream": "walstream.driver.dstream.dstream",
    "KafkaUtils": "walstream.driver.dstream.kafka_utils",
    "StreamingListener": "walstream.driver.scheduler.listener",
    "KafkaSink": "walstream.driver.sink.kafka_sink",
    "read_exactly_once": "walstream.driver.sink.kafka_sink",
    "Receiver": "walstream.receiver.receiver",
    # ``walstream.register(spark)``: the ``readStream.format("walstream")`` source.
    "register": "walstream.structured.registry",
}

__all__ = [
    "DStream",
    "KafkaSink",
    "KafkaUtils",
    "Receiver",
    "StreamingContext",
    "StreamingListener",
    "__version__",
    "read_exactly_once",
    "register",
]

if TYPE_CHECKING:
    from walstream.driver.dstream.dstream import DStream
    from walstream.driver.dstream.kafka_utils import KafkaUtils
    from walstream.driver.dstream.streaming_context import StreamingContext
    from walstream.driver.scheduler.listener import StreamingListener
    from walstream.driver.sink.kafka_sink import KafkaSink, read_exactly_once
    from walstream.receiver.receiver import Receiver
    from walstream.structured.registry import register


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
