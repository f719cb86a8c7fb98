"""Profile of one sustained peer run: CPU seconds per million lines for each part.

Usage (from the repo root)::

    python -m bench.peer_profile [--impl ours] [--rate LINES_PER_S] [--seconds 30]
        [--out bench/results/RESULTS-profile.md] [--svg-prefix bench/results/profile]

The peer benchmark's word count (``bench/peer_app.py``) on the embedded broker, fed
by the same line server, warmed up as ``bench.peer_bench`` does; then ``--rate``
lines/s for ``--seconds`` while

- ``py-spy record`` samples every Python process of the app (the driver with
  ``--subprocesses``: the PySpark worker daemon and its forked workers, which run
  the receiver task and the batch tasks), ``--nonblocking``, idle threads left out,
  one sample per thread ``--pyspy-rate`` times a second, each stack with its
  process and native thread id;
- ``/proc`` gives the CPU ticks (utime + stime, and those of reaped children) of
  every process of the app (driver, JVM, daemon, workers), of each of their
  threads, of the broker, of py-spy and of this process, at both ends of the window.

Each sampled stack goes to one part by ``RULES`` (see ``classify``) of
``bench.profile_stacks``. A sample stands for an active thread, which on a busy
machine is also a thread waiting for a core, so ``samples / rate`` overstates CPU
time; each thread's CPU from ``/proc`` is therefore spread over its stacks in
proportion to its samples (the *CPU s* column), and ``samples / rate`` is shown
beside it as the cross-check.
Threads that py-spy cannot see (librdkafka's and gRPC core's native threads) go
to a part by their name (``NATIVE_THREADS`` there); what is left of the Python
processes' ``/proc`` CPU (threads that ended in the window, threads never seen
active) is *Python, unattributed*. The JVM and the broker are rows of their own.

The window runs from the start of the offered phase to the completion of the
batch that holds its last line, so the lines of the window are exactly the lines
offered in it (checked against the batches' ``records``, and every word counted:
``words == 12 * records``). Every process started here (broker, app, py-spy) is
stopped at the end, also on failure.

This module runs the window and writes the report; the parts, the rules and
py-spy's raw output are in ``bench.profile_stacks``, the ``/proc`` readings and
the attribution in ``bench.profile_cpu``, the flame graphs in ``bench.profile_svg``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import (
    OtherCpu,
    bench_broker,
    exit_on_sigterm,
    log,
    machine_info,
    md_facts,
    md_table,
    write_results,
)
from bench.failover_probe import app_processes
from bench.peer_apps import (
    BATCH_S,
    ROOT,
    WORDS_PER_LINE,
    App,
    AppRun,
    LineServer,
    Phase,
    impl_label,
    wait_connected,
)

# The warm-up and the count check of the peer benchmark, reused as they are.
from bench.peer_bench import GAP_S, check_counts, drain, settle
from bench.profile_cpu import (
    Attribution,
    ProcCpu,
    attribute,
    snapshot,
    thread_deltas,
    thread_group,
    tick_delta,
)
from bench.profile_stacks import (
    BROKER,
    DRIVER_ROLE,
    JVM,
    NATIVE_THREADS,
    PARTS,
    RECEIVER_ROLE,
    ROLES,
    RULES,
    TASKS_ROLE,
    UNATTRIBUTED,
    parse_raw,
    side_of,
)
from bench.profile_svg import flame_svg

# -- the run -----------------------------------------------------------------------


@dataclass
class Window:
    """What one profiled window gave."""

    seconds: float = 0.0
    sent: int = 0
    lines: int = 0
    words: int = 0
    att: Attribution = field(default_factory=Attribution)
    jvm_s: float = 0.0
    broker_s: float = float("nan")
    other_app_s: float = 0.0
    pyspy_s: float = 0.0
    bench_s: float = 0.0
    span_sampled_s: float = 0.0  # samples / rate, the whole py-spy span
    span_proc_s: float = 0.0  # /proc CPU of the Python processes over the same span
    jvm_threads: dict[str, float] = field(default_factory=dict)
    thread_wait: dict[tuple[int, int], float] = field(default_factory=dict)
    noise: str = ""
    counted_ok: bool = False
    count_note: str = ""
    pyspy_note: str = ""
    raw_path: Path | None = None


def pyspy_binary() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("py-spy missing: pip install -e '.[bench]'")
    return found


def _wait_for_text(path: Path, text: str, proc: subprocess.Popen[bytes],
                   timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"py-spy exited ({proc.returncode}): {path.read_text()[-2000:]}")
        time.sleep(0.1)
    raise TimeoutError(f"py-spy did not start sampling in {timeout_s:.0f} s")


def _stop_pyspy(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (py-spy then writes its output), SIGKILL if it does not exit."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _java_pids(table: Mapping[int, ProcCpu]) -> set[int]:
    return {pid for pid, p in table.items() if p.comm == "java"}


def profile_window(app: App, server: LineServer, rate: float, seconds: float,
                   pyspy_rate: int, broker_pid: int, workdir: Path) -> Window:
    """Run py-spy and ``/proc`` over one offered phase; see the module's docstring."""
    win = Window()
    tick = float(os.sysconf("SC_CLK_TCK"))
    driver = app.proc.pid
    raw = workdir / "pyspy-raw.txt"
    out_log = workdir / "pyspy.log"
    cmd = [pyspy_binary(), "record", "--pid", str(driver), "--subprocesses",
           "--nonblocking", "--format", "raw", "--rate", str(pyspy_rate), "--threads",
           "--full-filenames", "--output", str(raw)]
    log(f"py-spy: {' '.join(cmd[1:])}")
    with open(out_log, "wb") as sink:
        spy = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
    try:
        _wait_for_text(out_log, "Sampling process", spy, 60)
        pids0 = app_processes(driver)
        span0 = snapshot(pids0)
        # py-spy attaches to each subprocess on its own thread after it starts.
        time.sleep(2.0)
        pids1 = app_processes(driver)
        mine = [broker_pid, spy.pid, os.getpid()]
        noise = OtherCpu([*pids1, *mine])
        snap1 = snapshot(pids1 | set(mine))
        noise.start()
        t1 = time.monotonic()
        ph = Phase(rate)
        server.run_phase(ph, seconds)
        win.sent = ph.sent
        # The window ends when the batch that holds the phase's last line completed.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sum(b["records"] for b in app.batches() if b["t"] > ph.start * 1000) >= ph.sent:
                break
            time.sleep(0.05)
        pids2 = app_processes(driver)
        snap2 = snapshot(pids2 | set(mine))
        win.seconds = time.monotonic() - t1
        cpu_noise = noise.stop()
        win.noise = (f"{cpu_noise.other:.2f} cores busy with other processes, "
                     f"{cpu_noise.steal:.2f} stolen by the hypervisor")
        _stop_pyspy(spy)
    finally:
        if spy.poll() is None:
            spy.kill()
            spy.wait(10)
    win.pyspy_note = out_log.read_text(errors="replace").strip()
    win.raw_path = raw
    batches = [b for b in app.batches() if b["t"] > ph.start * 1000]
    win.lines = sum(b["records"] for b in batches)
    win.words = sum(b["words"] for b in batches)
    log(f"window {win.seconds:.1f} s: {win.sent} lines sent, {win.lines} counted")

    samples = parse_raw(raw.read_text(), driver) if raw.exists() else []
    receiver_pids = {s.pid for s in samples
                     if any("receiver/socket_receiver.py" in f for f in s.frames)}
    app_pids = (pids1 | pids2) - _java_pids(snap1) - _java_pids(snap2)
    roles = {pid: (DRIVER_ROLE if pid == driver else
                   RECEIVER_ROLE if pid in receiver_pids else TASKS_ROLE) for pid in app_pids}
    python = {pid for pid in app_pids
              if (snap1.get(pid) or snap2.get(pid)) is not None
              and ((snap1.get(pid) or snap2[pid]).comm.startswith("python")
                   or any(s.pid == pid for s in samples))}
    for pid in app_pids - python:
        win.other_app_s += tick_delta(snap1, snap2, pid) / tick
    thread_cpu = {}
    for pid in python:
        for tid, (comm, ticks, waited) in thread_deltas(snap1.get(pid),
                                                        snap2.get(pid)).items():
            thread_cpu[(pid, tid)] = (comm, ticks / tick)
            win.thread_wait[(pid, tid)] = waited / 1e9
    proc_cpu = {pid: tick_delta(snap1, snap2, pid) / tick for pid in python}
    win.att = attribute(samples, pyspy_rate, roles, thread_cpu, proc_cpu)
    for pid in _java_pids(snap1) | _java_pids(snap2):
        win.jvm_s += tick_delta(snap1, snap2, pid) / tick
        groups: dict[str, float] = defaultdict(float)
        for _, (comm, ticks, _) in thread_deltas(snap1.get(pid), snap2.get(pid)).items():
            groups[thread_group(comm)] += ticks / tick
        win.jvm_threads = dict(groups)
    if broker_pid:
        win.broker_s = tick_delta(snap1, snap2, broker_pid) / tick
    win.pyspy_s = tick_delta(snap1, snap2, spy.pid) / tick
    win.bench_s = tick_delta(snap1, snap2, os.getpid()) / tick
    # Cross-check over py-spy's whole span (from its start to the window's end).
    win.span_sampled_s = sum(s.count for s in samples) / pyspy_rate
    win.span_proc_s = sum(tick_delta(span0, snap2, pid) for pid in python) / tick
    return win


