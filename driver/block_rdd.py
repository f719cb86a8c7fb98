"""A batch's input as a PySpark RDD whose partitions are its WAL blocks.

Each partition holds one block's handle; the task reads the block from Kafka by
handle (``assign`` at its offset) with confluent-kafka inside the Python worker
and yields its decoded items. Reading by handle is deterministic, so a batch
re-run after a crash sees exactly the same data.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from receiver.block_info import ReceivedBlockInfo


def _read_blocks(
    bootstrap_servers: str, timeout_s: float, kafka_settings: Mapping[str, str],
    handles: Iterable[dict[str, Any]],
) -> Iterator[Any]:
    # Imported here: this runs in a PySpark Python worker.
    from receiver.block import Block
    from receiver.items import decode_item
    from wal.handle import RecordHandle
    from wal.reader import WalReader

    reader = WalReader(bootstrap_servers, timeout_s, dict(kafka_settings))
    try:
        for h in handles:
            data, _ = reader.read(RecordHandle.from_dict(h))
            for record in Block.decode(data).records:
                yield decode_item(record)
    finally:
        reader.close()


def block_rdd(
    sc: Any,
    blocks: Sequence[ReceivedBlockInfo],
    bootstrap_servers: str,
    timeout_s: float = 60.0,
    kafka_settings: Mapping[str, str] | None = None,
) -> Any:
    """An RDD with one partition per block (empty RDD for no blocks); its tasks read
    with the application's Kafka settings (``kafka_settings``: SASL, TLS, ...)."""
    if not blocks:
        return sc.emptyRDD()
    handles = [b.handle.to_dict() for b in blocks]
    reader = functools.partial(_read_blocks, bootstrap_servers, timeout_s,
                               dict(kafka_settings or {}))
    return sc.parallelize(handles, len(handles)).mapPartitions(reader)
