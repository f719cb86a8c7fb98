"""Spark's direct_kafka_wordcount.py with only its import lines changed.

Counts words in UTF8 encoded, '\\n' delimited text directly received from Kafka every second.
Usage: direct_kafka_wordcount.py <broker_list> <topic>
"""
import sys

from pyspark import SparkContext

from walstream import KafkaUtils  # was: from pyspark.streaming.kafka import KafkaUtils
from walstream import StreamingContext  # was: from pyspark.streaming import StreamingContext

if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("Usage: direct_kafka_wordcount.py <broker_list> <topic>", file=sys.stderr)
        sys.exit(-1)

    sc = SparkContext(appName="PythonStreamingDirectKafkaWordCount")
    ssc = StreamingContext(sc, 2)

    brokers, topic = sys.argv[1:]
    kvs = KafkaUtils.createDirectStream(ssc, [topic], {"metadata.broker.list": brokers})
    lines = kvs.map(lambda x: x[1])
    counts = lines.flatMap(lambda line: line.split(" ")) \
        .map(lambda word: (word, 1)) \
        .reduceByKey(lambda a, b: a+b)
    counts.pprint()

    ssc.start()
    ssc.awaitTermination()
