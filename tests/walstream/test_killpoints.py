"""Kill points armed by environment variable and, at run time, by file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from walstream import killpoints

CHILD = """
import sys, time
from pathlib import Path
from walstream.killpoints import kill_point
go, n = Path(sys.argv[1]), int(sys.argv[2])
for i in range(n):
    while not go.exists():  # the parent steps us through the crossings
        time.sleep(0.01)
    go.unlink()
    kill_point("other.point")
    kill_point("test.point")
    print(i, flush=True)
"""


def _child(tmp_path: Path, env: dict[str, str], n: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "go"), str(n)],
                            env={**os.environ, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _step(proc: subprocess.Popen[str], tmp_path: Path) -> str:
    (tmp_path / "go").touch()
    return (proc.stdout.readline() if proc.stdout else "").strip()


def test_env_armed_point_dies_on_its_nth_crossing(tmp_path: Path) -> None:
    proc = _child(tmp_path, {killpoints.ENV: "test.point:3"}, 5)
    assert [_step(proc, tmp_path) for _ in range(3)] == ["0", "1", ""]
    assert proc.wait(30) == -signal.SIGKILL
    assert "kill point test.point reached" in (proc.stderr.read() if proc.stderr else "")


def test_file_arms_a_running_process_and_fires_once(tmp_path: Path) -> None:
    arm = tmp_path / "arm"
    env = {killpoints.FILE_ENV: str(arm)}
    proc = _child(tmp_path, env, 6)
    # Crossings before the file exists do not count.
    assert [_step(proc, tmp_path) for _ in range(2)] == ["0", "1"]
    killpoints.arm_file(arm, "test.point", 2)
    assert _step(proc, tmp_path) == "2"  # first crossing since arming: lives
    assert _step(proc, tmp_path) == ""  # second: dies
    assert proc.wait(30) == -signal.SIGKILL  # second: dies
    assert not arm.exists(), "the process that fired removes the arming"
    # A second process started with the same variable is not armed any more.
    again = _child(tmp_path, env, 2)
    assert [_step(again, tmp_path) for _ in range(2)] == ["0", "1"]
    assert again.wait(30) == 0


def test_file_naming_another_point_does_not_fire(tmp_path: Path) -> None:
    arm = tmp_path / "arm"
    killpoints.arm_file(arm, "nowhere.point")
    proc = _child(tmp_path, {killpoints.FILE_ENV: str(arm)}, 2)
    assert [_step(proc, tmp_path) for _ in range(2)] == ["0", "1"]
    assert proc.wait(30) == 0
    assert arm.exists()
