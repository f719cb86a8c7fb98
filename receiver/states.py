"""ReceiverState: a receiver's lifecycle, one enum for the driver and the executor.

The driver records each input stream's receiver in its endpoint and launcher
(``walstream.driver.receiver_tracker.endpoint``,
``walstream.driver.receiver_tracker.tracker``); the executor's
:class:`~walstream.receiver.supervisor.ReceiverSupervisor` records its own receiver. Both
use these states, and the shared ones change on the same messages:

* ``INACTIVE``: no receiver runs (the driver: no job, or its job ended; the
  supervisor: constructed, not registered yet).
* ``SCHEDULED``: the driver launched the receiver's Spark job; it has not
  registered yet (driver only).
* ``ACTIVE``: the driver accepted its RegisterReceiver; only now are its blocks
  accepted (the supervisor calls ``onStart`` after this).
* ``DEREGISTERED``: the receiver stopped (the driver: its DeregisterReceiver
  came; the supervisor: from the moment it begins stopping, before it sends
  that message). A restart registers it again: ``ACTIVE``.
* ``FAILED``: the driver gave up relaunching it (driver only).

No state crosses the wire: the RPC messages carry registrations and reports,
and each side derives its state from them. A ``StrEnum``, so a state equals
and formats as its lower-case name (``ReceiverState.ACTIVE == "active"``), as
the plain strings it replaced did in messages and in code reading them.
"""

from __future__ import annotations

import enum


class ReceiverState(enum.StrEnum):
    INACTIVE = "inactive"
    SCHEDULED = "scheduled"
    ACTIVE = "active"
    DEREGISTERED = "deregistered"
    FAILED = "failed"
