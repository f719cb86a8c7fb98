"""Which source topics a receiver's blocks may name in their source ranges.

The driver refuses a block whose source ranges name a topic its stream's receiver
does not read (``driver/stream_binding.py``): a receiver, or whoever holds its
session, cannot move another source's positions in the driver's WAL, which a
relaunched receiver resumes from. A receiver declares its topics with a
``source_topics()`` method returning an iterable of names; ``None`` or no method
declares none, and then any source range it reports is refused, while blocks
without source ranges (socket and custom receivers) go in as before. The built-in
receivers that report ranges declare theirs here: the Kafka receiver its topics,
the rate generator its one position name.
"""

from __future__ import annotations

from receiver.kafka_receiver import KafkaReceiver
from receiver.rate_receiver import RateGeneratorReceiver
from receiver.receiver import Receiver


def declared_source_topics(receiver: Receiver) -> frozenset[str]:
    """The topics ``receiver``'s source ranges may name (empty: none)."""
    declare = getattr(receiver, "source_topics", None)
    if callable(declare):
        topics = declare()
        return frozenset() if topics is None else frozenset(str(t) for t in topics)
    if isinstance(receiver, KafkaReceiver):
        return frozenset(receiver.topics)
    if isinstance(receiver, RateGeneratorReceiver):
        return frozenset({receiver.source_name})
    return frozenset()
