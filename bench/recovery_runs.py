"""Every run behind one recovery results file, kept across invocations (``--append``).

A run of the recovery benchmark after 30 minutes of history takes over an hour for
both systems, so three runs do not fit one working session. ``recovery_bench
--append`` adds this invocation's runs to those already in the results file's
.json, and the file then gives the median over all of them and lists each
invocation (when, which code, how many runs).

Runs are only pooled when they compare: the same CPU (sessions land on different
machine kinds, and a median across two CPUs means nothing), the same
configuration (history, block interval, receivers, rate, backlogs, systems) and
the same master for Spark's restart. Anything else is refused before a single
minute is measured: :class:`IncomparableRunsError` names the difference.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The master Spark's side recovered on in runs that do not say: a plain launch's
#: default (before the benchmark gave it one).
PLAIN_LAUNCH = "local[*]"
#: Configuration keys of a results .json that must match to pool runs, with the
#: value a file written before the key existed stands for.
COMPARED: dict[str, Any] = {
    "history_s": None, "block_ms": None, "rate": None,
    "receivers": 1,
    "spark_restart_master": PLAIN_LAUNCH,
}

_FACT = re.compile(r"^\| \*\*(CPU|Code)\*\* \| (.*) \|$", re.M)
_GENERATED = re.compile(r"^Generated (\S+ \S+) UTC", re.M)


class IncomparableRunsError(ValueError):
    """The runs already in a results file cannot be pooled with this invocation's."""


def provenance(json_path: Path) -> dict[str, str]:
    """The CPU and code revision a recovery run was measured on, from the results
    file beside its .json (empty when that file is missing)."""
    md = json_path.with_suffix(".md")
    return dict(_FACT.findall(md.read_text())) if md.exists() else {}


def _legacy_session(json_path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """The one invocation behind a .json written before sessions were recorded."""
    md = json_path.with_suffix(".md")
    found = _GENERATED.search(md.read_text()) if md.exists() else None
    facts = provenance(json_path)
    return {"generated": found.group(1) if found else "?", "code": facts.get("Code", "?"),
            "cpu": facts.get("CPU", "?"), "runs": int(data.get("runs", 0))}


@dataclass(frozen=True)
class Earlier:
    """The runs already in a results file: per system and backlog, the figures
    lists of ``cells_json``; and the invocations they came from."""

    cells: dict[str, dict[str, dict[str, list[Any]]]]
    sessions: list[dict[str, Any]]

    @property
    def runs(self) -> int:
        return sum(int(s["runs"]) for s in self.sessions)


def load_earlier(json_path: Path, config: dict[str, Any], cpu: str,
                 impls: list[str], backlogs: list[int]) -> Earlier | None:
    """The runs in ``json_path`` that this invocation's runs join (None: no file).

    Raises :class:`IncomparableRunsError` when they were measured differently."""
    if not json_path.exists():
        return None
    data = json.loads(json_path.read_text())
    for key, default in COMPARED.items():
        was, now = data.get(key, default), config.get(key, default)
        if was != now:
            raise IncomparableRunsError(f"{json_path.name}: {key} was {was!r}, now {now!r}")
    sessions = data.get("sessions") or [_legacy_session(json_path, data)]
    for s in sessions:
        if s["cpu"] != cpu:
            raise IncomparableRunsError(f"{json_path.name}: runs of {s['generated']} were measured "
                                   f"on {s['cpu']!r}, this machine is {cpu!r}")
    cells = data["cells"]
    want = {impl: sorted(str(b) for b in backlogs) for impl in impls}
    have = {impl: sorted(per) for impl, per in cells.items()}
    if have != want:
        raise IncomparableRunsError(f"{json_path.name}: has systems and backlogs {have}, "
                               f"this invocation measures {want}")
    return Earlier(cells, list(sessions))


def sessions_line(sessions: list[dict[str, Any]]) -> str:
    """One results-file fact: each invocation's runs, date and code."""
    return "; ".join(f"{s['runs']} on {s['generated']} UTC ({s['code']})" for s in sessions)