# -- the report --------------------------------------------------------------------


def _fmt(v: float, digits: int = 2) -> str:
    return "" if v != v else f"{v:.{digits}f}"


def table_rows(win: Window) -> tuple[list[list[str]], float]:
    """The main table's rows and the total CPU seconds."""
    per_m = 1e6 / win.lines if win.lines else float("nan")
    cores = os.cpu_count() or 1
    machine = cores * win.seconds
    rows = []
    total = 0.0
    for part in PARTS:
        by_role = win.att.cpu.get(part, {})
        if part == JVM:
            cpu, cells, sampled = win.jvm_s + win.other_app_s, ["", "", ""], float("nan")
        elif part == BROKER:
            cpu, cells, sampled = win.broker_s, ["", "", ""], float("nan")
        else:
            cpu = sum(by_role.values())
            cells = [_fmt(by_role.get(r, 0.0)) for r in ROLES]
            sampled = (sum(win.att.sampled.get(part, {}).values())
                       if part != UNATTRIBUTED else float("nan"))
        if cpu == cpu:
            total += cpu
        rows.append([part, *cells, _fmt(sampled), f"**{_fmt(cpu)}**", _fmt(cpu * per_m),
                     _fmt(100 * cpu / machine, 1) if cpu == cpu else ""])
    rows.append(["**Total**", "", "", "", _fmt(sum(
        sum(v.values()) for p, v in win.att.sampled.items())), f"**{_fmt(total)}**",
        f"**{_fmt(total * per_m)}**", f"**{_fmt(100 * total / machine, 1)}**"])
    return rows, total


