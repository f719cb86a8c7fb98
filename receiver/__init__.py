"""receiver: the executor side of ingestion (Spark's Receiver, BlockGenerator, supervisor).

Data a :class:`Receiver` stores is cut into blocks by a :class:`BlockGenerator`;
the :class:`ReceiverSupervisor` writes each block to a Kafka WAL, reports it to
the driver, and only then lets the receiver acknowledge its source.
"""

from receiver.block import Block, SourceRange
from receiver.block_generator import BlockGenerator, BlockGeneratorConfig
from receiver.errors import (
    BadRecordError,
    BlockGeneratorStoppedError,
    BlockGeneratorTimeoutError,
    BlockReportError,
    BlockStoreError,
    BlockTooLargeError,
    DriverProofError,
    EndpointAuthError,
    EndpointPermissionError,
    EndpointSecurityError,
    ReceiverError,
    ReceiverRefusedError,
)
from receiver.kafka_receiver import KafkaReceiver
from receiver.rate_limiter import RateLimiter
from receiver.rate_receiver import RateGeneratorReceiver, generated_line
from receiver.receiver import Receiver
from receiver.registration import Registration
from receiver.socket_receiver import SocketTextReceiver
from receiver.supervisor import BlockReporter, ReceiverSupervisor, SupervisorConfig

__all__ = [
    "BadRecordError",
    "Block",
    "BlockGenerator",
    "BlockGeneratorConfig",
    "BlockGeneratorStoppedError",
    "BlockGeneratorTimeoutError",
    "BlockReportError",
    "BlockReporter",
    "BlockStoreError",
    "BlockTooLargeError",
    "DriverProofError",
    "EndpointAuthError",
    "EndpointPermissionError",
    "EndpointSecurityError",
    "KafkaReceiver",
    "RateGeneratorReceiver",
    "RateLimiter",
    "Receiver",
    "ReceiverError",
    "ReceiverRefusedError",
    "ReceiverSupervisor",
    "Registration",
    "SocketTextReceiver",
    "SourceRange",
    "SupervisorConfig",
    "generated_line",
]
