"""``walstream inspect``: it shows exactly the state a restart's tracker replay rebuilds.

Against the real embedded broker: the driver WAL is written by a real tracker
over Kafka, with the application's WAL options (a non-default topic prefix, as
recorded in the checkpoint's conf) and a corrupt event in the middle.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.checkpoint.helpers import make_data
from walstream.checkpoint.files import write_checkpoint
from walstream.driver.dstream.checkpoint_inspect import inspect_checkpoint
from walstream.driver.engine_config import EngineConfig
from walstream.driver.scheduler.driver_wal import open_driver_wal
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.scheduler.wal_conf import TOPIC_PREFIX_KEY
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.wal import RecordHandle, WriteAheadLog

_ids = itertools.count()


def _block(stream: int) -> ReceivedBlockInfo:
    i = next(_ids)
    return ReceivedBlockInfo(stream, f"input-{stream}-{i}", 10, RecordHandle("w", 0, i),
                             (SourceRange("src", stream, i * 10, (i + 1) * 10),))


def _driver_wal(bootstrap: str, app: str, conf: dict[str, str]) -> WriteAheadLog:
    """The driver WAL as the engine opens it for an application with ``conf``."""
    cfg = EngineConfig.from_spark_conf(conf, app_id=app, batch_interval_ms=1000,
                                       bootstrap_servers=bootstrap)
    return open_driver_wal(bootstrap, cfg.app_id, cfg.wal_options)


def _recovered(bootstrap: str, app: str, conf: dict[str, str]) -> dict[str, Any]:
    """What ReceivedBlockTracker recovery (the engine's start) rebuilds."""
    tracker = ReceivedBlockTracker([0, 1], _driver_wal(bootstrap, app, conf))
    try:
        assert tracker.corrupt_events == 1
        state = tracker.state().to_json()
        return {"tracker": state,
                "positions": {str(s): [r.__dict__ for r in tracker.positions(s)]
                              for s in (0, 1)},
                "corrupt_events": tracker.corrupt_events}
    finally:
        tracker.stop()


@pytest.mark.parametrize("prefix", ["it.custom-prefix.", None],
                         ids=["custom-topic-prefix", "default-topic-prefix"])
def test_inspect_replays_what_tracker_recovery_replays_despite_a_corrupt_event(
        prefix: str | None, bootstrap: str, unique_name: Callable[[str], str],
        tmp_path: Path) -> None:
    app = unique_name("app")
    conf = {"spark.app.name": "inspect"}
    if prefix is not None:
        conf[TOPIC_PREFIX_KEY] = prefix  # recorded in the checkpoint's conf
    wal = _driver_wal(bootstrap, app, conf)
    live = ReceivedBlockTracker([0, 1], wal)
    try:
        for s in (0, 1, 0):
            assert live.add_block(_block(s))
        live.allocate_blocks_to_batch(2000)
        wal.write(b"not an event", 2000)  # a corrupt event in the middle of the log
        for s in (1, 0):
            assert live.add_block(_block(s))
        live.allocate_blocks_to_batch(3000)
        assert live.add_block(_block(0))
    finally:
        live.stop()
    write_checkpoint(tmp_path / "cp", make_data(3000, app_id=app, conf=conf))

    shown = inspect_checkpoint(str(tmp_path / "cp"), bootstrap)

    expected = _recovered(bootstrap, app, conf)
    assert shown["tracker"] == expected["tracker"]
    assert shown["positions"] == expected["positions"]
    assert shown["corrupt_events"] == expected["corrupt_events"] == 1
    assert shown["wal_options"] == ({"topic_prefix": prefix} if prefix else {})
    # Not vacuous: both batches and the trailing block came back.
    assert set(shown["tracker"]["allocated"]) == {"2000", "3000"}
    assert shown["tracker"]["unallocated"] != {}


def test_inspect_shows_the_fencing_cut_and_leaves_out_a_fenced_leaders_events(
        bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path) -> None:
    app = unique_name("app")
    conf = {"spark.app.name": "inspect"}
    old = ReceivedBlockTracker([0, 1], _driver_wal(bootstrap, app, conf), epoch=1)
    new: ReceivedBlockTracker | None = None
    try:
        assert old.add_block(_block(0))
        old.allocate_blocks_to_batch(2000)
        new = ReceivedBlockTracker([0, 1], _driver_wal(bootstrap, app, conf))  # replays
        new.start_epoch(2)  # the cut; the old leader, paused, writes on after it
        assert old.add_block(_block(1))
        old.allocate_blocks_to_batch(3000)
        assert new.add_block(_block(0))
        new.allocate_blocks_to_batch(4000)
        leader = new.state().to_json()
    finally:
        old.stop()
        if new is not None:
            new.stop()
    write_checkpoint(tmp_path / "cp", make_data(4000, app_id=app, conf=conf))

    shown = inspect_checkpoint(str(tmp_path / "cp"), bootstrap)

    assert shown["tracker"] == leader
    assert set(shown["tracker"]["allocated"]) == {"2000", "4000"}
    assert (shown["fence_epoch"], shown["fenced_events"]) == (2, 2)
    assert "1" not in shown["positions"] or shown["positions"]["1"] == []


def test_inspect_reads_every_epoch_log_of_a_highly_available_app(
        bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path) -> None:
    """Under HA each epoch writes its own log, linked to the cut it drew: inspect
    follows the chain as the engine does, so what the leader of epoch 1 logged
    shows (a plain log of the app's name holds epoch 0's events only)."""
    app = unique_name("ha-app")
    conf = {"spark.app.name": "inspect"}
    first = ReceivedBlockTracker([0, 1], _driver_wal(bootstrap, app, conf))
    try:
        assert first.add_block(_block(0))
        first.allocate_blocks_to_batch(2000)
    finally:
        first.stop()
    wal = _driver_wal(bootstrap, app, conf)
    leader = ReceivedBlockTracker([0, 1], wal)  # replays epoch 0
    try:
        follower = wal.follow()
        list(follower.drain_to_end(30))  # what a takeover reads before its cut
        wal.begin_epoch(1, follower)
        follower.close()
        leader.start_epoch(1)
        assert leader.add_block(_block(1))
        leader.allocate_blocks_to_batch(3000)
        assert leader.add_block(_block(0))
        expected = leader.state().to_json()
    finally:
        leader.stop()
    write_checkpoint(tmp_path / "cp", make_data(3000, app_id=app, conf=conf))

    shown = inspect_checkpoint(str(tmp_path / "cp"), bootstrap)

    assert shown["tracker"] == expected
    assert set(shown["tracker"]["allocated"]) == {"2000", "3000"}
    assert shown["tracker"]["unallocated"] != {}
    assert shown["fence_epoch"] == 1
