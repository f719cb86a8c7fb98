"""A standby keeps the newest checkpoint read and checked while it stands by
(driver/ha_context.py): a newer compatible one replaces the one it started with; one
its graph cannot restore stops it at once with the reason, not at its takeover."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from checkpoint.data import CheckpointData, StateRdd
from checkpoint.files import read_latest, write_checkpoint
from driver import ha_context
from driver.ha_context import HighAvailabilityMixin
from driver.recovery import ContextView, IncompatibleGraphError
from tests.checkpoint.helpers import make_data

SHAPE = ("receiver:R#0()", "updateStateByKey#1(0)", "output:foreachRDD#2(1)")


class Graph:
    def __init__(self, fingerprint: str, shape: Sequence[str]) -> None:
        self._fingerprint, self._shape = fingerprint, shape

    def fingerprint(self) -> str:
        return self._fingerprint

    def shape(self) -> Sequence[str]:
        return self._shape


class Standby(HighAvailabilityMixin):
    """The mixin's standby side over a real checkpoint directory, without Spark."""

    def __init__(self, directory: Path, recovered: CheckpointData) -> None:
        self._checkpoint_dir = str(directory)
        self._recovered = recovered
        self._engine = None
        self._ha_lock = threading.Lock()
        self.stopped: list[BaseException] = []
        self.view = ContextView(graph=Graph("0123456789abcdef", SHAPE),  # type: ignore[arg-type]
                                batch_ms=1000, conf={}, checkpoint_dir=str(directory))

    def recovery_view(self) -> Any:
        return self.view

    def _stop_on_fatal_error(self, exc: BaseException) -> None:
        self.stopped.append(exc)


def _until(cond: Any, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture(autouse=True)
def quick_reload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ha_context, "CHECKPOINT_RELOAD_S", 0.05)


def test_a_standby_takes_newer_compatible_checkpoints_while_standing_by(tmp_path: Path) -> None:
    standby = Standby(tmp_path, make_data(1000))
    stop = threading.Event()
    thread = threading.Thread(target=standby._reload_checkpoints, args=(stop,), daemon=True)
    thread.start()
    try:
        write_checkpoint(tmp_path, make_data(2000))
        assert _until(lambda: standby._recovered is not None
                      and standby._recovered.checkpoint_time_ms == 2000)
        write_checkpoint(tmp_path, make_data(3000))
        assert _until(lambda: standby._recovered is not None
                      and standby._recovered.checkpoint_time_ms == 3000)
        assert standby.stopped == []
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()


def test_a_standby_whose_graph_cannot_restore_the_leaders_checkpoint_stops_early(
        tmp_path: Path) -> None:
    standby = Standby(tmp_path, make_data(1000))
    stop = threading.Event()
    thread = threading.Thread(target=standby._reload_checkpoints, args=(stop,), daemon=True)
    thread.start()
    try:
        # The leader runs other code: another stateful operator.
        write_checkpoint(tmp_path, make_data(
            2000, fingerprint="fedcba9876543210",
            graph_shape=("receiver:R#0()", "reduceByKeyAndWindow#1(0)",
                         "output:foreachRDD#2(1)")))
        assert _until(lambda: bool(standby.stopped))
        thread.join(5)
        assert not thread.is_alive()  # it stops reading once it reported
    finally:
        stop.set()
    assert isinstance(standby.stopped[0], IncompatibleGraphError)
    assert standby._recovered is not None and standby._recovered.checkpoint_time_ms == 1000


def test_the_second_copy_of_a_checkpoint_replaces_the_first_one_held(tmp_path: Path) -> None:
    """A batch time is checkpointed when generated (pending) and again when
    completed (nothing pending, newer state), under one name: a standby that held
    the first copy takes the second, so a takeover never re-runs the done batch."""
    generated = make_data(2000, pending_times_ms=(2000,))
    standby = Standby(tmp_path, make_data(1000))
    write_checkpoint(tmp_path, generated)
    standby._adopt(read_latest(tmp_path))  # type: ignore[arg-type]
    assert standby._recovered == generated
    completed = make_data(2000, pending_times_ms=(), written_wall_ms=generated.written_wall_ms
                          + 5000, state_rdds=(StateRdd("updateStateByKey#1(0)", 2000,
                                                        "/rdds/rdd-2000-done"),))
    write_checkpoint(tmp_path, completed)
    standby._adopt(read_latest(tmp_path))  # type: ignore[arg-type]
    assert standby._recovered == completed
    assert standby._recovered.pending_times_ms == ()
