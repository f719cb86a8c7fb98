"""A reliable custom receiver whose source remembers only what was acknowledged: a
Kafka consumer group read from its committed offsets, each poll batch stored as a
block of its own (``store(list)``: stored and reported before it returns), then
committed. The driver keeps no positions for it (it reports no source ranges), so
a block the driver acknowledged but never counts is lost for good: the test of a
driver that answers only while it leads."""

from __future__ import annotations

import threading
from typing import Any

from receiver.receiver import Receiver
from walstream.testing.chaos_app import decode_value


class CommittingKafkaReceiver(Receiver):
    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__()
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self._thread: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_thread"] = None
        return state

    def onStart(self) -> None:
        self._thread = threading.Thread(target=self._run, name="committing-receiver",
                                        daemon=True)
        self._thread.start()

    def onStop(self) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._thread = None

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        stopped = self.stopped_event()
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             **self.kafka_settings})
        try:
            committed = consumer.committed([TopicPartition(self.topic, 0)], timeout=30)[0]
            start = committed.offset if committed.offset >= 0 else 0
            consumer.assign([TopicPartition(self.topic, 0, start)])
            while not stopped.is_set():
                batch = consumer.consume(500, timeout=0.2)
                records = [r for r in batch if r.error() is None]
                if not records:
                    continue
                lines = []
                for r in records:
                    try:
                        lines.append(decode_value(r.value()))
                    except Exception:  # bad input: skipped, as the direct stream does
                        continue
                if lines:
                    self.store(lines)  # returns once the driver acknowledged the block
                # Only now does the source learn the data is safe.
                consumer.commit(offsets=[TopicPartition(self.topic, 0,
                                                        int(records[-1].offset() or 0) + 1)],
                                asynchronous=False)
        except Exception as exc:
            if not stopped.is_set():
                self.restart(f"committing receiver failed: {exc}", exc)
        finally:
            consumer.close()
