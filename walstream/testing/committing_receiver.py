"""A reliable custom receiver whose source remembers only what was acknowledged: a
Kafka consumer group read from its committed offsets, each poll batch stored as a
block of its own (``store(list)``: stored and reported before it returns), then
committed. The driver keeps no positions for it (it reports no source ranges), so
a block the driver acknowledged but never counts is lost for good: the test of a
driver that answers only while it leads.

Its source redelivers what it did not learn was safe, so this receiver is exact
only where each block's outcome is known to it. Two moments are not: ``store``
raising (the driver may have logged the block before its answer was refused or
lost, as when its lease ran out in between) and a commit that fails or never
returns after ``store`` did. A block caught there is read again and may count
twice: at least once, the window the architecture names for receivers without
source positions. With ``journal`` set, the receiver appends one JSON line per
step of each block to that file (``storing`` with the block's lines, ``stored``,
``committed``; ``pid``, a run id and a sequence number name the block), so a
checker can tell the blocks whose outcome stayed open (no ``committed`` line) from
the settled ones and accept a doubling only from those.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from walstream.receiver.receiver import Receiver
from walstream.testing.chaos_app import decode_value


class CommittingKafkaReceiver(Receiver):
    def __init__(self, bootstrap: str, topic: str, group: str,
                 journal: str | None = None) -> None:
        super().__init__()
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.journal = journal
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

    def _note(self, entry: dict[str, Any]) -> None:
        """One journal line, appended in a single write (the old and the new leader's
        receivers may append at once)."""
        if self.journal is None:
            return
        line = (json.dumps({"pid": os.getpid(), **entry}) + "\n").encode()
        fd = os.open(self.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        stopped = self.stopped_event()
        run, seq = uuid.uuid4().hex[:8], 0
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
                seq += 1
                block = {"run": run, "seq": seq}
                if lines:
                    self._note({**block, "step": "storing",
                                "words": Counter(w for line in lines for w in line.split())})
                    self.store(lines)  # returns once the driver acknowledged the block
                    self._note({**block, "step": "stored"})
                # Only now does the source learn the data is safe.
                consumer.commit(offsets=[TopicPartition(self.topic, 0,
                                                        int(records[-1].offset() or 0) + 1)],
                                asynchronous=False)
                if lines:
                    self._note({**block, "step": "committed"})
        except Exception as exc:
            if not stopped.is_set():
                self.restart(f"committing receiver failed: {exc}", exc)
        finally:
            consumer.close()


def open_blocks(journal: Path) -> list[Counter[str]]:
    """The words of each block in ``journal`` whose outcome its receiver never learnt
    (a ``storing`` line without its ``committed`` line), in journal order."""
    from walstream.testing.chaos_process import read_jsonl

    began: dict[tuple[int, str, int], Counter[str]] = {}
    settled: set[tuple[int, str, int]] = set()
    for e in read_jsonl(journal):
        key = (e["pid"], e["run"], e["seq"])
        if e["step"] == "storing":
            began[key] = Counter(e["words"])
        elif e["step"] == "committed":
            settled.add(key)
    return [words for key, words in began.items() if key not in settled]
