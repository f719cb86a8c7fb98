"""A worker's heap is frozen once, inside a PySpark task only: later collections
walk only newer objects, and a driver or test calling the same code is untouched."""

from __future__ import annotations

import json
import subprocess
import sys


def _freeze_counts(in_task: bool) -> list[int]:
    # In a fresh interpreter: freezing is process-wide and would reach the test run.
    code = (
        "import gc, json\n"
        "from pyspark import TaskContext\n"
        "from walstream.worker_heap import freeze_once\n"
        f"if {in_task}:\n"
        "    TaskContext._setTaskContext(TaskContext())\n"
        "before = gc.get_freeze_count()\n"
        "freeze_once()\n"
        "first = gc.get_freeze_count()\n"
        "later = [object() for _ in range(1000)]\n"
        "freeze_once()\n"
        "print(json.dumps([before, first, gc.get_freeze_count()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    return list(json.loads(out.stdout))


def test_in_a_task_the_first_call_freezes_what_exists_and_later_calls_do_nothing() -> None:
    before, first, again = _freeze_counts(in_task=True)
    assert before == 0
    assert first > 1000  # every module object the interpreter holds
    assert again == first  # the second call froze nothing more


def test_outside_a_task_nothing_is_frozen() -> None:
    assert _freeze_counts(in_task=False) == [0, 0, 0]
