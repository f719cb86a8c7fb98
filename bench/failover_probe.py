"""What a driver process costs while it runs: CPU and resident memory of all its parts.

An app's parts are its Python driver, the JVM PySpark starts for it and the Python
workers that JVM's daemon forks. The driver leads a process group of its own (the
benchmark starts it so); PySpark's worker daemon puts itself and its workers in a
group of their own (``os.setpgid(0, 0)`` in ``pyspark.daemon``). So the parts are
every process of the driver's group and every descendant of the driver, whatever
group it is in. Read from ``/proc`` only: nothing here touches the app.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import proc_table, rss_mib

#: How often :class:`CostProbe` reads the parts' resident memory.
SAMPLE_S = 1.0


def app_processes(pid: int, table: dict[int, tuple[int, int]] | None = None) -> set[int]:
    """``pid``, the members of its process group and all its descendants."""
    table = proc_table() if table is None else table
    if pid not in table:
        return set()
    found = {pid} | {p for p, (_, pgrp) in table.items() if pgrp == pid}
    children: dict[int, list[int]] = {}
    for p, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(p)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _ticks(pid: int) -> int:
    """utime + stime of ``pid`` and of its children it reaped (cutime + cstime: a
    worker that exits while the probe runs is then still counted, in its parent's
    figures); 0 when it is gone."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(v) for v in rest[11:15])  # fields 14-17 of proc(5)
    return 0


def group_ticks(pid: int) -> int:
    """CPU clock ticks of the app led by ``pid`` (:func:`app_processes`) so far."""
    return sum(_ticks(p) for p in app_processes(pid))


def group_rss_mib(pid: int) -> float:
    """Resident memory of the app led by ``pid`` in MiB: VmRSS summed over its parts.

    Pages shared between the parts (a forked worker's copy-on-write pages) count once
    per process, as ``VmRSS`` gives them: an upper bound on what the app holds."""
    return sum(rss_mib(p) or 0.0 for p in app_processes(pid))


@dataclass
class Cost:
    """One app's CPU and memory over one interval."""

    seconds: float = 0.0
    cpu_cores: float = float("nan")  # CPU seconds per second of wall clock (1 = one core)
    rss_samples: list[float] = field(default_factory=list)  # MiB, one per SAMPLE_S

    @property
    def rss_mib(self) -> float:
        """The median resident memory over the interval (NaN: never read)."""
        return statistics.median(self.rss_samples) if self.rss_samples else float("nan")

    @property
    def machine_share(self) -> float:
        """``cpu_cores`` as a fraction of the machine's cores."""
        return self.cpu_cores / (os.cpu_count() or 1)


class CostProbe:
    """CPU share and resident memory of the apps led by ``pids`` between :meth:`start`
    and :meth:`stop`: CPU from the ticks at both ends, memory sampled every
    ``sample_s`` on a thread of its own (always joined by :meth:`stop`)."""

    def __init__(self, pids: dict[str, int], sample_s: float = SAMPLE_S) -> None:
        self.pids = dict(pids)
        self.sample_s = sample_s
        self.costs = {name: Cost() for name in self.pids}
        self._t0 = 0.0
        self._ticks0: dict[str, int] = {}
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._ticks0 = {name: group_ticks(pid) for name, pid in self.pids.items()}
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._sample, name="cost-probe", daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while True:
            for name, pid in self.pids.items():
                self.costs[name].rss_samples.append(group_rss_mib(pid))
            if self._done.wait(self.sample_s):
                return

    def stop(self) -> dict[str, Cost]:
        wall = max(time.monotonic() - self._t0, 1e-9)
        tick = os.sysconf("SC_CLK_TCK")
        for name, pid in self.pids.items():
            cost = self.costs[name]
            cost.seconds = wall
            cost.cpu_cores = max(0, group_ticks(pid) - self._ticks0[name]) / tick / wall
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        return self.costs

    def __enter__(self) -> CostProbe:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._done.is_set():
            self.stop()
