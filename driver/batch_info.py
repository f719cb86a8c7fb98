"""What the scheduler records about batches, receivers and output operations.

Accessors use PySpark's listener names (``batchTime()``, ``processingDelay()``,
...) so a ``pyspark.streaming.listener.StreamingListener`` port works unchanged;
times are milliseconds as in Spark, ``None`` where Spark has ``-1`` / None.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OutputOperationInfo:
    batch_time_ms: int
    id: int
    name: str
    description: str
    start_time_ms: int | None = None
    end_time_ms: int | None = None
    failure_reason: str | None = None

    def batchTime(self) -> int:
        return self.batch_time_ms

    def startTime(self) -> int | None:
        return self.start_time_ms

    def endTime(self) -> int | None:
        return self.end_time_ms

    def failureReason(self) -> str | None:
        return self.failure_reason

    def duration(self) -> int | None:
        if self.start_time_ms is None or self.end_time_ms is None:
            return None
        return self.end_time_ms - self.start_time_ms


@dataclass
class BatchInfo:
    batch_time_ms: int
    num_records_per_stream: dict[int, int]
    submission_time_ms: int
    processing_start_time_ms: int | None = None
    processing_end_time_ms: int | None = None
    output_operations: dict[int, OutputOperationInfo] = field(default_factory=dict)

    def batchTime(self) -> int:
        return self.batch_time_ms

    def numRecords(self) -> int:
        return sum(self.num_records_per_stream.values())

    def submissionTime(self) -> int:
        return self.submission_time_ms

    def processingStartTime(self) -> int | None:
        return self.processing_start_time_ms

    def processingEndTime(self) -> int | None:
        return self.processing_end_time_ms

    def schedulingDelay(self) -> int | None:
        if self.processing_start_time_ms is None:
            return None
        return self.processing_start_time_ms - self.submission_time_ms

    def processingDelay(self) -> int | None:
        if self.processing_start_time_ms is None or self.processing_end_time_ms is None:
            return None
        return self.processing_end_time_ms - self.processing_start_time_ms

    def totalDelay(self) -> int | None:
        if self.processing_end_time_ms is None:
            return None
        return self.processing_end_time_ms - self.submission_time_ms

    def outputOperationInfos(self) -> dict[int, OutputOperationInfo]:
        return self.output_operations


@dataclass(frozen=True)
class ReceiverInfo:
    stream_id: int
    name: str
    active: bool
    location: str
    executor_id: str
    last_error_message: str = ""
    last_error: str = ""

    def streamId(self) -> int:
        return self.stream_id

    def lastErrorMessage(self) -> str:
        return self.last_error_message

    def lastError(self) -> str:
        return self.last_error

    def executorId(self) -> str:
        return self.executor_id
