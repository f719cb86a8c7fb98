"""Avro schemas of the records receivers and the driver exchange.

A source range is stored in every block (``walstream.receiver.block``) and sent back in a
registration answer; a received block's info is sent in every AddBlock and logged
in the driver's events (``walstream.driver.scheduler.tracker_events``). Their names
and namespaces are part of the stored and wire formats and never change. A block's figures (the
receiver's WAL write of the block and the source ends it knows) travel with its
AddBlock only, for the driver's metrics; they are never stored.
"""

from __future__ import annotations

from typing import Any

from walstream.wal.handle import HANDLE_SCHEMA

SOURCE_RANGE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "SourceRange",
    "namespace": "walstream.receiver",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "from_offset", "type": "long"},
        {"name": "until_offset", "type": "long"},
    ],
}

BLOCK_INFO_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "ReceivedBlockInfo",
    "namespace": "walstream.driver",
    "fields": [
        {"name": "stream_id", "type": "int"},
        {"name": "block_id", "type": "string"},
        {"name": "num_records", "type": "long"},
        {"name": "handle", "type": HANDLE_SCHEMA},
        {"name": "source", "type": {"type": "array", "items": SOURCE_RANGE_SCHEMA}},
    ],
}

SOURCE_END_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "SourceEnd",
    "namespace": "walstream.receiver",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "end_offset", "type": "long"},
    ],
}

BLOCK_FIGURES_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "BlockFigures",
    "namespace": "walstream.receiver",
    "fields": [
        # The receiver's WAL write of the block: seconds until acknowledged, bytes.
        {"name": "wal_write_seconds", "type": "double"},
        {"name": "wal_bytes", "type": "long"},
        # Source partition ends the receiver learnt since its last report.
        {"name": "source_ends", "type": {"type": "array", "items": SOURCE_END_SCHEMA}},
    ],
}
