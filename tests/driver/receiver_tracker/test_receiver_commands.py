"""CommandMailbox: coalesced driver-to-receiver commands, never dropped."""

from __future__ import annotations

import threading

from walstream.driver.receiver_tracker.commands import CommandMailbox


def test_mailbox_coalesces_to_at_most_one_command_per_kind() -> None:
    box = CommandMailbox()
    for i in range(10_000):
        box.update_rate(float(i))
        box.cleanup(5000 - i if i % 2 else i)
        box.stop(f"stop {i}")
    assert box.pending() == 3
    assert box.take(0) == {"kind": "CLEANUP_OLD_BLOCKS", "thresh_time_ms": 9998}
    assert box.take(0) == {"kind": "UPDATE_RATE_LIMIT", "rate_limit": 9999.0}
    assert box.take(0) == {"kind": "STOP", "message": "stop 9999"}
    assert box.take(0) is None and box.pending() == 0


def test_mailbox_take_wakes_on_a_command() -> None:
    box = CommandMailbox()
    threading.Timer(0.05, box.stop, args=("bye",)).start()
    assert box.take(5.0) == {"kind": "STOP", "message": "bye"}
