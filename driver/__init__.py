"""driver: the driver side -- trackers, job generation, and the PySpark-compatible API.

Port a PySpark streaming app by changing its imports:
``from pyspark.streaming import StreamingContext`` -> ``from driver import StreamingContext``
``from pyspark.streaming.kafka import KafkaUtils`` -> ``from driver import KafkaUtils``.

Importing this package is cheap: the public names below are loaded on first use,
so a worker that imports one submodule (``driver.block_rdd`` for a batch's blocks)
loads that module's imports only, not the StreamingContext, the engine, PySpark's
driver side or the gRPC server (``tests/test_import_layers.py`` checks it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from walstream.lazy_exports import lazy_exports

# Public name -> the module that defines it.
_EXPORTS = {
    "DStream": "driver.dstream",
    "KafkaSink": "driver.kafka_sink",
    "KafkaUtils": "driver.kafka_utils",
    "StreamingContext": "driver.streaming_context",
    "StreamingListener": "driver.listener",
    "read_exactly_once": "driver.kafka_sink",
}

__all__ = ["DStream", "KafkaSink", "KafkaUtils", "StreamingContext", "StreamingListener",
           "read_exactly_once"]

if TYPE_CHECKING:
    from driver.dstream import DStream
    from driver.kafka_sink import KafkaSink, read_exactly_once
    from driver.kafka_utils import KafkaUtils
    from driver.listener import StreamingListener
    from driver.streaming_context import StreamingContext


__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
