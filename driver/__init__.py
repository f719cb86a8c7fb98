"""driver: the driver side -- trackers, job generation, and the PySpark-compatible API.

Port a PySpark streaming app by changing its imports:
``from pyspark.streaming import StreamingContext`` -> ``from driver import StreamingContext``
``from pyspark.streaming.kafka import KafkaUtils`` -> ``from driver import KafkaUtils``.
"""

from driver.dstream import DStream
from driver.kafka_sink import KafkaSink, read_exactly_once
from driver.kafka_utils import KafkaUtils
from driver.listener import StreamingListener
from driver.streaming_context import StreamingContext

__all__ = ["DStream", "KafkaSink", "KafkaUtils", "StreamingContext", "StreamingListener",
           "read_exactly_once"]
