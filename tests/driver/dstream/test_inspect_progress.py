"""``walstream inspect``'s replay progress: a tqdm bar on a terminal, plain lines
otherwise (at most every few seconds by an injected clock, and once at the end), on
their own stream; the JSON on standard output is unchanged."""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.checkpoint.helpers import make_data
from walstream.checkpoint.files import write_checkpoint
from walstream.cli import main
from walstream.driver.dstream.checkpoint_inspect import PROGRESS_LINE_INTERVAL_S, replay_progress
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.progress import ProgressReporter
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.wal import BatchedWriteAheadLog, KafkaWriteAheadLog, RecordHandle

_ids = itertools.count()


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def run(reporter: ProgressReporter, clock: Clock, events: int, step_s: float) -> None:
    reporter.start()
    for _ in range(events):
        clock.now += step_s
        reporter.advance()
    reporter.finish()


def test_lines_when_not_a_terminal() -> None:
    out, clock = io.StringIO(), Clock()
    reporter = replay_progress("auto", out, clock)
    assert reporter is not None and reporter.interval_s == PROGRESS_LINE_INTERVAL_S
    run(reporter, clock, 12, 1.0)
    assert out.getvalue().splitlines() == [
        "walstream inspect: replaying the driver WAL: 5 events in 5.0 s, 1.0 events/s "
        "(total not known before the end)",
        "walstream inspect: replaying the driver WAL: 10 events in 10.0 s, 1.0 events/s "
        "(total not known before the end)",
        "walstream inspect: replayed the driver WAL: 12 events in 12.0 s",
    ]


def test_a_bar_on_a_terminal() -> None:
    out, clock = Tty(), Clock()
    reporter = replay_progress("auto", out, clock)
    assert reporter is not None
    run(reporter, clock, 30, 0.05)
    shown = out.getvalue()
    assert "replaying the driver WAL" in shown
    assert "30 events" in shown.split("\r")[-1]  # the bar's last state: every event
    assert replay_progress("none", out) is None
    with pytest.raises(ValueError, match="progress mode"):
        replay_progress("fancy", out)


def test_the_cli_keeps_stdout_json_and_writes_progress_to_stderr(
        bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    app = unique_name("app")
    live = ReceivedBlockTracker([0], BatchedWriteAheadLog(
        KafkaWriteAheadLog(bootstrap, f"{app}-driver")))
    try:
        for _ in range(3):
            n = next(_ids)
            assert live.add_block(ReceivedBlockInfo(
                0, f"input-0-{n}", 10, RecordHandle("w", 0, n),
                (SourceRange("src", 0, n * 10, (n + 1) * 10),)))
        live.allocate_blocks_to_batch(2000)
    finally:
        live.stop()
    write_checkpoint(tmp_path / "cp", make_data(2000, app_id=app, conf={}))

    assert main(["inspect", str(tmp_path / "cp"), "--bootstrap", bootstrap,
                 "--progress", "lines"]) == 0
    captured = capsys.readouterr()
    shown = json.loads(captured.out)
    assert shown["tracker"]["allocated"]["2000"]["0"] != []
    assert captured.err.splitlines()[-1].startswith(
        "walstream inspect: replayed the driver WAL: 4 events in ")
