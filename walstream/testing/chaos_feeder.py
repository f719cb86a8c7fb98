"""The chaos harness's input: seeded source records, some bad, released in tranches.

Step 2 of :mod:`walstream.testing.chaos`: expected word counts come only from good
records whose delivery the broker acknowledged.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

from walstream.kafka_logging import with_logger
from walstream.receiver.rate_receiver import generated_line
from walstream.testing.chaos_app import MAX_VALUE_BYTES
from walstream.testing.chaos_config import ChaosConfig


def _bad_record(rng: random.Random, i: int) -> bytes:
    kind = i % 3
    if kind == 0:
        return b"v1|" + bytes(rng.randrange(0x80, 0x100) for _ in range(12))  # not UTF-8
    if kind == 1:
        return b"v7|" + generated_line(rng.randrange(1000), i).encode()  # unknown version
    return b"v1|" + b"oversize " * (MAX_VALUE_BYTES // 9 + 10)  # too large


class Feeder(threading.Thread):
    """Step 2: seeded source records at a fixed rate; counts what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, cfg: ChaosConfig,
                 first_tranche: int | None = None) -> None:
        super().__init__(name="chaos-feeder", daemon=True)
        self.bootstrap, self.topic, self.cfg = bootstrap, topic, cfg
        self.expected: Counter[str] = Counter()
        self.good = self.bad = 0
        self.failed: list[str] = []
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._gate = threading.Condition()
        # Records it may produce so far: all, or a first tranche (then see allow).
        self._allowed = cfg.records if first_tranche is None else first_tranche

    def allow(self, n: int) -> None:
        """Let the feeder produce up to ``n`` records (it waits at the limit)."""
        with self._gate:
            self._allowed = min(self.cfg.records, max(self._allowed, n))
            self._gate.notify_all()

    def _wait_allowed(self, i: int, producer: Any) -> bool:
        """Wait until record ``i`` may be produced (what was produced is flushed
        first, so it is acknowledged and counted); True if it had to wait."""
        with self._gate:
            if i < self._allowed:
                return False
        producer.flush(30)
        with self._gate:
            while i >= self._allowed:
                self._gate.wait(1.0)
        return True

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(with_logger({"bootstrap.servers": self.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 50,
                             "delivery.timeout.ms": 300_000,
                             "message.max.bytes": 2 * MAX_VALUE_BYTES + 65536}))
        rng = random.Random(self.cfg.seed)
        start = time.monotonic()
        n_bad = 0
        try:
            for i in range(self.cfg.records):
                if self._wait_allowed(i, producer):
                    start = time.monotonic() - i / self.cfg.rate  # pace from now on
                line = generated_line(self.cfg.seed, i)
                producer.produce(self.topic, b"v1|" + line.encode(),
                                 on_delivery=self._delivered(line))
                if i % self.cfg.bad_every == self.cfg.bad_every // 2:
                    producer.produce(self.topic, _bad_record(rng, n_bad),
                                     on_delivery=self._delivered(None))
                    n_bad += 1
                producer.poll(0)
                # Bursts twice a second: the durable broker stores each produce batch
                # as an S3 object and a fetch reads them one by one, so a record per
                # batch would make every read crawl (docs/decisions/chaos-harness-pacing.md).
                delay = start + (i + 1) / self.cfg.rate - time.monotonic()
                if delay > 0.5:
                    producer.flush(30)
                    time.sleep(delay)
            left = producer.flush(330)
            if left:
                self.failed.append(f"{left} source records never acknowledged")
        finally:
            self.done.set()

    def _delivered(self, line: str | None) -> Any:
        def cb(err: Any, _msg: Any) -> None:
            with self._lock:
                if err is not None:
                    self.failed.append(str(err))
                elif line is None:
                    self.bad += 1
                else:
                    self.good += 1
                    self.expected.update(line.split())
        return cb
