"""A standby keeps the newest checkpoint read and checked while it stands by
(driver/ha/takeover.py, :class:`Takeover`): a newer compatible one replaces the one
it started with; one its graph cannot restore stops it at once with the reason, not
at its takeover."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.checkpoint.helpers import make_data
from walstream.checkpoint.data import CheckpointData, StateRdd
from walstream.checkpoint.files import read_latest, write_checkpoint
from walstream.driver.dstream.recovery import ContextView, IncompatibleGraphError
from walstream.driver.ha import takeover as ha_context
from walstream.driver.ha.takeover import Takeover

SHAPE = ("receiver:R#0()", "updateStateByKey#1(0)", "output:foreachRDD#2(1)")


class Graph:
    def __init__(self, fingerprint: str, shape: Sequence[str]) -> None:
        self._fingerprint, self._shape = fingerprint, shape

    def fingerprint(self) -> str:
        return self._fingerprint

    def shape(self) -> Sequence[str]:
        return self._shape


class Standby:
    """A :class:`Takeover` standing by over a real checkpoint directory, without Spark;
    ``stopped`` holds what it stopped the context for."""

    def __init__(self, directory: Path, recovered: CheckpointData) -> None:
        self.stopped: list[BaseException] = []
        view = ContextView(graph=Graph("0123456789abcdef", SHAPE),  # type: ignore[arg-type]
                           batch_ms=1000, conf={}, checkpoint_dir=str(directory))
        self.takeover = Takeover(
            None, None, str(directory), recovered,  # type: ignore[arg-type]
            recovery_view=lambda: view, run_engine=_never, use_checkpoint_writer=_never,
            on_checkpoint_error=_never, on_lost=self.stopped.append)
        self._reload_checkpoints = self.takeover.reload_checkpoints
        self._adopt = self.takeover.adopt

    @property
    def _recovered(self) -> CheckpointData | None:
        return self.takeover.recovered


def _never(*args: Any) -> None:
    raise AssertionError(f"not while standing by: {args}")


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


class _Recorder:
    def __init__(self, calls: list[str], role: str = "leader") -> None:
        self.calls, self.role = calls, role

    def stop(self, *_args: Any, **kwargs: Any) -> None:
        if "before_close" in kwargs:  # the engine: receivers first, then the rest
            self.calls.append("receivers stopped and drained")
            kwargs["before_close"]()
            self.calls.append("engine stopped")
        else:
            self.calls.append("lease released" if self.role == "leader" else "standby stopped")


@pytest.mark.parametrize("role", ["leader", "standby"])
def test_a_leader_releases_its_lease_only_after_its_receivers_stopped(role: str) -> None:
    """A lease released first lets the next leader cut the driver WAL before this
    driver's receivers report their last blocks: logged past the cut, counted by
    no batch, yet acknowledged. A standby stops watching first instead, so it
    cannot take over while it stops."""
    from walstream.driver.dstream.streaming_context import StreamingContext, StreamingContextState

    calls: list[str] = []
    ssc = StreamingContext.__new__(StreamingContext)
    ssc._state = StreamingContextState.ACTIVE
    ssc._stopped_on_error = False
    ssc._takeover = _Recorder(calls, role)  # type: ignore[assignment]
    ssc._driver_gc = None
    ssc._engine = _Recorder(calls)  # type: ignore[assignment]
    ssc._checkpoint_writer = None
    ssc._graph = type("G", (), {"streams": []})()  # type: ignore[assignment]
    ssc.stop(stopSparkContext=False, stopGraceFully=True)
    if role == "leader":
        assert calls == ["receivers stopped and drained", "engine stopped", "lease released"]
    else:
        assert calls == ["standby stopped", "receivers stopped and drained", "engine stopped"]
    assert ssc._state is StreamingContextState.STOPPED
