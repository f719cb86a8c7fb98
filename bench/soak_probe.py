"""What the soak benchmark reads from the running app: RSS per part, the JVM's GC.

The app's parts are found from ``/proc`` (process groups), the JVM is asked with
``jcmd``; nothing here changes the app's command line or configuration, so the soak
measures the same app as the other benchmarks.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from bench.common import log, proc_table, rss_mib

PARTS = ("driver (Python)", "driver JVM", "Python workers", "broker")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _app_jvms(app_pid: int, table: dict[int, tuple[int, int]]) -> set[int]:
    """The JVMs in the app's process group (the driver's, started by PySpark)."""
    return {pid for pid, (_, pgrp) in table.items()
            if pgrp == app_pid and pid != app_pid
            and "java" in _cmdline(pid).split(" ")[0]}


def sample(app_pid: int, broker_pid: int) -> dict[str, float]:
    """MiB per part; a part with no process reads 0.

    PySpark's worker daemon puts itself and the workers it forks in a process
    group of their own (``os.setpgid(0, 0)`` in ``pyspark.daemon``), so the
    workers are found as the groups of the JVM's children, not in the app's group.
    """
    parts = dict.fromkeys(PARTS, 0.0)
    table = proc_table()
    jvms = _app_jvms(app_pid, table)
    for pid, (_, pgrp) in table.items():
        if pgrp != app_pid:
            continue
        mib = rss_mib(pid) or 0.0
        if pid == app_pid:
            parts["driver (Python)"] += mib
        elif pid in jvms:
            parts["driver JVM"] += mib
        else:
            parts["Python workers"] += mib
    worker_groups = {pgrp for pid, (ppid, pgrp) in table.items()
                     if ppid in jvms and pgrp != app_pid}
    for pid, (_, pgrp) in table.items():
        if pgrp in worker_groups:
            parts["Python workers"] += rss_mib(pid) or 0.0
    if broker_pid:
        parts["broker"] = rss_mib(broker_pid) or 0.0
    return parts


def _jcmd(pid: int, *args: str) -> str | None:
    """``jcmd PID ARGS`` output, or None (logged) when it fails."""
    try:
        return subprocess.run(["jcmd", str(pid), *args], capture_output=True, text=True,
                              timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log(f"jcmd {' '.join(args)} on the JVM {pid} failed: {exc}")
        return None


def start_gc_log(app_pid: int, path: Path) -> bool:
    """Log every GC of the app's JVM to ``path`` from now on (``jcmd VM.log``).

    Switched on in the running JVM, so the app's command line and configuration
    stay those of the other benchmarks; a log line costs nothing measurable
    beside a collection.
    """
    jvms = _app_jvms(app_pid, proc_table())
    return bool(jvms) and _jcmd(min(jvms), "VM.log", f"output={path}", "what=gc",
                                "decorators=timemillis") is not None


_GC_LINE = re.compile(r"^\[(\d+)ms\].*Pause (\w+).*? (\d+)M->(\d+)M\((\d+)M\)")


def heap_after_gc(path: Path, t0_wall: float) -> list[tuple[float, float]]:
    """(seconds since ``t0_wall``, lowest heap after a GC pause in MiB), a point per minute.

    The heap a pause leaves holds the live data plus old-generation garbage not yet
    collected, so the lowest figure of a minute is a ceiling on the live heap
    then: a leak shows as that ceiling rising, whatever G1 commits around it.
    """
    lows: dict[int, float] = {}
    try:
        text = path.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        m = _GC_LINE.match(line)
        if m is None:
            continue
        minute = int((int(m.group(1)) / 1000 - t0_wall) // 60)
        after = float(m.group(4))
        lows[minute] = min(after, lows.get(minute, after))
    return [(60.0 * k + 30.0, v) for k, v in sorted(lows.items()) if k >= 0]


def jvm_after_full_gc(app_pid: int) -> tuple[float, float] | None:
    """(RSS MiB, live heap MiB) of the app's JVM after a full GC forced with jcmd.

    A JVM's RSS follows its committed heap, which G1 grows while garbage waits for
    a collection and shrinks only after a full one; the live heap after a full GC
    tells a leak (live data growing) from heap not yet given back. Run once, after
    the last sample, so the growth figures are of the untouched run.
    """
    jvms = _app_jvms(app_pid, proc_table())
    if not jvms:
        return None
    pid = min(jvms)
    if _jcmd(pid, "GC.run") is None:
        return None
    time.sleep(2.0)
    info = _jcmd(pid, "GC.heap_info")
    if info is None:
        return None
    used = re.search(r"used (\d+)K", info)
    rss = rss_mib(pid)
    if used is None or rss is None:
        return None
    return rss, int(used.group(1)) / 1024


def live_classes(app_pid: int, top: int = 8) -> list[tuple[str, float, int]]:
    """(class, MiB, instances) of the largest classes on the JVM's live heap.

    ``jcmd GC.class_histogram`` forces a full GC first, so it runs after the
    last sample, beside ``jvm_after_full_gc``: what the live heap is made of.
    """
    jvms = _app_jvms(app_pid, proc_table())
    out = _jcmd(min(jvms), "GC.class_histogram") if jvms else None
    rows = []
    for line in (out or "").splitlines():
        m = re.match(r"\s*\d+:\s+(\d+)\s+(\d+)\s+(\S+)", line)
        if m:
            rows.append((m.group(3), int(m.group(2)) / 2**20, int(m.group(1))))
    return rows[:top]
