"""receiver: the executor side of ingestion (Spark's Receiver, BlockGenerator, supervisor).

Data a :class:`Receiver` stores is cut into blocks by a :class:`BlockGenerator`;
the :class:`ReceiverSupervisor` writes each block to a Kafka WAL, reports it to
the driver, and only then lets the receiver acknowledge its source.
"""

from walstream.receiver.block import Block, SourceRange
from walstream.receiver.block_generator import BlockGenerator, BlockGeneratorConfig
from walstream.receiver.errors import (
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
from walstream.receiver.kafka_receiver import KafkaReceiver
from walstream.receiver.rate_limiter import RateLimiter
from walstream.receiver.rate_receiver import RateGeneratorReceiver, generated_line
from walstream.receiver.receiver import Receiver
from walstream.receiver.registration import Registration
from walstream.receiver.socket_receiver import SocketTextReceiver
from walstream.receiver.supervisor import ReceiverSupervisor
from walstream.receiver.supervisor_config import BlockReporter, SupervisorConfig

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
