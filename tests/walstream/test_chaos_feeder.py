"""The chaos harness's feeder holds input back until it is released (a reserve for each
kill point on the block path), so such a point has records to fire on however late it comes."""

from __future__ import annotations

import time
from collections.abc import Callable

from walstream.testing import wait_until
from walstream.testing.chaos_config import ChaosConfig
from walstream.testing.chaos_feeder import Feeder


def _settled(feeder: Feeder, expect: int) -> int:
    wait_until(lambda: feeder.good + feeder.bad >= expect, 30, f"{expect} records fed",
               poll_s=0.05, details=lambda: f"{feeder.good} good, {feeder.bad} bad, "
                                            f"failures {feeder.failed}")
    time.sleep(0.5)  # it must not go beyond
    return feeder.good


def test_feeder_produces_only_what_was_released(
    bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    cfg = ChaosConfig(records=30, rate=1000.0, bad_every=1000)
    feeder = Feeder(bootstrap, topic_factory("feed"), cfg, first_tranche=10)
    feeder.start()
    assert _settled(feeder, 10) == 10 and not feeder.done.is_set()
    feeder.allow(25)
    assert _settled(feeder, 25) == 25 and not feeder.done.is_set()
    feeder.allow(5)  # never goes back
    feeder.allow(30)
    assert feeder.done.wait(30)
    assert feeder.good == 30 and not feeder.failed
    assert sum(feeder.expected.values()) > 0


def test_feeder_without_a_tranche_feeds_everything(
    bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    feeder = Feeder(bootstrap, topic_factory("feed"), ChaosConfig(records=20, rate=1000.0))
    feeder.start()
    assert feeder.done.wait(30)
    assert feeder.good == 20