def render(win: Window, facts: dict[str, str], args: argparse.Namespace, command: str,
           svgs: dict[str, Path], elapsed: float) -> str:
    att = win.att
    rows, total = table_rows(win)
    cores = os.cpu_count() or 1
    python_proc = sum(att.python_proc_s.values())
    attributed = python_proc - sum(att.cpu.get(UNATTRIBUTED, {}).values())
    sampled_in_threads = sum(t[5] for t in att.threads)
    scaled_threads = sum(t[4] for t in att.threads if t[5] > 0)
    waited_threads = sum(win.thread_wait.get((t[1], t[2]), 0.0) for t in att.threads
                         if t[5] > 0)
    links = ", ".join(f"[{role}]({os.path.relpath(p, args.out.parent)})"
                      for role, p in svgs.items())
    lines = [
        f"# Profile of one sustained peer run: {impl_label(args.impl)}", "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by `{command}` "
        f"({elapsed:.0f} s in all).", "",
        "## Machine", "", md_facts(facts), "",
        "## Run", "",
        md_facts({
            "App": "`bench/peer_app.py` (word count, local[3], 1 s batches, block "
                   f"interval 200 ms), `--impl {args.impl}`, on the embedded broker",
            "Offered": f"{args.rate:.0f} lines/s of {WORDS_PER_LINE} words for "
                       f"{args.seconds:.0f} s after the peer benchmark's warm-up at the "
                       "same rate",
            "Window": f"{win.seconds:.1f} s: from the first offered line to the completion "
                      "of the batch that holds the last",
            "Lines": f"{win.sent} offered in the window, {win.lines} counted by its batches "
                     f"({win.words} words: "
                     f"{'= ' if win.words == WORDS_PER_LINE * win.lines else '!= '}"
                     f"{WORDS_PER_LINE} x lines)",
            "Whole run counted": ("yes, " if win.counted_ok else "**NO**, ") + win.count_note,
            "Sampler": f"py-spy {args.pyspy_rate} Hz, `record --subprocesses --nonblocking "
                       "--threads --format raw` on the driver's pid (idle threads left out)",
            "Other load": win.noise,
            "Outside the total": f"py-spy {win.pyspy_s:.2f} CPU s, the benchmark process "
                                 f"(line server) {win.bench_s:.2f} CPU s",
        }), "",
        "## CPU per part", "",
        "CPU seconds in the window per part and where it ran; **CPU s** is /proc's CPU "
        "of each thread spread over its sampled stacks (native threads by name), "
        "*py-spy s* is samples / rate (a runnable thread waiting for a core counts "
        f"there too); share of the machine = CPU s / ({cores} cores x "
        f"{win.seconds:.1f} s).", "",
        md_table(["Part", "driver", "receiver worker", "task workers", "py-spy s",
                  "CPU s", "CPU s per million lines", "% of machine"], rows), "",
        f"Flame graphs (CPU seconds): {links}.", "",
        "## Cross-check against /proc", "",
        f"- Python processes of the app, /proc: **{python_proc:.2f} CPU s**; parts "
        f"attributed to them (sampled stacks scaled to their threads' CPU, native "
        f"threads by name): **{attributed:.2f} CPU s** "
        f"({100 * attributed / python_proc if python_proc else float('nan'):.1f}%); "
        f"the rest is *{UNATTRIBUTED}*.",
        f"- Unscaled: samples / rate over the threads also read in /proc "
        f"{sampled_in_threads:.2f} s against {scaled_threads:.2f} CPU s of those threads "
        f"(ratio {sampled_in_threads / scaled_threads if scaled_threads else float('nan'):.2f}); "
        f"those threads also waited {waited_threads:.2f} s for a core (runnable, "
        "`/proc/PID/task/TID/schedstat`), and CPU + waiting = "
        f"{scaled_threads + waited_threads:.2f} s is what py-spy counts as active; "
        f"over py-spy's whole span (its start, 2 s of attaching, the window) "
        f"{win.span_sampled_s:.2f} s of samples against {win.span_proc_s:.2f} CPU s of "
        "the Python processes in /proc.",
        "- Native threads, by name: " + ("; ".join(
            f"{k} {v:.2f} s" for k, v in sorted(att.native.items(), key=lambda kv: -kv[1]))
            or "none") + ".",
        f"- Sampled threads not found in /proc (ended in the window), counted as samples "
        f"/ rate: {att.unscaled_s:.2f} s.",
        f"- Total of the table: {total:.2f} CPU s = "
        f"{total / win.seconds if win.seconds else float('nan'):.2f} cores of {cores}.", "",
        "Per role, /proc CPU of the Python processes: "
        + ", ".join(f"{r} {att.python_proc_s.get(r, 0.0):.2f} s" for r in ROLES) + ".", "",
        "## Threads", "",
        "The Python processes' threads with the most CPU (/proc) beside the time they "
        "waited for a core and their samples / rate (a thread py-spy never saw active "
        "has 0). Name: py-spy's (the Python thread's), else /proc's.", "",
        md_table(["Role", "pid", "tid", "name", "CPU s (/proc)", "waiting for a core s",
                  "py-spy s"],
                 [[r, str(pid), str(tid), att.thread_names.get((pid, tid), comm), _fmt(cpu),
                   _fmt(win.thread_wait.get((pid, tid), float("nan"))), _fmt(samp)]
                  for r, pid, tid, comm, cpu, samp
                  in sorted(att.threads, key=lambda t: -max(t[4], t[5]))[:16]]), "",
        "## Where in each part", "",
        "The leaf frames with the most CPU per part (the Python frame on top of the "
        "stack: time in C code it called is its own).", "",
        md_table(["Part", "Leaf frame", "CPU s"],
                 [[part, f"`{leaf}`", _fmt(v)] for part in PARTS
                  for leaf, v in sorted(att.leaves.get(part, {}).items(),
                                        key=lambda kv: -kv[1])[:4]]), "",
        "## Other Python", "",
        md_table(["Decided by", "CPU s"],
                 [[k, _fmt(v)] for k, v in sorted(att.other.items(), key=lambda kv: -kv[1])
                  [:12]]) if att.other else "(none)", "",
        "## JVM threads", "",
        md_table(["Thread (number dropped)", "CPU s (/proc)"],
                 [[k, _fmt(v)] for k, v in sorted(win.jvm_threads.items(),
                                                  key=lambda kv: -kv[1])[:12]]), "",
        "## Rules", "",
        "Each stack goes to the part of the first rule below that its leaf-most matching "
        "frame matches; library rules only for stacks that no project rule matches "
        "(`bench/profile_stacks.py`, `RULES`). Native threads: "
        + "; ".join(f"`{p}*` in {r or 'any process'} -> {part}"
                    for p, r, part in NATIVE_THREADS) + ".", "",
        md_table(["#", "Part", "File", "Function", "Side", "Library"],
                 [[str(i + 1), r.part, f"`{r.file}`", f"`{r.func}`" if r.func else "any",
                   r.side or "any", "yes" if r.library else ""]
                  for i, r in enumerate(RULES)]), "",
        "## Limits", "",
        "- py-spy sees Python frames only: time in C (a `recv`, fastavro, the Kafka "
        "client's calls) is charged to the calling Python frame, and threads without "
        "Python frames (librdkafka's, gRPC core's) are attributed by their name.",
        "- Threads and processes are read at both ends of the window: a thread that "
        "ended in between is in its process's CPU but in no thread's (*unattributed*); "
        "a process that ended is in its parent's reaped-children CPU.",
        "- py-spy counts a thread as active when /proc says it is runnable, also while "
        "it waits for a core: samples / rate exceed CPU time on a busy machine, so each "
        "thread's /proc CPU is spread over its stacks in proportion to their samples "
        "(a stack sampled more often while waiting gets a little too much).",
        "- py-spy itself takes CPU from the same cores (*Outside the total*), and it "
        "reads the processes without stopping them (`--nonblocking`): a stack read while "
        "it changes may be torn (py-spy's *Errors*).",
        "- A batch still running from the warm-up at the window's start counts in the "
        "window; the window ends when the batch that holds the last line completed.",
    ]
    if win.pyspy_note:
        lines += ["", "py-spy said:", "", "```", win.pyspy_note[-1500:], "```"]
    return "\n".join(lines)


