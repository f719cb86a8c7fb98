"""driver: the driver side -- trackers, job generation, and the PySpark-compatible API.

Port a PySpark streaming app by changing its imports:
``from pyspark.streaming import StreamingContext`` ->
``from walstream.driver import StreamingContext``
``from pyspark.streaming.kafka import KafkaUtils`` -> ``from walstream.driver import KafkaUtils``.

Importing this package is cheap: the public names below are loaded on first use,
so a worker that imports one submodule (``walstream.driver.dstream.block_rdd`` for a batch's blocks)
loads that module's imports only, not the StreamingContext, the engine, PySpark's
driver side or the gRPC server (``tests/test_import_layers.py`` checks it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from walstream.lazy_exports import lazy_exports

# Public name -> the module that defines it.
_EXPORTS = {
    "DStream": "walstream.driver.dstream.dstream",
    "KafkaSink": "walstream.driver.sink.kafka_sink",
    "KafkaUtils": "walstream.driver.dstream.kafka_utils",
    "StreamingContext": "walstream.driver.dstream.streaming_context",
    "StreamingListener": "walstream.driver.scheduler.listener",
    "read_exactly_once": "walstream.driver.sink.kafka_sink",
}

__all__ = ["DStream", "KafkaSink", "KafkaUtils", "StreamingContext", "StreamingListener",
           "read_exactly_once"]

if TYPE_CHECKING:
    from walstream.driver.dstream.dstream import DStream
    from walstream.driver.dstream.kafka_utils import KafkaUtils
    from walstream.driver.dstream.streaming_context import StreamingContext
    from walstream.driver.scheduler.listener import StreamingListener
    from walstream.driver.sink.kafka_sink import KafkaSink, read_exactly_once


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
