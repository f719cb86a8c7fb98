"""Which source topics a receiver's blocks may name in their source ranges.

The driver refuses a block whose source ranges name a topic its stream's receiver
does not read (``driver/receiver_tracker/stream_binding.py``): a receiver, or whoever holds its
session, cannot move another source's positions in the driver's WAL, which a
relaunched receiver resumes from. A receiver declares its topics with
:meth:`Receiver.source_topics` (the Kafka receiver its topics, the rate generator
its one position name); ``None``, or an attribute that is not a method, declares
none, and then any source range it reports is refused, while blocks without
source ranges (socket and custom receivers) go in as before.
"""

from __future__ import annotations

from walstream.receiver.receiver import Receiver


def declared_source_topics(receiver: Receiver) -> frozenset[str]:
    """The topics ``receiver``'s source ranges may name (empty: none)."""
    declare = getattr(receiver, "source_topics", None)
    topics = declare() if callable(declare) else None
    return frozenset() if topics is None else frozenset(str(t) for t in topics)
