"""wal: the Kafka-topic write-ahead log (Spark's ``WriteAheadLog`` contract).

``KafkaWriteAheadLog`` stores records in rolling single-partition segment topics
(``acks=all``, idempotent producer); ``BatchedWriteAheadLog`` groups concurrent
writes into one record for the driver's events; ``EpochChainLog`` keeps the driver
WAL of a highly available driver as one log per lease epoch. See :mod:`walstream.wal.kafka_log` and
:mod:`walstream.wal.batched_log` for the numbered durability protocols.
"""

from walstream.wal.base import WriteAheadLog
from walstream.wal.batched_log import BatchedWriteAheadLog, deserialize_batch, serialize_batch
from walstream.wal.config import KafkaWalConfig
from walstream.wal.epoch_chain import EpochChainLog
from walstream.wal.errors import (
    BrokenChainError,
    CorruptRecordError,
    EpochChainError,
    EpochTakenError,
    RecordNotFoundError,
    RecordTooLargeError,
    StaleFollowerError,
    UnknownRecordVersionError,
    WalBackpressureError,
    WalClosedError,
    WalError,
    WalReadError,
    WalWriteError,
    WalWriteTimeoutError,
)
from walstream.wal.handle import HANDLE_SCHEMA, RecordHandle
from walstream.wal.kafka_log import KafkaWriteAheadLog
from walstream.wal.reader import WalReader

__all__ = [
    "HANDLE_SCHEMA",
    "BatchedWriteAheadLog",
    "BrokenChainError",
    "CorruptRecordError",
    "EpochChainError",
    "EpochChainLog",
    "EpochTakenError",
    "KafkaWalConfig",
    "KafkaWriteAheadLog",
    "RecordHandle",
    "RecordNotFoundError",
    "RecordTooLargeError",
    "StaleFollowerError",
    "UnknownRecordVersionError",
    "WalBackpressureError",
    "WalClosedError",
    "WalError",
    "WalReadError",
    "WalReader",
    "WalWriteError",
    "WalWriteTimeoutError",
    "WriteAheadLog",
    "deserialize_batch",
    "serialize_batch",
]
