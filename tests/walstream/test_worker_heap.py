"""A worker's heap is frozen once: later collections walk only newer objects."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_first_call_freezes_what_exists_and_later_calls_do_nothing() -> None:
    # In a fresh interpreter: freezing is process-wide and would reach the test run.
    code = (
        "import gc, json\n"
        "from walstream.worker_heap import freeze_once\n"
        "before = gc.get_freeze_count()\n"
        "freeze_once()\n"
        "first = gc.get_freeze_count()\n"
        "later = [object() for _ in range(1000)]\n"
        "freeze_once()\n"
        "print(json.dumps([before, first, gc.get_freeze_count()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    before, first, again = json.loads(out.stdout)
    assert before == 0
    assert first > 1000  # every module object the interpreter holds
    assert again == first  # the second call froze nothing more
