"""The exactly-once Kafka output: KafkaSink, its attempt/commit protocol,
read_exactly_once, and the writer identity outputs are keyed by.
"""
