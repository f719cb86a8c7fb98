"""Structured benchmark: a word count through ``format("walstream")`` vs Spark's
built-in ``format("socket")``.

Usage (from the repo root)::

    python -m bench.structured_bench [--size small|full] [--runs N]

Both systems run ``bench/structured_app.py`` (the same query but for its source)
on ``local[3]``, a trigger a second, reading 12-word lines (about 95 bytes) from
one local TCP line server:

(a) Spark's ``socket`` source: lines kept in the driver's memory, no log; Spark
    documents it as not fault tolerant;
(b) walstream's ``socket`` source: a receiver stores every block in its Kafka log
    before it is reported, and offsets are logged allocations.

Per run and system:

1. **Sustained rate.** The peer benchmark's ladder (``bench.peer_bench``): a
   warm-up, then rising offered rates; a step is sustained when the server
   reached 90% of the offered rate and, in its second half, triggers took at
   most a second on average and none started more than a second late.
2. **Recovery after a driver SIGKILL.** A fresh app at ``recovery_rate`` lines/s
   for ``before_s``, then its whole process group is SIGKILLed and the same app
   (same checkpoint location) started again, its source served on; then
   ``after_s`` more seconds at the same rate. Recovery time: from the restart to
   the end of the first micro-batch with input. Lines lost: sent minus counted
   (a receiver's unstored tail, or whatever a source held in memory).

Every process started (apps, broker) is stopped at the end, also on failure.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import peer_bench
from bench.common import (
    Stat,
    bench_broker,
    bench_parser,
    exit_on_sigterm,
    log,
    machine_info,
    md_facts,
    md_table,
    write_results,
)
from bench.peer_apps import ROOT, AppRun, LineServer, Phase, wait_connected
from bench.peer_bench import drain, sustained
from walstream.procs import kill_group

SIZES: dict[str, dict[str, Any]] = {
    "small": dict(phase_s=6.0, first_rate=4000, step=2 ** 0.5, steps=10, runs=1,
                  recovery_rate=3000, before_s=12.0, after_s=20.0),
    "full": dict(phase_s=12.0, first_rate=4000, step=2 ** 0.25, steps=22, runs=3,
                 recovery_rate=3000, before_s=20.0, after_s=30.0),
}
IMPLS = ("spark", "ours")
LABELS = {"spark": "(a) Spark `format(\"socket\")`",
          "ours": "(b) walstream `format(\"walstream\")`"}
RESTART_WAIT_S = 180.0


class StructuredApp:
    """One ``bench/structured_app.py`` process in its own group (always killed)."""

    def __init__(self, impl: str, port: int, bootstrap: str, workdir: Path,
                 name: str) -> None:
        self.impl = impl
        self.out = workdir / f"{impl}-{port}.jsonl"
        self.log_path = workdir / f"{impl}-{port}.log"
        self.checkpoint = workdir / f"cp-{impl}-{port}"
        scratch = workdir / "spark-local"
        scratch.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
        env.setdefault("SPARK_LOCAL_DIRS", str(scratch))
        env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                   PYSPARK_DRIVER_PYTHON=sys.executable, KAFKA_BOOTSTRAP_SERVERS=bootstrap)
        cmd = [sys.executable, "-c", "import sys, bench.structured_app as a; sys.exit(a.main())",
               "--impl", impl, "--port", str(port), "--checkpoint", str(self.checkpoint),
               "--out", str(self.out), "--name", name]
        self._log = open(self.log_path, "a")  # noqa: SIM115 (closed in stop/kill)
        self.started_wall = time.time()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def events(self) -> list[dict[str, Any]]:
        if not self.out.exists():
            return []
        out = []
        for line in self.out.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # being written
        return out

    def batches(self) -> list[dict[str, Any]]:
        return [e for e in self.events() if "batch" in e]

    def kill(self) -> None:
        kill_group(self.proc.pid, grace_s=20)
        self._log.close()

    def stop(self) -> None:
        self.kill()


def ladder(impl: str, bootstrap: str, workdir: Path, cfg: dict[str, Any], name: str) -> AppRun:
    """The peer benchmark's ladder, run on this benchmark's app."""
    return peer_bench.ladder(impl, bootstrap, workdir, cfg, make_app=lambda server:
                             StructuredApp(impl, server.port, bootstrap, workdir, name))


@dataclass
class Recovery:
    restart_to_started_s: float
    restart_to_first_batch_s: float
    sent: int
    counted: int
    error: str = ""  # how the restarted query failed, if it did


def query_error(log_path: Path) -> str:
    """The restarted query's failure, from its app's log (Spark's message)."""
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    marker = "terminated with exception: "
    for line in reversed(text.splitlines()):
        if marker in line:
            return line.split(marker, 1)[1].split(" SQLSTATE")[0].strip()
    return ""


def recovery(impl: str, bootstrap: str, workdir: Path, cfg: dict[str, Any],
             name: str) -> Recovery:
    server = LineServer()
    app = StructuredApp(impl, server.port, bootstrap, workdir, name)
    sent = 0
    try:
        wait_connected(server, app, 180)  # type: ignore[arg-type]
        before = Phase(float(cfg["recovery_rate"]))
        server.run_phase(before, float(cfg["before_s"]))
        app.kill()
        restarted = time.time()
        app = StructuredApp(impl, server.port, bootstrap, workdir, name)
        server.serve_newest(RESTART_WAIT_S)
        after = Phase(float(cfg["recovery_rate"]))
        server.run_phase(after, float(cfg["after_s"]))
        sent = before.sent + after.sent
        drain(app, sent, 30)  # type: ignore[arg-type]
        events = app.events()
    finally:
        app.stop()
        server.close()
    error = query_error(app.log_path)
    started = [e["wall"] for e in events if e.get("event") == "started"
               and e["wall"] >= restarted]
    first = [e["wall"] for e in events if "batch" in e and e["records"] > 0
             and e["wall"] >= restarted]
    counted = sum(e["records"] for e in events if "batch" in e)
    return Recovery(started[0] - restarted if started else float("nan"),
                    first[0] - restarted if first else float("nan"), sent, counted, error)


@dataclass
class Result:
    impl: str
    rates: list[float] = field(default_factory=list)
    recoveries: list[Recovery] = field(default_factory=list)
    # Runs whose every step was sustained: the rate is a lower bound.
    at_top: int = 0


def _stat(values: list[float]) -> str:
    ok = [v for v in values if v == v]
    return Stat.of(ok).fmt(1 if ok and max(ok) < 100 else 0) if ok else "n/a"


def render(results: dict[str, Result], facts: dict[str, str], cfg: dict[str, Any],
           size: str, elapsed_s: float, runs: int | None = None) -> str:
    rows = []
    for impl in IMPLS:
        r = results[impl]
        rec = r.recoveries
        lost = [float(x.sent - x.counted) for x in rec]
        rows.append([LABELS[impl], str(len(r.rates)), _stat(r.rates),
                     _stat([x.restart_to_first_batch_s for x in rec]),
                     _stat([x.restart_to_started_s for x in rec]),
                     _stat(lost), _stat([float(x.sent) for x in rec])])
    a, b = results["spark"].rates, results["ours"].rates
    ratio = (f"{statistics.median(b) / statistics.median(a):.2f}x"
             if a and b and statistics.median(a) > 0 else "n/a")
    lines = [
        "# Structured Streaming: word count through walstream's source vs Spark's socket source",
        "", f"Command: `python -m bench.structured_bench --size {size}"
        f"{f' --runs {runs}' if runs else ''}`", "",
        md_facts(facts), "",
        f"Size `{size}`: ladder x{cfg['step']:.2f} per step from {cfg['first_rate']} lines/s, "
        f"{cfg['phase_s']:.0f} s per step; recovery at {cfg['recovery_rate']} lines/s, "
        f"{cfg['before_s']:.0f} s before the SIGKILL and {cfg['after_s']:.0f} s after the "
        f"restart. Took {elapsed_s / 60:.0f} min.", "",
        "Each cell: median [min, max] over the runs. *Lines lost*: lines the server sent "
        "minus input rows the query counted over both incarnations (a driver SIGKILL "
        "loses what Spark's socket source held in memory, and walstream's receiver "
        "tail not yet stored in a block).", "",
        md_table(["system", "runs", "sustained lines/s", "restart -> first batch with "
                  "input (s)", "restart -> query started (s)", "lines lost at the SIGKILL",
                  "lines sent"], rows), "",
        f"Sustained throughput (b)/(a): **{ratio}**.", "",
    ]
    tops = [f"{LABELS[impl]}: {results[impl].at_top} of {len(results[impl].rates)} run(s) "
            "sustained every step of the ladder, so its rate is a lower bound"
            for impl in IMPLS if results[impl].at_top]
    if tops:
        lines += [f"- {t}" for t in tops] + [""]
    failed = [(LABELS[impl], x.error) for impl in IMPLS for x in results[impl].recoveries
              if x.error]
    if failed:
        lines += ["Restarted queries that failed (n/a above: no micro-batch with input "
                  "after the restart):", ""]
        lines += [f"- {label}: `{err}`" for label, err in failed] + [""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, list(SIZES),
                      ROOT / "bench" / "results" / "RESULTS-structured.md")
    ap.add_argument("--runs", type=int, default=None)
    args = ap.parse_args(argv)
    cfg = dict(SIZES[args.size])
    runs = args.runs or int(cfg["runs"])
    exit_on_sigterm()
    started = time.monotonic()
    results = {impl: Result(impl) for impl in IMPLS}
    workdir = Path(tempfile.mkdtemp(prefix="walstream-structured-"))
    try:
        with bench_broker() as broker:
            facts = machine_info(broker.description)
            for i in range(runs):
                for impl in IMPLS:  # interleaved: drift hits both alike
                    name = f"sbench-{os.getpid()}-{i}-{impl}"
                    log(f"run {i + 1}/{runs}: {impl} ladder")
                    run = ladder(impl, broker.bootstrap, workdir, cfg, name + "-l")
                    best, _, _ = sustained(run)
                    results[impl].rates.append(best)
                    if len(run.phases) == int(cfg["steps"]) and best >= run.phases[-1].achieved:
                        results[impl].at_top += 1
                    log(f"{impl}: sustained {best:.0f} lines/s")
                    log(f"run {i + 1}/{runs}: {impl} recovery")
                    rec = recovery(impl, broker.bootstrap, workdir, cfg, name + "-r")
                    results[impl].recoveries.append(rec)
                    log(f"{impl}: restart -> first batch {rec.restart_to_first_batch_s:.1f} s; "
                        f"sent {rec.sent}, counted {rec.counted}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    write_results(args.out, render(results, facts, cfg, args.size,
                                   time.monotonic() - started, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
