"""The worker daemon's preloading: every module it names imports, and none starts a
thread (a process must not fork while other threads run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from walstream import worker_daemon

_IMPORT_ALL = """
import importlib, os, sys
from walstream.worker_daemon import PRELOAD
for name in PRELOAD:
    importlib.import_module(name)  # no suppression here: a typo or a broken module fails
print(len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_the_preloaded_modules_import_without_starting_a_thread() -> None:
    out = subprocess.run([sys.executable, "-c", _IMPORT_ALL], check=True,
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["1"], out.stderr  # the main thread only, native ones too


def test_it_preloads_what_a_batch_task_and_a_receiver_task_unpickle() -> None:
    for name in ("pyspark.worker", "driver.block_rdd", "receiver.task"):
        assert name in worker_daemon.PRELOAD
