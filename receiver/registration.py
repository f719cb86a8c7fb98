"""The driver's answer to RegisterReceiver."""

from __future__ import annotations

from typing import NamedTuple

from walstream.receiver.block import SourceRange


class Registration(NamedTuple):
    """Indexable like Spark's ``(accepted, message)``, plus where to resume.

    ``positions``: per source partition, the offset up to which the driver holds
    this stream's data durably (``until_offset``); a (re)started receiver resumes
    there. ``rate_limit``: the driver's current limit in records/s (0 = none).
    ``session``: the session token of this registration ("" when refused); the
    calls after it present the token, so it is left out of ``repr``.
    """

    accepted: bool
    message: str
    positions: tuple[SourceRange, ...] = ()
    rate_limit: float = 0.0
    session: str = ""

    def __repr__(self) -> str:
        return (f"Registration(accepted={self.accepted!r}, message={self.message!r}, "
                f"positions={self.positions!r}, rate_limit={self.rate_limit!r})")
