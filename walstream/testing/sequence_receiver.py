"""SequenceReceiver: ``<prefix>-0``, ``<prefix>-1``, ... up to ``total``, each item
stored with its position, so that a relaunched receiver resumes after what the
driver acknowledged: every item reaches the driver exactly once, which a test
checks by the items alone."""

from __future__ import annotations

from walstream.receiver.rate_receiver import RateGeneratorReceiver


class SequenceReceiver(RateGeneratorReceiver):
    def __init__(self, total: int, rate: float = 1000.0, prefix: str = "item") -> None:
        super().__init__(rate, seed=0, total=total)
        self.prefix = prefix

    @property
    def source_name(self) -> str:
        return f"sequence-{self.prefix}"

    def record(self, i: int) -> str:
        return f"{self.prefix}-{i}"
