"""The ingest benchmark's knobs, sizes and result records (``bench.ingest_bench``).

Shared by the runner (``ingest_bench``), its profiled diagnostic pass
(``ingest_profile``) and its report (``ingest_render``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bench.ingest_profile import Profile

MB = 1_000_000  # throughput unit: 10^6 bytes of record payload (key + value)
RECORD_SIZES = (100, 10_000)  # value bytes; keys are None
RATIO_TARGET = 0.7
#: One receiver against the bare consumer's read of the same source, at this record
#: size: the target is at least this fraction (median of per-iteration ratios).
CEILING_TARGET = 0.8
CEILING_TARGET_SIZE = 100
CLEAN_ALL_MS = 2**42  # later than any record time: clean() deletes every segment
WAL_TOPIC_PREFIX = "walstream.wal."  # KafkaWalConfig.topic_prefix (default)
POLL_S = 0.005  # how often the bench polls the driver's positions


@dataclass(frozen=True)
class Size:
    records: dict[int, int]  # record size -> N per run
    timeout_s: float  # bound on one receiver run


SIZES = {
    "small": Size({100: 30_000, 10_000: 3_000}, timeout_s=120.0),
    # Sustained rates: a receiver's start (consumer, cold WAL producer, first block,
    # reported apart as "first report") and its last block's wait for the next block
    # interval are fixed costs that must not dominate the run, so at the full size
    # each receiver case reads for many seconds, not a few block intervals: N grows
    # as the receivers get faster (docs/decisions/text-runs.md).
    "full": Size({100: 5_000_000, 10_000: 60_000}, timeout_s=600.0),
}


@dataclass(frozen=True)
class IngestConfig:
    """The documented knobs this benchmark may tune (everything else: defaults)."""

    block_interval_ms: int = 200  # BlockGeneratorConfig default
    max_block_records: int = 100_000  # BlockGeneratorConfig default
    chunk_bytes: int = 512 * 1024  # KafkaWalConfig default

    def generator(self) -> Any:
        from walstream.receiver.block_generator import BlockGeneratorConfig

        return BlockGeneratorConfig(block_interval_ms=self.block_interval_ms,
                                    max_block_records=self.max_block_records)

    def wal_options(self) -> dict[str, Any]:
        return {"chunk_bytes": self.chunk_bytes}


@dataclass
class RunResult:
    seconds: float  # first registration -> every stream covered
    records: int
    blocks: int
    per_stream: dict[int, float] = field(default_factory=dict)  # records/s per receiver
    first_report_s: float = 0.0  # first registration -> first position reported
    steady_rate: float = 0.0  # records/s from half of the records covered to all
    register_skew_s: float = 0.0  # last registration - first registration
    placements: dict[int, str] = field(default_factory=dict)
    launch_s: float = 0.0  # start_all_receivers -> first registration (not measured time)
    raw_rate: float = 0.0  # records/s of the raw run of the same iteration


CASE_TITLES = {
    "raw": "raw confluent-kafka produce",
    "consume": "raw confluent-kafka consume of the 1-receiver source (read ceiling)",
    "one": "1 receiver, local[3]",
    "two-local": "2 receivers, local[3]",
    "two-cluster": "2 receivers, standalone (2 workers x 1 core)",
}


@dataclass
class Results:
    seconds: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    runs: dict[tuple[int, str], list[RunResult]] = field(default_factory=dict)
    ratios: dict[tuple[int, str], list[float]] = field(default_factory=dict)
    profiles: dict[int, Profile] = field(default_factory=dict)
    records: dict[int, int] = field(default_factory=dict)
    loads: list[str] = field(default_factory=list)  # 1-min load average per iteration

    def add(self, size: int, case: str, seconds: float, run: RunResult | None = None) -> None:
        self.seconds.setdefault((size, case), []).append(seconds)
        if run is not None:
            self.runs.setdefault((size, case), []).append(run)


def warm_driver_wal(blocks: Any) -> None:
    """Log one (empty) batch allocation, as a running driver's job generator has.

    A fresh idempotent producer needs 0.5-1 s on this broker before its first record
    is acknowledged (producer id); a driver that has been running has paid that long
    before a receiver starts, so the bench's fresh driver pays it here, outside the
    measured window. The receiver's own WAL producer stays cold (measured).
    """
    blocks.allocate_blocks_to_batch(1)
