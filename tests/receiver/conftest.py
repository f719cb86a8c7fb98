"""Fixtures of the receiver tests: a WAL, a fake driver, and cleanup of what they start.

The doubles live in :mod:`tests.receiver.doubles` and the WAL and the waits in the
test kit (:mod:`walstream.testing`); tests import those, never this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.receiver.doubles import STREAM, FakeReporter, Script, ScriptReceiver
from walstream.receiver.block_generator import BlockGenerator, BlockGeneratorConfig
from walstream.receiver.supervisor import ReceiverSupervisor
from walstream.receiver.supervisor_config import SupervisorConfig
from walstream.testing import AsyncMemoryWAL, MemoryWAL


@pytest.fixture(params=["sync", "async"])
def wal(request: pytest.FixtureRequest) -> Iterator[MemoryWAL]:
    """Every supervisor test runs against a WAL that writes synchronously and against
    one that pipelines its writes (the supervisor's pipelined store)."""
    log = MemoryWAL() if request.param == "sync" else AsyncMemoryWAL()
    yield log
    log.close()


@pytest.fixture
def reporter(wal: MemoryWAL) -> FakeReporter:
    return FakeReporter(wal)


@pytest.fixture
def generators() -> Iterator[list[BlockGenerator]]:
    """Stop every generator a test made, even when the test failed half way."""
    made: list[BlockGenerator] = []
    yield made
    for g in made:
        g.stop(timeout_s=2.0)


# -- ReceiverSupervisor tests -------------------------------------------------------------


@pytest.fixture
def supervisors() -> Iterator[list[ReceiverSupervisor]]:
    made: list[ReceiverSupervisor] = []
    yield made
    for sup in made:
        sup.stop("test teardown", None)


@pytest.fixture
def make_sup(
    supervisors: list[ReceiverSupervisor], wal: MemoryWAL, reporter: FakeReporter
) -> Callable[..., tuple[ReceiverSupervisor, ScriptReceiver]]:
    def make(script: Script | None = None, gen: dict[str, Any] | None = None,
             **cfg: Any) -> tuple[ReceiverSupervisor, ScriptReceiver]:
        cfg.setdefault("store_backoff_s", 0.01)
        cfg.setdefault("report_backoff_s", 0.01)
        cfg.setdefault("restart_delay_s", 0.05)
        receiver = ScriptReceiver(script)
        sup = ReceiverSupervisor(
            receiver, STREAM, wal, reporter,
            generator_config=BlockGeneratorConfig(**{"block_interval_ms": 20, **(gen or {})}),
            config=SupervisorConfig(**cfg),
        )
        supervisors.append(sup)
        return sup, receiver

    return make
