"""CleanGuard: a receiver deletes WAL data only while its driver is certain to lead.

The driver asks a receiver to clean its WAL (CLEANUP_OLD_BLOCKS over the Control
stream) after checking its lease, but the receiver acts on that command later, on
its WAL's cleaning thread, and a driver deposed meanwhile (a standby took over
and still needs those blocks) must not have them deleted. So the receiver's WAL
runs this guard right before each destructive step of a clean (the threshold
marker, the topic deletes: wal/kafka_log.py):

1. Ask the driver, over the authenticated endpoint, whether it grants deleting
   the stream's data below the highest threshold it commanded (``MayClean``). The
   driver grants only while its lease check passes, only up to a threshold it
   asked for itself, and answers how long its lease stays valid at least.
2. Check the grant's proof (the application secret, over this ask's nonce: no
   replayed or forged grant counts).
3. Go on only if, counted from when the ask was sent, at least ``margin_s`` of
   that validity is left: the delete is then issued while the lease is held, with
   ``margin_s`` to spare for the delete request to reach the broker.

Anything else raises :class:`~walstream.receiver.errors.CleanRefusedError` (or a
:class:`~walstream.receiver.errors.DriverProofError`) and the clean stops with the data in
place; the next command's clean tries again. A driver without high availability
grants with no bound (no standby can take over).
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

from walstream.receiver.errors import CleanRefusedError

#: Validity of the driver's lease that must be left when the delete is issued (s).
CLEAN_MARGIN_S = 0.5


class _Grants(Protocol):
    def may_clean(self, stream_id: int, thresh_time_ms: int) -> float | None: ...


class CleanGuard:
    """The ``delete_guard`` of one receiver's WAL (steps 1-3 of the module docstring).

    :meth:`asked` records each commanded threshold before the clean runs; the guard
    asks for the highest, which covers every lower one."""

    def __init__(self, client: _Grants, stream_id: int,
                 margin_s: float = CLEAN_MARGIN_S) -> None:
        if margin_s <= 0:
            raise ValueError(f"margin_s must be positive, not {margin_s}")
        self.client = client
        self.stream_id = stream_id
        self.margin_s = margin_s
        self._lock = threading.Lock()
        self._thresh = 0

    def asked(self, thresh_time_ms: int) -> None:
        with self._lock:
            self._thresh = max(self._thresh, thresh_time_ms)

    def __call__(self) -> None:
        with self._lock:
            thresh = self._thresh
        sent = time.monotonic()
        valid_s = self.client.may_clean(self.stream_id, thresh)                 # 1, 2
        if valid_s is None:
            return
        left = valid_s - (time.monotonic() - sent)                              # 3
        if left < self.margin_s:
            raise CleanRefusedError(
                f"stream {self.stream_id}: the driver granted deleting data older than "
                f"{thresh} with {left:.3f} s of its lease left, under the "
                f"{self.margin_s} s margin: not deleted")
