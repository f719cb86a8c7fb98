"""DeliveryAck: one WAL record's frames, acknowledged together.

A record larger than a chunk is produced as several frames. Its handle exists only
once every frame's delivery report came back without error and the frames landed
at consecutive offsets (readers reassemble them in order); otherwise the record's
Future fails with :class:`~walstream.wal.errors.WalWriteError`
(:class:`~walstream.wal.errors.WalWriteTimeoutError` when a frame timed out).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaError, Message

from walstream.wal.errors import WalWriteError, WalWriteTimeoutError
from walstream.wal.handle import RecordHandle


class DeliveryAck:
    """Collects the delivery reports of one record's frames into a Future of its handle."""

    def __init__(self, log_name: str, topic: str, partition: int, frames: int) -> None:
        self.log_name = log_name
        self.topic = topic
        self.partition = partition
        self.remaining = frames
        self.offsets: list[int] = [-1] * frames
        self.error: KafkaError | None = None
        self.future: Future[RecordHandle] = Future()
        self.future.set_running_or_notify_cancel()
        self._lock = threading.Lock()

    def callback(self, index: int) -> Any:
        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            with self._lock:
                if err is not None:
                    self.error = self.error or err
                else:
                    self.offsets[index] = int(msg.offset() or 0)
                self.remaining -= 1
                if self.remaining == 0:
                    self._resolve()

        return on_delivery

    def _resolve(self) -> None:
        if self.error is not None:
            cls = (WalWriteTimeoutError if self.error.code() == KafkaError._MSG_TIMED_OUT
                   else WalWriteError)
            self.future.set_exception(cls(
                f"WAL {self.log_name!r}: write to {self.topic} failed: {self.error.str()}"))
            return
        first = self.offsets[0]
        if self.offsets != list(range(first, first + len(self.offsets))):
            self.future.set_exception(WalWriteError(
                f"WAL {self.log_name!r}: chunks landed apart at {self.offsets}"))
            return
        self.future.set_result(RecordHandle(self.topic, self.partition, first, len(self.offsets)))
