"""Spark's network_wordcount.py with only its import lines changed.

Counts words in UTF8 encoded, '\\n' delimited text received from the network every second.
Usage: network_wordcount.py <hostname> <port>
   e.g. `nc -lk 9999` in one terminal, then
   `PYSPARK_SUBMIT_ARGS="--master local[3] pyspark-shell" python examples/network_wordcount.py localhost 9999`
"""
import sys

from pyspark import SparkContext

from walstream import StreamingContext  # was: from pyspark.streaming import StreamingContext

if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("Usage: network_wordcount.py <hostname> <port>", file=sys.stderr)
        sys.exit(-1)
    sc = SparkContext(appName="PythonStreamingNetworkWordCount")
    ssc = StreamingContext(sc, 1)

    lines = ssc.socketTextStream(sys.argv[1], int(sys.argv[2]))
    counts = lines.flatMap(lambda line: line.split(" "))\
                  .map(lambda word: (word, 1))\
                  .reduceByKey(lambda a, b: a+b)
    counts.pprint()

    ssc.start()
    ssc.awaitTermination()
