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

The module also holds what a run is made of: one measurement (:class:`Recovery`,
one per kill) and the figures of every run per system and backlog (:class:`Cell`),
as the benchmark, the soak and the results file share them.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.peer_apps import LineServer, Phase

#: The master Spark's side recovered on in runs that do not say: a plain launch's
#: default (before the benchmark gave it one).
PLAIN_LAUNCH = "local[*]"
#: Configuration keys of a results .json that must match to pool runs, with the
#: value a file written before the key existed stands for.
COMPARED: dict[str, Any] = {
    "history_s": None, "block_ms": None, "rate": None,
    "receivers": 1,
    "spark_restart_master": PLAIN_LAUNCH,
    "kills": 1,
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

    cells: dict[str, dict[str, dict[str, Any]]]
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


def newest_session(json_path: Path) -> str:
    """When the newest invocation behind a results .json ran (``YYYY-mm-dd HH:MM:SS``)."""
    data = json.loads(json_path.read_text())
    sessions = data.get("sessions") or [_legacy_session(json_path, data)]
    return str(sessions[-1]["generated"])


def sessions_line(sessions: list[dict[str, Any]]) -> str:
    """One results-file fact: each invocation's runs, date and code."""
    return "; ".join(f"{s['runs']} on {s['generated']} UTC ({s['code']})" for s in sessions)


# One measurement and the cells of a results file.

BLOCK_MS = 100
RATE = 2000.0  # lines/s: 200 lines per block, a tenth of both systems' ceiling


#: The steady-cost figures of an ``ours-ha`` run (``Recovery.steady``): CPU in cores
#: (CPU seconds per second) and median resident memory in MiB, of the standby and,
#: over the same interval, of the leader.
STEADY_KEYS = ("standby_cpu", "standby_rss_mib", "leader_cpu", "leader_rss_mib")

#: With --kills: how long a restarted app that caught up runs at RATE before the
#: next backlog, so each kill starts from steady state.
SETTLE_S = 60.0


@dataclass
class Recovery:
    impl: str
    backlog_target: int
    history_s: float
    nominal_blocks: int = 0  # block intervals from the last completed batch to the kill
    exact_blocks: int | None = None  # from the tracker state (ours only)
    backlog_lines: int = 0
    first_batch_s: float = float("nan")
    caught_up_s: float = float("nan")
    #: ``ours-ha`` only: the first completed batch with data sent after the kill.
    fresh_data_s: float = float("nan")
    batches_rerun: int = 0
    note: str = ""
    kill_wall: float = 0.0  # time.time() of the SIGKILL
    restart_wall: float = 0.0  # time.time() of the restart command
    ran_s: float = 0.0  # the app's first start to this kill (history and earlier kills)
    #: ``ours-ha`` only: the standby's and the leader's steady cost (CPU cores, median
    #: RSS in MiB) over the history, while the standby stood by.
    steady: dict[str, float] = field(default_factory=dict)
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (wall, words) per batch


@dataclass
class Cell:
    first: list[float] = field(default_factory=list)
    caught: list[float] = field(default_factory=list)
    fresh: list[float] = field(default_factory=list)  # ``ours-ha`` only
    blocks: list[int] = field(default_factory=list)
    exact: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    example: Recovery | None = None  # the first run, for the plot around the kill
    ran: list[float] = field(default_factory=list)  # seconds of running at each kill
    #: ``ours-ha``: each Recovery.steady figure, one per run (STEADY_KEYS).
    steady: dict[str, list[float]] = field(default_factory=dict)

    def add(self, r: Recovery) -> None:
        self.first.append(r.first_batch_s)
        self.caught.append(r.caught_up_s)
        if r.impl == "ours-ha":
            self.fresh.append(r.fresh_data_s)
        self.blocks.append(r.nominal_blocks)
        self.ran.append(r.ran_s)
        self.example = self.example or r
        if r.exact_blocks is not None:
            self.exact.append(r.exact_blocks)
        if r.note:
            self.notes.append(r.note)
        for key, value in r.steady.items():
            self.steady.setdefault(key, []).append(value)


def send_all(servers: list[LineServer], rate: float, seconds: float) -> int:
    """``rate`` lines/s split evenly over ``servers`` for ``seconds``; lines sent."""
    phases = [Phase(rate / len(servers)) for _ in servers]
    threads = [threading.Thread(target=s.run_phase, args=(ph, seconds), daemon=True)
               for s, ph in zip(servers, phases, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(ph.sent for ph in phases)


def app_master(receivers: int) -> str:
    """Both apps' master, on first start and on restart: two task slots beside the
    receivers (``local[3]`` with one)."""
    return f"local[{receivers + 2}]"


def kills_per_run(data: dict[str, Any]) -> int:
    """Kills per run of a configuration or results .json (older files: COMPARED's)."""
    return int(data.get("kills", COMPARED["kills"]))


def compared(cfg: dict[str, Any]) -> dict[str, Any]:
    """The configuration runs must share to be pooled (``recovery_runs.COMPARED``)."""
    receivers = int(cfg["receivers"])
    return {"history_s": cfg["history_s"], "block_ms": cfg["block_ms"], "rate": RATE,
            "receivers": receivers, "spark_restart_master": app_master(receivers),
            "kills": kills_per_run(cfg)}


def prefill(cells: dict[tuple[str, int], Cell], earlier: Earlier) -> None:
    """Earlier runs' figures first in each cell (null, a run that did not get there,
    back to NaN)."""
    def nums(values: list[float | None]) -> list[float]:
        return [float("nan") if v is None else float(v) for v in values]

    for impl, per in earlier.cells.items():
        for b, fig in per.items():
            c = cells[(impl, int(b))]
            c.first, c.caught = nums(fig["first"]), nums(fig["caught"])
            c.fresh = nums(fig.get("fresh", []))
            c.blocks, c.exact = list(fig["blocks"]), list(fig.get("exact", []))
            c.ran = list(fig.get("ran_s", []))
            if "steady" in fig:
                c.steady = {k: nums(v) for k, v in fig["steady"].items()}


def cells_json(cells: dict[tuple[str, int], Cell], cfg: dict[str, Any],
               sessions: list[dict[str, Any]]) -> dict[str, Any]:
    """The configuration, the invocations the runs came from and every run's figures
    (NaN, a run that did not get there, as null)."""
    def nums(values: list[float]) -> list[float | None]:
        return [v if v == v else None for v in values]

    out: dict[str, Any] = {**compared(cfg), "sessions": sessions,
                           "runs": sum(int(s["runs"]) for s in sessions), "cells": {}}
    for (impl, b), c in cells.items():
        if c.blocks:
            out["cells"].setdefault(impl, {})[str(b)] = {
                "first": nums(c.first), "caught": nums(c.caught), "blocks": c.blocks,
                "exact": c.exact, "ran_s": [round(v, 1) for v in c.ran]}
            if c.fresh:
                out["cells"][impl][str(b)]["fresh"] = nums(c.fresh)
            if c.steady:
                out["cells"][impl][str(b)]["steady"] = {
                    k: nums([round(v, 3) for v in vs]) for k, vs in c.steady.items()}
    return out