def run(args: argparse.Namespace, workdir: Path) -> tuple[Window, dict[str, str]]:
    with bench_broker() as broker:
        facts = machine_info(broker.description)
        server = LineServer()
        app = App(args.impl, server.port, broker.bootstrap, workdir)
        run_ = AppRun(args.impl)
        try:
            wait_connected(server, app, 120)
            time.sleep(2 * BATCH_S)
            log(f"warm-up at {args.rate:.0f} lines/s")
            settle(server, app, args.rate, run_)
            time.sleep(GAP_S)  # the warm-up's last batches complete before the window
            win = profile_window(app, server, args.rate, args.seconds, args.pyspy_rate,
                                 broker.pid, workdir)
            run_.phases.append(Phase(args.rate, sent=win.sent))
            drain(app, run_.warmup_sent + win.sent, 30)
            run_.batches = app.batches()
            win.counted_ok, win.count_note = check_counts(run_, WORDS_PER_LINE)
            log(f"whole run: {win.count_note}")
        finally:
            app.stop()
            server.close()
    return win, facts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impl", choices=["ours", "spark"], default="ours")
    ap.add_argument("--rate", type=float, default=30000.0, help="lines/s offered")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--pyspy-rate", type=int, default=100, help="samples/s per thread")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "RESULTS-profile.md")
    ap.add_argument("--svg-prefix", type=Path, default=ROOT / "bench" / "results" / "profile")
    args = ap.parse_args(argv)
    command = "python -m bench.peer_profile " + " ".join(argv if argv is not None
                                                         else sys.argv[1:])
    pyspy_binary()
    exit_on_sigterm()
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="walstream-profile-"))
    try:
        win, facts = run(args, workdir)
        args.svg_prefix.parent.mkdir(parents=True, exist_ok=True)
        svgs: dict[str, Path] = {}
        for role in ROLES:
            stacks = win.att.stacks.get(role)
            if not stacks:
                continue
            path = Path(f"{args.svg_prefix}-{role.split()[0]}.svg")
            path.write_text(flame_svg(stacks, f"{impl_label(args.impl)}: {role}, "
                                              f"{win.seconds:.0f} s at {args.rate:.0f} "
                                              "lines/s", side_of(role)))
            svgs[role] = path
        if win.raw_path is not None and win.raw_path.exists():
            shutil.copy(win.raw_path, f"{args.svg_prefix}-stacks.txt")
        text = render(win, facts, args, command, svgs, time.monotonic() - started)
        write_results(args.out, text)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
