"""What the scheduler records about batches, receivers and output operations.

Accessors have the shapes PySpark's listener objects have, so a
``pyspark.streaming.listener.StreamingListener`` port works unchanged:
``batchTime()`` is a :class:`Time` (an int of milliseconds with
``milliseconds()``), times and delays not known yet are ``-1``, output
operations answer ``id()``, ``name()``, ``description()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class Time(int):
    """A batch time in milliseconds, with PySpark's ``milliseconds()`` accessor."""

    def milliseconds(self) -> int:
        return int(self)


def _or_minus_one(value: int | None) -> int:
    return -1 if value is None else value


@dataclass
class StreamInputInfo:
    input_stream_id: int
    num_records: int

    def inputStreamId(self) -> int:
        return self.input_stream_id

    def numRecords(self) -> int:
        return self.num_records

    def metadata(self) -> dict[str, object]:
        return {}


@dataclass
class OutputOperationInfo:
    batch_time_ms: int
    op_id: int
    op_name: str
    op_description: str
    start_time_ms: int | None = None
    end_time_ms: int | None = None
    failure_reason: str | None = None

    def batchTime(self) -> Time:
        return Time(self.batch_time_ms)

    def id(self) -> int:
        return self.op_id

    def name(self) -> str:
        return self.op_name

    def description(self) -> str:
        return self.op_description

    def startTime(self) -> int:
        return _or_minus_one(self.start_time_ms)

    def endTime(self) -> int:
        return _or_minus_one(self.end_time_ms)

    def failureReason(self) -> str | None:
        return self.failure_reason

    def duration(self) -> int:
        if self.start_time_ms is None or self.end_time_ms is None:
            return -1
        return self.end_time_ms - self.start_time_ms


@dataclass
class BatchInfo:
    batch_time_ms: int
    num_records_per_stream: dict[int, int]
    submission_time_ms: int
    processing_start_time_ms: int | None = None
    processing_end_time_ms: int | None = None
    output_operations: dict[int, OutputOperationInfo] = field(default_factory=dict)

    def batchTime(self) -> Time:
        return Time(self.batch_time_ms)

    def streamIdToInputInfo(self) -> dict[int, StreamInputInfo]:
        return {s: StreamInputInfo(s, n) for s, n in self.num_records_per_stream.items()}

    def numRecords(self) -> int:
        return sum(self.num_records_per_stream.values())

    def submissionTime(self) -> int:
        return self.submission_time_ms

    def processingStartTime(self) -> int:
        return _or_minus_one(self.processing_start_time_ms)

    def processingEndTime(self) -> int:
        return _or_minus_one(self.processing_end_time_ms)

    def schedulingDelay(self) -> int:
        if self.processing_start_time_ms is None:
            return -1
        return self.processing_start_time_ms - self.submission_time_ms

    def processingDelay(self) -> int:
        if self.processing_start_time_ms is None or self.processing_end_time_ms is None:
            return -1
        return self.processing_end_time_ms - self.processing_start_time_ms

    def totalDelay(self) -> int:
        if self.processing_end_time_ms is None:
            return -1
        return self.processing_end_time_ms - self.submission_time_ms

    def outputOperationInfos(self) -> dict[int, OutputOperationInfo]:
        return self.output_operations


@dataclass(frozen=True)
class ReceiverInfo:
    stream_id: int
    receiver_name: str
    is_active: bool
    receiver_location: str
    executor_id: str
    last_error_message: str = ""
    last_error: str = ""

    def streamId(self) -> int:
        return self.stream_id

    def name(self) -> str:
        return self.receiver_name

    def active(self) -> bool:
        return self.is_active

    def location(self) -> str:
        return self.receiver_location

    def lastErrorMessage(self) -> str:
        return self.last_error_message

    def lastError(self) -> str:
        return self.last_error

    def executorId(self) -> str:
        return self.executor_id
