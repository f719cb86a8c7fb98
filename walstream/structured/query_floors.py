"""QueryFloors: below which offset a source's logs may be cleaned when several
queries read it.

Each live query (one reader session) has a floor: the end it last committed, or,
before its first commit, the start it first asked from. A commit cleans only below
the lowest floor of the source's live queries, so one query's commit never
cleans what another has not read. A query whose session ended (stopped, or its
reader process died) no longer holds the floor: what it had not committed may be
cleaned once the others commit past it, as a Kafka topic's retention would.
"""

from __future__ import annotations

import threading


class QueryFloors:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._floors: dict[str, dict[str, int | None]] = {}

    def opened(self, name: str, session: str) -> None:
        with self._lock:
            self._floors.setdefault(name, {})[session] = None

    def ended(self, name: str, session: str) -> int:
        """Forget ``session``; the live sessions of ``name`` left."""
        with self._lock:
            sessions = self._floors.get(name, {})
            sessions.pop(session, None)
            if not sessions:
                self._floors.pop(name, None)
            return len(sessions)

    def started_at(self, name: str, session: str, start: int) -> None:
        """A query asked from ``start``: its floor until its first commit."""
        with self._lock:
            sessions = self._floors.get(name, {})
            if session in sessions and sessions[session] is None:
                sessions[session] = start

    def committed(self, name: str, session: str, end: int) -> int:
        """``session`` committed ``end``; the offset the source may be cleaned up to:
        the lowest floor of its live queries (``end`` itself for an unknown session)."""
        with self._lock:
            sessions = self._floors.get(name, {})
            if session not in sessions:
                return end
            current = sessions[session]
            sessions[session] = end if current is None else max(current, end)
            return min(v for v in sessions.values() if v is not None)
