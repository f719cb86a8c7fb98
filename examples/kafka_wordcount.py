"""Spark's kafka_wordcount.py (receiver-based) with only its import lines changed.

Counts words in UTF8 encoded, '\\n' delimited text received from Kafka every second.
Usage: kafka_wordcount.py <bootstrap servers> <topic>   (Spark took a ZooKeeper quorum here)
"""
import sys

from pyspark import SparkContext

from walstream import KafkaUtils  # was: from pyspark.streaming.kafka import KafkaUtils
from walstream import StreamingContext  # was: from pyspark.streaming import StreamingContext

if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("Usage: kafka_wordcount.py <zk> <topic>", file=sys.stderr)
        sys.exit(-1)

    sc = SparkContext(appName="PythonStreamingKafkaWordCount")
    ssc = StreamingContext(sc, 1)

    zkQuorum, topic = sys.argv[1:]
    kvs = KafkaUtils.createStream(ssc, zkQuorum, "spark-streaming-consumer", {topic: 1})
    lines = kvs.map(lambda x: x[1])
    counts = lines.flatMap(lambda line: line.split(" ")) \
        .map(lambda word: (word, 1)) \
        .reduceByKey(lambda a, b: a+b)
    counts.pprint()

    ssc.start()
    ssc.awaitTermination()
