"""StreamBinding: what one stream's receiver may report to the driver.

A block report names a WAL record (its handle) and the source ranges the block
holds. The driver logs both, then reads the record in a batch and resumes a
relaunched receiver from the ranges, so a receiver must not name a record of
another stream's WAL (another stream's data would be read twice, or a batch
would read whatever lives there) nor a range of a source it does not read (that
source's resume position would move). When the tracker launches a receiver it
binds the stream to the receiver's own WAL and declared source topics
(:func:`walstream.receiver.source_topics.declared_source_topics`), and refuses any other
report before it is logged.
"""

from __future__ import annotations

from dataclasses import dataclass

from walstream.driver.errors import ForeignBlockError
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.source_topics import declared_source_topics
from walstream.receiver.task import ReceiverTaskSpec
from walstream.wal.config import KafkaWalConfig
from walstream.wal.segments import parse_topics


@dataclass(frozen=True)
class StreamBinding:
    """A stream's receiver WAL (segment topics ``<wal_topic_prefix><wal_name>--<start>-<end>``)
    and the source topics its ranges may name."""

    stream_id: int
    wal_topic_prefix: str
    wal_name: str
    source_topics: frozenset[str] = frozenset()

    @classmethod
    def of_spec(cls, spec: ReceiverTaskSpec) -> StreamBinding:
        prefix = spec.wal_options.get("topic_prefix") or KafkaWalConfig.topic_prefix
        return cls(spec.stream_id, str(prefix), spec.wal_name,
                   declared_source_topics(spec.receiver))

    def check(self, info: ReceivedBlockInfo) -> None:
        """Raise :class:`ForeignBlockError` unless ``info`` names a segment of this
        stream's WAL and only declared source topics."""
        block = info.block_id[:100]
        if info.stream_id != self.stream_id:
            raise ForeignBlockError(
                f"block {block!r} names stream {info.stream_id}, not {self.stream_id}")
        segments, _ = parse_topics([info.handle.topic], self.wal_topic_prefix, self.wal_name)
        if not segments:
            raise ForeignBlockError(
                f"block {block!r} of stream {self.stream_id} names WAL topic "
                f"{info.handle.topic[:300]!r}, which is not a segment of the stream's "
                f"receiver WAL ({self.wal_topic_prefix}{self.wal_name}--<start>-<end>); "
                "refused, nothing logged")
        foreign = sorted({r.topic for r in info.source} - self.source_topics)
        if foreign:
            declared = ", ".join(sorted(self.source_topics)[:10]) or "none"
            raise ForeignBlockError(
                f"block {block!r} of stream {self.stream_id} has source ranges of "
                f"{', '.join(repr(t[:300]) for t in foreign[:5])}, which its receiver does "
                f"not read (it declares: {declared}; a receiver declares its topics with "
                "source_topics()); refused, nothing logged")
