"""The rows of a ``walstream`` source: its schema, and a block's items as rows.

Columns: ``value``, ``key`` (only a Kafka source's records have keys),
``stream_id``, ``block_id``, ``received_time`` (when the block was written to
its receiver's log). ``value`` and ``key`` are binary, or strings with
``decode=utf-8``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from walstream.structured.errors import RowError
from walstream.structured.options import SourceOptions


def schema_ddl(options: SourceOptions) -> str:
    kind = "string" if options.decode else "binary"
    key = f"key {kind}, " if options.keyed else ""
    return (f"value {kind}, {key}stream_id int, block_id string, "
            "received_time timestamp")


def _as_bytes(x: Any) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode("utf-8", "surrogatepass")
    if isinstance(x, bytearray | memoryview):
        return bytes(x)
    raise RowError(f"a received item of type {type(x).__name__} has no binary column: "
                   "a walstream source's receivers store str or bytes items")


def _as_str(x: Any) -> str | None:
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, bytes | bytearray | memoryview):
        try:
            return bytes(x).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RowError(f"a received item is not UTF-8 ({exc}): read it without "
                           "option 'decode' (binary columns)") from exc
    raise RowError(f"a received item of type {type(x).__name__} has no string column: "
                   "a walstream source's receivers store str or bytes items")


def row_maker(decode: str, keyed: bool) -> Callable[[Any, int, str, datetime], tuple[Any, ...]]:
    """The function from ``(item, stream_id, block_id, received_time)`` to a row."""
    conv = _as_str if decode else _as_bytes
    if not keyed:
        def row(item: Any, sid: int, bid: str, ts: datetime) -> tuple[Any, ...]:
            return (conv(item), sid, bid, ts)
        return row

    def keyed_row(item: Any, sid: int, bid: str, ts: datetime) -> tuple[Any, ...]:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise RowError(f"a keyed source's item must be a (key, value) pair, not a "
                           f"{type(item).__name__}")
        return (conv(item[1]), conv(item[0]), sid, bid, ts)
    return keyed_row


def read_rows(blocks: Iterable[tuple[int, str, Mapping[str, Any]]], bootstrap_servers: str,
              kafka_settings: Mapping[str, str], decode: str, keyed: bool,
              timeout_s: float = 60.0) -> Iterator[tuple[Any, ...]]:
    """The rows of ``blocks`` (``(stream_id, block_id, handle)`` each), read from the
    receivers' logs by handle in a Spark task, block after block, items in order."""
    from walstream.receiver.block import block_items
    from walstream.wal.handle import RecordHandle
    from walstream.wal.reader import WalReader
    from walstream.worker_heap import freeze_once

    freeze_once()
    todo = list(blocks)
    row = row_maker(decode, keyed)
    reader = WalReader(bootstrap_servers, timeout_s, dict(kafka_settings))
    try:
        handles = [RecordHandle.from_dict(dict(h)) for _, _, h in todo]
        for (sid, bid, _), (data, time_ms) in zip(todo, reader.read_many(handles),
                                                  strict=True):
            ts = datetime.fromtimestamp(time_ms / 1000, tz=UTC)
            for item in block_items(data):
                yield row(item, sid, bid, ts)
    finally:
        reader.close()
