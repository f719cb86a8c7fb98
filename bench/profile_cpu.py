"""The peer profile's CPU: ``/proc`` readings and their attribution to parts.

:func:`read_proc` and :func:`snapshot` read the CPU ticks of processes and of
their threads, :func:`tick_delta` and :func:`thread_deltas` take the difference
between two snapshots; :func:`attribute` spreads each thread's CPU over its
sampled stacks (parts by ``bench.profile_stacks.classify``, native threads by
their name) into an :class:`Attribution`.
"""

from __future__ import annotations

import contextlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.profile_stacks import (
    OTHER,
    PARTS,
    ROLES,
    TASKS_ROLE,
    UNATTRIBUTED,
    Sample,
    classify,
    native_part,
    parse_frame,
    short_path,
    side_of,
)


@dataclass(frozen=True)
class ProcCpu:
    """One process's CPU clock ticks so far, in all and per live thread."""

    pid: int
    comm: str
    ticks: int  # utime + stime + cutime + cstime (children it reaped included)
    threads: dict[int, tuple[str, int, int]]  # tid -> (comm, utime + stime, run-queue ns)


def _stat_fields(path: Path) -> tuple[str, list[str]]:
    text = path.read_text()
    return text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()


def read_proc(pid: int) -> ProcCpu | None:
    """The CPU ticks of ``pid`` and of each of its threads (None: gone)."""
    try:
        comm, rest = _stat_fields(Path(f"/proc/{pid}/stat"))
        ticks = sum(int(v) for v in rest[11:15])  # fields 14-17 of proc(5)
    except (OSError, ValueError, IndexError):
        return None
    threads = {}
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                tcomm, trest = _stat_fields(task / "stat")
                waited = 0  # time runnable but waiting for a core (schedstat, if any)
                with contextlib.suppress(OSError, ValueError, IndexError):
                    waited = int((task / "schedstat").read_text().split()[1])
                threads[int(task.name)] = (tcomm, int(trest[11]) + int(trest[12]), waited)
    return ProcCpu(pid, comm, ticks, threads)


def snapshot(pids: Iterable[int]) -> dict[int, ProcCpu]:
    out = {}
    for pid in pids:
        if pid and (p := read_proc(pid)) is not None:
            out[pid] = p
    return out


def tick_delta(a: dict[int, ProcCpu], b: dict[int, ProcCpu], pid: int) -> int:
    """Ticks of ``pid`` between snapshots ``a`` and ``b``: a process that ended in
    between counts minus its start, its whole time being in its parent's reaped
    children; one that started in between counts in full."""
    start = a[pid].ticks if pid in a else 0
    end = b[pid].ticks if pid in b else 0
    return end - start


def thread_deltas(a: ProcCpu | None, b: ProcCpu | None) -> dict[int, tuple[str, int, int]]:
    """tid -> (name, ticks, run-queue ns in between) of the threads alive at ``b``
    (a thread started in between counts in full; one that ended is not there)."""
    if b is None:
        return {}
    before = a.threads if a is not None else {}
    out = {}
    for tid, (comm, ticks, waited) in b.threads.items():
        _, ticks0, waited0 = before.get(tid, ("", 0, 0))
        out[tid] = (comm, ticks - ticks0, waited - waited0)
    return out


@dataclass
class Attribution:
    """CPU seconds per part and role, and what the cross-check needs."""

    cpu: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    sampled: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    other: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    stacks: dict[str, dict[tuple[str, ...], float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    threads: list[tuple[str, int, int, str, float, float]] = field(default_factory=list)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    leaves: dict[str, dict[str, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    python_proc_s: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    unscaled_s: float = 0.0
    native: dict[str, float] = field(default_factory=lambda: defaultdict(float))


def svg_frame(frame: str) -> str:
    """A frame as the flame graphs show it: function and short file, no line."""
    func, path = parse_frame(frame)
    return f"{func} ({short_path(path)})" if path else func


def attribute(samples: Sequence[Sample], rate: float, roles: Mapping[int, str],
              thread_cpu: Mapping[tuple[int, int], tuple[str, float]],
              proc_cpu: Mapping[int, float]) -> Attribution:
    """Spread each thread's CPU over its sampled stacks and sort them into parts.

    ``thread_cpu``: (pid, tid) -> (name, CPU s in the window) of the Python
    processes' threads; ``proc_cpu``: pid -> CPU s of each Python process (its
    threads, ended ones and reaped children included); ``roles``: pid -> role.
    A sampled thread missing from ``thread_cpu`` counts ``samples / rate``.
    """
    att = Attribution()
    per_thread: dict[tuple[int, int | None], int] = defaultdict(int)
    for s in samples:
        per_thread[(s.pid, s.tid)] += s.count
    seen: set[tuple[int, int]] = set()
    for s in samples:
        role = roles.get(s.pid, TASKS_ROLE)
        part, detail = classify(s.frames, side_of(role))
        raw = s.count / rate
        key = (s.pid, s.tid) if s.tid is not None else None
        if key is not None and key in thread_cpu:
            cpu = s.count / per_thread[key] * thread_cpu[key][1]
            seen.add(key)
        else:
            cpu = raw
            att.unscaled_s += raw
        att.cpu[part][role] += cpu
        att.sampled[part][role] += raw
        if part == OTHER:
            att.other[detail] += cpu
        if s.frames:
            att.leaves[part][svg_frame(s.frames[-1])] += cpu
        if s.tid is not None and s.thread:
            att.thread_names[(s.pid, s.tid)] = s.thread
        label = s.thread or "thread"
        att.stacks[role][(label, *(svg_frame(f) for f in s.frames))] += cpu
    for (pid, tid), (comm, cpu) in thread_cpu.items():
        role = roles.get(pid, TASKS_ROLE)
        native = native_part(comm, role) if (pid, tid) not in seen else None
        if native is not None and cpu > 0:
            att.cpu[native][role] += cpu
            att.stacks[role][(f"{comm} (native)",)] += cpu
            att.native[f"{role}: {thread_group(comm)}* -> {native}"] += cpu
        sampled = per_thread.get((pid, tid), 0) / rate
        att.threads.append((role, pid, tid, comm, cpu, sampled))
    for pid, cpu in proc_cpu.items():
        att.python_proc_s[roles.get(pid, TASKS_ROLE)] += cpu
    for role in ROLES:
        attributed = sum(att.cpu[p].get(role, 0.0) for p in PARTS if p != UNATTRIBUTED)
        rest = att.python_proc_s.get(role, 0.0) - attributed
        if role in att.python_proc_s:
            att.cpu[UNATTRIBUTED][role] += rest
    return att


def thread_group(comm: str) -> str:
    """A thread's name without its number (the JVM's ``Executor task l``,
    ``GC Thread#``; librdkafka's ``rdk:broker``)."""
    return re.sub(r"[#\-\s]*\d+$", "", comm) or comm
