"""walstream: Spark Streaming's receiver design with Kafka topics as write-ahead logs.

The top-level packages follow Spark's streaming roles:

* ``wal``        -- the Kafka-topic write-ahead log (WriteAheadLog contract)
* ``receiver``   -- Receiver, BlockGenerator, ReceiverSupervisor (executor side)
* ``driver``     -- trackers, job generation, the PySpark batch jobs
* ``checkpoint`` -- checkpoints and getOrCreate recovery
* ``walstream``  -- what they share: the root error, versioned Avro codec,
  the embedded broker manager and the ``walstream`` command line.
"""

__version__ = "0.1.0"
