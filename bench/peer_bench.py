"""Peer benchmark: Spark's own receiver WAL vs this service, the same word count.

Usage (from the repo root)::

    python -m bench.peer_bench [--size small|full] [--runs N] [--out bench/results/RESULTS-peer.md]

Both systems run ``bench/peer_app.py`` (identical code but for its imports) on
``local[3]`` with a 1 s batch, reading lines from one local TCP line server:

(a) ``pyspark.streaming`` ``socketTextStream`` with
    ``spark.streaming.receiver.writeAheadLog.enable=true`` and a local checkpoint
    directory (Spark writes every block to a log file under it before reporting it);
(b) this service's ``socketTextStream``: every block in the Kafka WAL on the embedded
    broker (in-memory Tansu, or ``KAFKA_BOOTSTRAP_SERVERS``) before it is reported.

Per run and system:

1. **Sustained rate.** After a warm-up at the first rate (not judged; at least
   10 s, and until the delay of the cold start has drained), the line server
   offers a ladder of rates (x1.41 per step,
   ``phase_s`` seconds each, a short pause between steps). A step is *sustained*
   when the server reached at least 90% of the offered rate (TCP backpressure
   shows a receiver that cannot keep up), and in its second half the batches
   took at most one batch interval to process on average and none waited longer
   than one interval to start (scheduling delay): the delay is not growing. The
   ladder stops at the first step that is not sustained; the result is the highest sustained rate.
2. **Latency at half that rate.** A fresh app is offered half of its own
   sustained rate, warmed up as above and then ``latency_s`` seconds measured; p50
   and p99 of the measured batches' total delay (end of processing minus batch
   time, Spark's ``totalDelay``).

Lines are 12 words from a seeded vocabulary of 1000 (about 95 bytes each). Every
process started (apps, broker) is stopped at the end, also on failure.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    Stat,
    bench_broker,
    bench_parser,
    exit_on_sigterm,
    log,
    machine_info,
    md_facts,
    md_table,
    percentile,
    pyplot,
    write_results,
)
from bench.peer_apps import (
    BATCH_S,
    ROOT,
    WORDS_PER_LINE,
    App,
    AppRun,
    LineServer,
    Phase,
    impl_label,
    lines_pool,
    wait_connected,
)
from walstream.procs import kill_group

SIZES: dict[str, dict[str, Any]] = {
    # phase_s, first rate (of 12-word lines), rate factor per step, max steps,
    # latency_s, runs
    "small": dict(phase_s=6.0, first_rate=4000, step=2 ** 0.5, steps=8, latency_s=12.0,
                  runs=1),
    "full": dict(phase_s=12.0, first_rate=4000, step=2 ** 0.25, steps=26, latency_s=30.0,
                 runs=3),
}
FLOOR_WORDS = 4_800_000  # words per floor job (400,000 lines of 12 words)
FLOOR_TIMEOUT_S = 600.0
GAP_S = 3.0  # pause between steps: the last batches of a step drain
WARMUP_S = 10.0  # at least, at the first rate, not judged
SETTLE_MAX_S = 120.0  # warm-up ends when the delay of a cold start has drained
SETTLED_MS = 200  # ... that is when the newest batch started within this of its time


def _in_phase(batches: list[dict[str, Any]], ph: Phase) -> list[dict[str, Any]]:
    """Batches whose interval lies inside the phase (the first one, partly before, not)."""
    lo, hi = ph.start * 1000 + BATCH_S * 1000, ph.end * 1000 + BATCH_S * 1000
    return [b for b in batches if lo <= b["t"] <= hi]


def phase_verdict(batches: list[dict[str, Any]], ph: Phase) -> tuple[bool, str]:
    inside = _in_phase(batches, ph)
    if len(inside) < 2:
        return False, "fewer than 2 batches completed"
    if ph.achieved < 0.9 * ph.offered:
        return False, f"server reached {ph.achieved:.0f}/s of {ph.offered:.0f}/s (backpressure)"
    half = inside[len(inside) // 2:]
    # Steady state: the batches of the second half are processed, on average, within
    # one batch interval (else the delay grows without bound, however slowly), and
    # none of them waited longer than one interval to start.
    mean_processing = statistics.mean(b["processing_ms"] for b in half)
    if mean_processing > BATCH_S * 1000:
        return False, (f"processing {mean_processing:.0f} ms per batch > batch interval "
                       "(delay growing)")
    worst = max(b["scheduling_ms"] for b in half)
    if worst > BATCH_S * 1000:
        return False, f"scheduling delay {worst} ms > batch interval (delay growing)"
    return True, "sustained"


def drain(app: App, want: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(b["records"] for b in app.batches()) >= want:
            return
        time.sleep(0.5)


def settle(server: LineServer, app: App, rate: float, run: AppRun) -> None:
    """Warm up at ``rate`` (not judged) until the app is in steady state.

    At least ``WARMUP_S``; then until the newest completed batch started within
    ``SETTLED_MS`` of its batch time. A cold start (JVM, Python workers) leaves
    seconds of scheduling delay that a system whose processing time is close to
    the batch interval drains only slowly; measuring before it has drained once
    ended Spark's ladder at its first step.
    """
    started = time.monotonic()
    while True:
        warm = Phase(rate)
        server.run_phase(warm, 2.0)
        run.warmup_sent += warm.sent
        elapsed = time.monotonic() - started
        if elapsed < WARMUP_S:
            continue
        batches = app.batches()
        if batches and batches[-1]["scheduling_ms"] <= SETTLED_MS:
            return
        if elapsed >= SETTLE_MAX_S:
            log(f"{app.impl}: still delayed after {elapsed:.0f} s of warm-up; measuring anyway")
            return


def ladder(impl: str, bootstrap: str, workdir: Path, cfg: dict[str, Any],
           make_app: Callable[[LineServer], Any] | None = None) -> AppRun:
    """The rate ladder of one app (``make_app(server)``, default ``bench/peer_app.py``:
    any app with ``batches()``, ``stop()`` and :class:`App`'s process fields)."""
    server = LineServer(int(cfg.get("words_per_line", WORDS_PER_LINE)))
    app = (make_app(server) if make_app is not None
           else App(impl, server.port, bootstrap, workdir))
    run = AppRun(impl)
    try:
        wait_connected(server, app, 120)
        time.sleep(2 * BATCH_S)  # the first (empty) batches
        settle(server, app, float(cfg["first_rate"]), run)
        time.sleep(GAP_S)
        rate = float(cfg["first_rate"])
        for _ in range(int(cfg["steps"])):
            ph = Phase(rate)
            server.run_phase(ph, cfg["phase_s"])
            run.phases.append(ph)
            time.sleep(GAP_S)
            ok, why = phase_verdict(app.batches(), ph)
            log(f"{impl}: {ph.offered:.0f}/s offered, {ph.achieved:.0f}/s sent: {why}")
            if not ok:
                break
            rate *= float(cfg["step"])
        drain(app, run.warmup_sent + sum(p.sent for p in run.phases), 30)
        run.batches = app.batches()
        run.reconnects = server.reconnects
    finally:
        app.stop()
        server.close()
    return run


def latency(impl: str, bootstrap: str, workdir: Path, rate: float, seconds: float,
            words_per_line: int = WORDS_PER_LINE) -> AppRun:
    server = LineServer(words_per_line)
    app = App(impl, server.port, bootstrap, workdir)
    run = AppRun(impl)
    try:
        wait_connected(server, app, 120)
        time.sleep(2 * BATCH_S)
        settle(server, app, rate, run)
        ph = Phase(rate)
        server.run_phase(ph, seconds)
        run.phases.append(ph)
        drain(app, run.warmup_sent + ph.sent, 30)
        run.batches = app.batches()
        run.reconnects = server.reconnects
    finally:
        app.stop()
        server.close()
    return run


def sustained(run: AppRun) -> tuple[float, int, int]:
    """(highest sustained achieved rate, lines sent in those steps, lines counted)."""
    best, sent = 0.0, 0
    for ph in run.phases:
        ok, _ = phase_verdict(run.batches, ph)
        if not ok:
            break
        best = max(best, ph.achieved)
        sent += ph.sent
    return best, sent, sum(b["records"] for b in run.batches)


def ladder_topped(run: AppRun, cfg: dict[str, Any]) -> bool:
    """Whether the ladder ran out of steps with every one sustained: the system was
    not pushed to its limit, and its sustained rate is a lower bound."""
    return (len(run.phases) >= int(cfg["steps"])
            and all(phase_verdict(run.batches, p)[0] for p in run.phases))


def _topped_lines(results: list[Result]) -> list[str]:
    return [f"- {impl_label(r.impl)} sustained the ladder's top step in {sum(r.topped)} of "
            f"{len(r.topped)} runs: there its sustained rate, and its fraction of the floor, "
            "are lower bounds" for r in results if any(r.topped)]


def delays(run: AppRun) -> list[float]:
    """totalDelay of the batches inside the measured phase (the warm-up is not)."""
    return [float(b["total_ms"]) for b in _in_phase(run.batches, run.phases[0])
            if b["records"] > 0]


@dataclass
class Result:
    impl: str
    rates: list[float] = field(default_factory=list)
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    counted_ok: list[bool] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Per run: every step of the ladder was sustained, so its rate is a lower bound.
    topped: list[bool] = field(default_factory=list)
    ladders: list[AppRun] = field(default_factory=list)


def floor(workdir: Path, words_per_line: int, repeats: int) -> list[float]:
    """Lines/s of the floor job (``bench.peer_floor``), one value per timed repeat."""
    out = workdir / "floor.json"
    log_path = workdir / "floor.log"
    env = dict({k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"},
               SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable)
    scratch = workdir / "spark-local"
    scratch.mkdir(parents=True, exist_ok=True)
    env.setdefault("SPARK_LOCAL_DIRS", str(scratch))
    cmd = [sys.executable, "-m", "bench.peer_floor", "--words-per-line", str(words_per_line),
           "--lines", str(max(1000, FLOOR_WORDS // words_per_line)),
           "--repeats", str(repeats), "--out", str(out)]
    with open(log_path, "a") as logf:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=logf,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(FLOOR_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            kill_group(proc.pid, grace_s=5)  # its JVM and Python workers too
    if code != 0:
        raise RuntimeError(f"the floor job failed ({code}); see {log_path}:\n"
                           f"{log_path.read_text()[-3000:]}")
    return [float(v) for v in json.loads(out.read_text())["lines_per_s"]]


def check_counts(run: AppRun, words_per_line: int) -> tuple[bool, str]:
    sent = run.warmup_sent + sum(p.sent for p in run.phases)
    records = sum(b["records"] for b in run.batches)
    words = sum(b["words"] for b in run.batches)
    ok = records == sent and words == words_per_line * sent
    return ok, f"sent {sent}, counted {records} lines / {words} words"


def plot(results: list[Result], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True)
    for r in results:
        run = r.ladders[0]
        t0 = run.phases[0].start * 1000 if run.phases else 0
        xs = [(b["t"] - t0) / 1000 for b in run.batches]
        ax1.plot(xs, [b["records"] / BATCH_S for b in run.batches], label=impl_label(r.impl))
        ax2.plot(xs, [b["total_ms"] / 1000 for b in run.batches], label=impl_label(r.impl))
    ax1.set_ylabel("lines/s per batch")
    ax2.set_ylabel("batch total delay (s)")
    ax2.set_xlabel("seconds since the first step (the offered rate rises each step)")
    ax1.legend()
    ax1.set_title("Word count on local[3], 1 s batches: rate ladder, first run")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def _stat(values: list[float]) -> Stat:
    """Over the runs that measured it (a run with no sustained rate has no latency)."""
    measured = [v for v in values if v == v]
    return Stat.of(measured) if measured else Stat(float("nan"), float("nan"),
                                                       float("nan"), 0)


def floor_fractions(r: Result, floor_runs: Result) -> list[float]:
    """Each run's sustained rate over the floor job of the same run."""
    return [rate / f for rate, f in zip(r.rates, floor_runs.rates, strict=True) if f > 0]


FLOOR_TARGET = 0.8  # of the floor, sustained
P99_TARGET_MS = 1500  # at half the sustained rate


def _spark_lines(a: Result | None, b: Result, floor_runs: Result) -> list[str]:
    """The target lines against Spark's receiver WAL (none when it did not run)."""
    if a is None:
        return []
    ra, rb = Stat.of(a.rates), Stat.of(b.rates)
    pa, pb = _stat(a.p99), _stat(b.p99)
    thr_ratio = rb.median / ra.median if ra.median else float("nan")
    return [
        f"- Throughput (b)/(a): **{thr_ratio:.2f}x** (target >= 2x): "
        f"**{'met' if thr_ratio >= 2 else 'missed'}**",
        f"- p99 latency at half rate: (b) {pb.median:.0f} ms vs (a) {pa.median:.0f} ms "
        f"(target: lower): **{'met' if pb.median < pa.median else 'missed'}**",
        f"- (a) sustained / floor (c): {_stat(floor_fractions(a, floor_runs)).median:.2f}x",
    ]


def render(results: list[Result], floor_runs: Result, facts: dict[str, str],
           cfg: dict[str, Any], size: str, elapsed: float, plotted: str | None) -> str:
    by = {r.impl: r for r in results}
    b = by["ours"]
    a = by.get("spark")
    rb, pb = Stat.of(b.rates), _stat(b.p99)
    words = int(cfg["words_per_line"])
    line_bytes = len(lines_pool(words)[0])
    fb = _stat(floor_fractions(b, floor_runs))

    def mb_s(values: list[float]) -> str:
        return Stat.of([v * line_bytes / 1e6 for v in values]).fmt(1)

    rows = []
    for r in results:
        rows.append([impl_label(r.impl), Stat.of(r.rates).fmt(0), mb_s(r.rates),
                     _stat(floor_fractions(r, floor_runs)).fmt(2),
                     _stat(r.p50).fmt(0), _stat(r.p99).fmt(0),
                     "yes" if all(r.counted_ok) else "NO: " + "; ".join(r.notes)])
    rows.insert(2, [impl_label("floor"), Stat.of(floor_runs.rates).fmt(0),
                    mb_s(floor_runs.rates), "1", "-", "-", "yes (each job checks its count)"])
    flags = "".join([
        " --metrics-baseline" if "ours-nometrics" in by else "",
        "" if a is not None else " --impls ours",
        f" --words-per-line {words}" if words != WORDS_PER_LINE else ""])
    lines = [
        "# Peer benchmark: Spark's own receiver WAL vs walstream, and the machine's floor",
        "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by "
        f"`python -m bench.peer_bench --size {size} --runs {len(b.rates)}{flags}` "
        f"({elapsed:.0f} s in all). Cells: **median [min, max]** over the runs.", "",
        "## Machine", "", md_facts(facts), "",
        "## Configuration", "",
        md_facts({
            "App": "`bench/peer_app.py`, identical for both but for its imports: "
                   "socketTextStream -> flatMap(split) -> map((w, 1)) -> reduceByKey -> "
                   "foreachRDD(sum of counts); a StreamingListener records each batch",
            "Spark": f"local[3], batch {BATCH_S:.0f} s, block interval 200 ms (both defaults), "
                     "checkpoint directory on local disk",
            "(a)": "pyspark.streaming (Spark 4.3), "
                   "`spark.streaming.receiver.writeAheadLog.enable=true`, "
                   "StorageLevel.MEMORY_AND_DISK (serialized, 1 replica, as Spark advises "
                   "with the WAL); Python workers over loopback TCP (Spark's default)",
            "(b)": "`driver.StreamingContext`; blocks in the Kafka WAL (acks=all, idempotent) "
                   "before AddBlock; tracker events in the driver's Kafka WAL; Python "
                   "workers over Unix domain sockets (walstream's default: "
                   "`spark.python.unix.domain.socket.enabled`, unless the app sets it)",
            "(c)": "the floor: the same word count as a plain PySpark batch job "
                   "(`bench/peer_floor.py`) over the same lines already in the driver's "
                   f"memory, {max(1000, FLOOR_WORDS // words)} lines per job, "
                   "`sc.parallelize(lines, 6)`, same Spark settings, Python workers over "
                   "Unix domain sockets as (b), warm (2 unmeasured "
                   "jobs), in the same run as (a) and (b); what the machine can count "
                   "with nothing received, logged or scheduled per batch",
            "(d)": "(b) with `spark.walstream.metrics.enabled=false` (only with "
                   "`--metrics-baseline`): no metrics listener, metered WAL or status server",
            "Input": f"one TCP line server in the benchmark process; lines of {words} words "
                     f"({line_bytes} B with the newline) from a seeded vocabulary of 1000",
            "Sustained rate": f"warm-up (>= {WARMUP_S:.0f} s, until the newest batch's "
                              f"scheduling delay <= {SETTLED_MS} ms), then a ladder from "
                              f"{cfg['first_rate']} lines/s, x{float(cfg['step']):.2f} per "
                              "step, "
                              f"{cfg['phase_s']:.0f} s per step, {GAP_S:.0f} s pause; a step "
                              "is sustained when the server reached >= 90% of the offered "
                              "rate, and in its second half the mean processing time and "
                              "every scheduling delay were within the batch interval; "
                              "result = the highest sustained step's achieved rate",
            "Latency": f"a fresh app offered half its own sustained rate for "
                       f"{cfg['latency_s']:.0f} s after the same warm-up; totalDelay "
                       "of each batch (processing end minus batch time)",
            "Counted": "every line sent in the ladder is counted once (records and 12x words)",
        }), "",
        "## Results", "",
        md_table(["System", "Sustained lines/s", "MB/s of lines",
                  "Fraction of the floor (c), per run", "Latency p50 (ms)",
                  "Latency p99 (ms)", "All lines counted exactly"], rows), "",
        *_spark_lines(a, b, floor_runs),
        f"- (b) sustained / floor (c): **{fb.median:.2f}x** (target >= {FLOOR_TARGET}x): "
        f"**{'met' if fb.median >= FLOOR_TARGET else 'missed'}**",
        f"- (b) p99 latency at half its sustained rate: {pb.median:.0f} ms (target <= "
        f"{P99_TARGET_MS} ms): **{'met' if pb.median <= P99_TARGET_MS else 'missed'}**",
        *_topped_lines(results), "",
    ]
    if "ours-nometrics" in by:
        c = by["ours-nometrics"]
        rc, pc = Stat.of(c.rates), _stat(c.p99)
        lines += [
            f"- Cost of the metrics (listener, metered driver WAL, status server): "
            f"throughput with them / without them **{rb.median / rc.median:.2f}x**; "
            f"p99 {pb.median:.0f} ms with, {pc.median:.0f} ms without", ""]
    if plotted:
        lines += [f"![rate ladder]({plotted})", ""]
    lines += ["## Ladder steps (first run)", ""]
    for r in results:
        run = r.ladders[0]
        steps = [[f"{p.offered:.0f}", f"{p.achieved:.0f}", phase_verdict(run.batches, p)[1]]
                 for p in run.phases]
        lines += [f"{impl_label(r.impl)}:", "",
                  md_table(["Offered lines/s", "Sent lines/s", "Verdict"], steps), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, list(SIZES), ROOT / "bench" / "results" / "RESULTS-peer.md")
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--metrics-baseline", action="store_true",
                    help="also run walstream with spark.walstream.metrics.enabled=false")
    ap.add_argument("--words-per-line", type=int, default=WORDS_PER_LINE,
                    help="words per line (12: about 95 B; 1250: about 10 KB)")
    ap.add_argument("--impls", nargs="+", choices=["spark", "ours"], default=["spark", "ours"],
                    help="the systems to run (walstream always: its fraction of the floor)")
    ap.add_argument("--floor-repeats", type=int, default=5,
                    help="timed repeats of the floor job per run")
    args = ap.parse_args(argv)
    cfg = dict(SIZES[args.size])
    words = args.words_per_line
    cfg["words_per_line"] = words
    # The same bytes per second at the first step, whatever the line size.
    cfg["first_rate"] = max(40, round(float(cfg["first_rate"]) * WORDS_PER_LINE / words))
    runs = args.runs or int(cfg["runs"])
    exit_on_sigterm()
    started = time.monotonic()
    impls = tuple(dict.fromkeys([*args.impls, "ours"])) + (
        ("ours-nometrics",) if args.metrics_baseline else ())
    results = {impl: Result(impl) for impl in impls}
    floor_runs = Result("floor")
    workdir = Path(tempfile.mkdtemp(prefix="walstream-peer-"))
    try:
        with bench_broker() as broker:
            facts = machine_info(broker.description)
            for i in range(runs):
                log(f"run {i + 1}/{runs}: floor job")
                per_repeat = floor(workdir, words, args.floor_repeats)
                floor_runs.rates.append(statistics.median(per_repeat))
                floor_runs.counted_ok.append(True)  # the job checks its own count
                log(f"floor: {floor_runs.rates[-1]:.0f} lines/s "
                    f"(repeats {', '.join(f'{v:.0f}' for v in per_repeat)})")
                for impl in impls:  # interleaved: drift hits all alike
                    r = results[impl]
                    log(f"run {i + 1}/{runs}: {impl} ladder")
                    run = ladder(impl, broker.bootstrap, workdir, cfg)
                    r.ladders.append(run)
                    best, _, _ = sustained(run)
                    r.rates.append(best)
                    r.topped.append(ladder_topped(run, cfg))
                    ok, note = check_counts(run, words)
                    r.counted_ok.append(ok)
                    if not ok:
                        r.notes.append(note)
                    log(f"{impl}: sustained {best:.0f} lines/s; {note}")
                    if best <= 0:
                        r.p50.append(float("nan"))
                        r.p99.append(float("nan"))
                        continue
                    lat = latency(impl, broker.bootstrap, workdir, best / 2, cfg["latency_s"],
                                  words)
                    ds = delays(lat)
                    r.p50.append(statistics.median(ds) if ds else float("nan"))
                    r.p99.append(percentile(ds, 99) if ds else float("nan"))
                    log(f"{impl}: latency at {best / 2:.0f}/s: p50 {r.p50[-1]:.0f} ms "
                        f"p99 {r.p99[-1]:.0f} ms over {len(ds)} batches")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    # Beside its results; another --out (a metrics baseline run) keeps its own plot.
    png = args.out.parent / ("peer-ladder.png" if args.out.name == "RESULTS-peer.md"
                             else f"{args.out.stem.lower()}-ladder.png")
    plotted = png.name if plot(list(results.values()), png) else None
    text = render(list(results.values()), floor_runs, facts, cfg, args.size,
                  time.monotonic() - started, plotted)
    write_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
