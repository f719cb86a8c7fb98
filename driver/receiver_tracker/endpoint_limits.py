"""EndpointLimits: what one receiver can make the driver's endpoint hold or do.

A block report is kept in the driver's memory until its batch is cleaned, and it
is logged in the driver WAL, so it comes back on every restart: a report that is
larger than any real block needs is refused before it is logged or kept. The
defaults are far above what a real receiver sends (a Kafka topic name is at most
249 characters, a block id about 50) and bound one report to about 2.8 MiB on
the wire and a few MiB in memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from walstream.driver.errors import ReportLimitError
from walstream.errors import ConfigError
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.rpc import messages as m
from walstream.rpc.auth import SESSION_TOKEN_CHARS
from walstream.rpc.bounds import Bounds
from walstream.safe_text import escape_controls

# Avro bytes of one source range besides its topic: partition (int) and two longs,
# and the topic's length prefix.
_RANGE_FIXED_BYTES = 5 + 10 + 10 + 2
# Avro bytes of one source end besides its topic: partition (int), a long and the
# topic's length prefix.
_END_FIXED_BYTES = 5 + 10 + 2
# Everything of an AddBlock besides its ranges, ends and names: envelope, stream id,
# record count, handle numbers, the figures' numbers, length prefixes, array framing.
_REPORT_FIXED_BYTES = 160


@dataclass(frozen=True)
class EndpointLimits:
    """Bounds of the receiver endpoint (validated; frozen).

    * ``max_source_ranges_per_block``: ranges in one AddBlock (one per source
      partition a block holds data of).
    * ``max_name_bytes``: UTF-8 bytes of a block id, a topic (source or WAL), a
      host, an executor id or a session token (so at least a token's length).
    * ``max_records_per_block``: a block's record count; no block under the WAL's
      256 MiB record limit holds more (each stored record takes at least 2 bytes).
    * ``max_report_chars``: characters of a Report's message and of its error kept
      or logged by the driver; longer ones are truncated, with the length said.
    * ``max_message_bytes``: the gRPC message limit, both directions.
    * ``unary_workers``: server threads for RegisterReceiver, AddBlock and Report;
      the pool has two more per input stream for the long-lived Control streams
      (a relaunched receiver's may overlap its predecessor's), so N receivers'
      Control streams never starve AddBlock.
    """

    max_source_ranges_per_block: int = m.MAX_SOURCE_RANGES
    max_name_bytes: int = m.MAX_NAME_BYTES
    max_records_per_block: int = 1 << 27
    max_report_chars: int = 4096
    max_message_bytes: int = m.MAX_MESSAGE_BYTES
    unary_workers: int = 16

    def __post_init__(self) -> None:
        for name in ("max_source_ranges_per_block", "max_name_bytes", "max_records_per_block",
                     "max_report_chars", "max_message_bytes", "unary_workers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"EndpointLimits.{name} must be >= 1")
        if self.max_name_bytes < SESSION_TOKEN_CHARS:
            raise ConfigError(f"EndpointLimits.max_name_bytes must be >= {SESSION_TOKEN_CHARS}: "
                              "an AddBlock carries a session token under the same bound")
        if self.max_message_bytes < self.worst_block_report_bytes():
            raise ConfigError(
                f"EndpointLimits.max_message_bytes={self.max_message_bytes} is below the "
                f"{self.worst_block_report_bytes()} bytes of the largest block report the "
                "other limits allow; raise it or lower the others")

    def worst_block_report_bytes(self) -> int:
        """The largest AddBlock body (bytes) within these limits: its ranges, its
        figures' source ends (at most the wire's ``MAX_SOURCE_ENDS``, which every
        receiver keeps to), and three more strings bounded by ``max_name_bytes``
        (block id, WAL topic, session)."""
        ranges = self.max_source_ranges_per_block * (self.max_name_bytes + _RANGE_FIXED_BYTES)
        ends = m.MAX_SOURCE_ENDS * (self.max_name_bytes + _END_FIXED_BYTES)
        return ranges + ends + 3 * self.max_name_bytes + _REPORT_FIXED_BYTES

    def add_block_bounds(self) -> Bounds:
        return Bounds(self.max_source_ranges_per_block, self.max_name_bytes,
                      "max_source_ranges_per_block", "max_name_bytes", (m.SOURCE_END_LIMIT,))

    def check_name(self, what: str, name: str) -> None:
        size = len(name.encode("utf-8", "surrogatepass"))
        if size > self.max_name_bytes:
            raise ReportLimitError(
                f"{what} of {size} bytes is over the limit of {self.max_name_bytes} "
                "(max_name_bytes)")

    def check_block(self, info: ReceivedBlockInfo) -> None:
        """Raise :class:`ReportLimitError` naming the limit a block report exceeds."""
        if len(info.source) > self.max_source_ranges_per_block:
            raise ReportLimitError(
                f"block {info.block_id[:100]!r} has {len(info.source)} source ranges, over "
                f"the limit of {self.max_source_ranges_per_block} "
                "(max_source_ranges_per_block)")
        if not 0 <= info.num_records <= self.max_records_per_block:
            raise ReportLimitError(
                f"block {info.block_id[:100]!r} reports {info.num_records} records, outside "
                f"the limit of 0..{self.max_records_per_block} (max_records_per_block)")
        self.check_name("a block id", info.block_id)
        self.check_name("a WAL topic", info.handle.topic)
        for r in info.source:
            self.check_name("a source topic", r.topic)

    def truncate(self, text: str) -> str:
        """``text`` cut to ``max_report_chars``, saying how long it was, with every
        control character escaped (:func:`escape_controls`)."""
        if len(text) <= self.max_report_chars:
            return escape_controls(text)
        return escape_controls(f"{text[:self.max_report_chars]}... "
                               f"({len(text) - self.max_report_chars} more chars)")

