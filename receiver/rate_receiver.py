"""RateGeneratorReceiver: deterministic lines at a fixed rate, for demos and benchmarks.

Record ``i`` is a pure function of ``(seed, i)``, and each record carries the
position ``("generator-<seed>", 0, i)``, so a relaunched receiver resumes at the
position the driver acknowledged and the stream as a whole is exactly once,
like a Kafka source. ``total`` bounds the stream (None: unbounded).
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from walstream.receiver.errors import BlockGeneratorStoppedError
from walstream.receiver.receiver import Receiver

WORDS = ("kafka", "spark", "stream", "block", "batch", "driver", "receiver", "wal",
         "replay", "offset", "commit", "checkpoint")


def generated_line(seed: int, i: int, words: int = 8) -> str:
    """Record ``i`` of the stream with this seed (the same in every process)."""
    rng = random.Random(seed * 1_000_003 + i)
    return " ".join(rng.choice(WORDS) for _ in range(1 + rng.randrange(words)))


class RateGeneratorReceiver(Receiver):
    def __init__(self, rate: float, seed: int = 0, total: int | None = None,
                 words_per_line: int = 8) -> None:
        super().__init__()
        self.rate = rate
        self.seed = seed
        self.total = total
        self.words_per_line = words_per_line
        self._thread: threading.Thread | None = None

    @property
    def source_name(self) -> str:
        return f"generator-{self.seed}"

    def source_topics(self) -> list[str]:
        return [self.source_name]

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_thread"] = None
        return state

    def record(self, i: int) -> str:
        """Record ``i`` of this receiver's sequence: the same in every process."""
        return generated_line(self.seed, i, self.words_per_line)

    def onStart(self) -> None:
        start = 0
        for r in self.supervisor.start_positions:
            if r.topic == self.source_name:
                start = max(start, r.until_offset)
        self._thread = threading.Thread(target=self._generate, args=(start,),
                                        name="rate-generator", daemon=True)
        self._thread.start()

    def onStop(self) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self._thread = None

    def _generate(self, start: int) -> None:
        stopped = self.stopped_event()
        i = start
        t0, sent = time.monotonic(), 0
        try:
            while not stopped.is_set() and (self.total is None or i < self.total):
                self.store(self.record(i), (self.source_name, 0, i))
                i += 1
                sent += 1
                if self.rate > 0:
                    ahead = sent / self.rate - (time.monotonic() - t0)
                    if ahead > 0.005 and stopped.wait(ahead):
                        return
        except BlockGeneratorStoppedError:
            return
