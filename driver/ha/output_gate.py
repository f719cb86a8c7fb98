"""OutputGate: a highly available leader starts an output operation only while its
lease stays valid for a margin.

Fencing protects what goes through Kafka (the WAL chain, checkpoints, KafkaSink),
not a user's own output operation: a ``foreachRDD`` function writing files, rows or
HTTP calls. So every output operation of a batch, the user's included, passes this
gate right before it runs (driver/scheduler/job_scheduler.py):

1. The lease check (held: not released, lost or fenced, and its deadline ahead on
   this process's monotonic clock) must pass, else :class:`NotLeaderError`.
2. The lease must stay valid at least ``margin_s`` more. A leader renewing on time
   always has that much; while a renewal is late the gate waits for it (a
   confirmed renewal moves the deadline) or for the deadline (step 1 then refuses),
   so a slow renewal delays an output, never fails its batch.

A refused output operation fails its job, so the batch is not completed and the
next leader runs it. At the deadline the lease ends (driver/ha/lease.py) and the
context cancels the Spark jobs in flight (driver/ha/takeover.py): an output
operation that passed the gate then fails at its next Spark action. What can still
happen after the deadline is the driver-side tail of an output function that
started at least ``margin_s`` before it: code between its last Spark action and
its return.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from walstream.driver.errors import NotLeaderError

#: Pause between looks at the lease while a renewal is late (s).
POLL_S = 0.01


class OutputGate:
    """Steps 1-2 of the module docstring; ``check`` raises unless the lease is held,
    ``validity`` answers the seconds it is certain to stay held."""

    def __init__(self, check: Callable[[], None], validity: Callable[[], float],
                 margin_s: float) -> None:
        if margin_s <= 0:
            raise ValueError(f"margin_s must be positive, not {margin_s}")
        self.check = check
        self.validity = validity
        self.margin_s = margin_s

    def __call__(self, what: str) -> None:
        """Return when ``what`` (an output operation) may start; else raise
        :class:`NotLeaderError`."""
        while True:
            try:
                self.check()                                                    # 1
            except Exception as exc:
                raise NotLeaderError(f"{what} not started: this driver is not certain to "
                                     f"lead ({exc})") from exc
            left = self.validity()
            if left >= self.margin_s:                                           # 2
                return
            if left <= 0:
                raise NotLeaderError(f"{what} not started: this driver's lease ran out")
            time.sleep(min(POLL_S, left))
