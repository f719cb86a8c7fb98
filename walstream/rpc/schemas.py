"""Avro schemas of the records receivers and the driver exchange.

A source range is stored in every block (``receiver.block``) and sent back in a
registration answer; a received block's info is sent in every AddBlock and logged
in the driver's events (``driver.events``). Their names and namespaces are part
of the stored and wire formats and never change.
"""

from __future__ import annotations

from typing import Any

from wal.handle import HANDLE_SCHEMA

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
