"""What a ReceiverSupervisor is given: the driver endpoint it reports to
(:class:`BlockReporter`) and its bounds (:class:`SupervisorConfig`: retries, timeouts,
the bad-record policy, pipelining)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from walstream.errors import ConfigError
from walstream.receiver.block_info import BlockFigures, ReceivedBlockInfo
from walstream.receiver.registration import Registration


class BlockReporter(Protocol):
    """The driver endpoint a supervisor talks to (in-process or over gRPC).

    ``add_block`` gets the receiver's
    :class:`~walstream.receiver.block_info.BlockFigures` with each block (the WAL write,
    new source ends), or None when ``SupervisorConfig.send_figures`` is off; figures
    are for the driver's metrics and never decide whether a block is accepted."""

    def register_receiver(
        self, stream_id: int, host: str, executor_id: str
    ) -> Registration | tuple[bool, str]: ...

    def add_block(self, info: ReceivedBlockInfo, *,
                  figures: BlockFigures | None = None) -> bool: ...

    def report_error(self, stream_id: int, message: str, error: str) -> None: ...

    def deregister_receiver(self, stream_id: int, message: str, error: str) -> None: ...


@dataclass(frozen=True)
class SupervisorConfig:
    """Bounds of the supervisor.

    ``bad_record_policy``: ``"skip"`` (default) reports a record that cannot be
    encoded or exceeds ``max_record_bytes`` (log + ``bad_records`` counter +
    ``report_error`` to the driver) and goes on; ``"fail"`` stops the receiver.
    """

    store_retries: int = 3
    store_backoff_s: float = 0.5
    report_retries: int = 3
    report_backoff_s: float = 0.5
    restart_delay_s: float = 2.0
    max_record_bytes: int = 8 * 1024 * 1024
    report_timeout_s: float = 30.0
    bad_record_policy: str = "skip"
    pipelined_store: bool = True
    store_timeout_s: float = 120.0
    # Send the receiver's figures with each block report (BlockFigures).
    send_figures: bool = True

    def __post_init__(self) -> None:
        if self.store_retries < 1 or self.report_retries < 1:
            raise ConfigError("store_retries and report_retries must be >= 1")
        if self.store_timeout_s <= 0:
            raise ConfigError("store_timeout_s must be > 0")
        if self.bad_record_policy not in ("skip", "fail"):
            raise ConfigError("bad_record_policy must be 'skip' or 'fail'")

