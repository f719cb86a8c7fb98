"""Peer benchmark: Spark's own receiver WAL vs this service, the same word count.

Usage (from the repo root)::

    python -m bench.peer_bench [--size small|full] [--runs N] [--out bench/RESULTS-peer.md]

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

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
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
from walstream.procs import kill_group

ROOT = Path(__file__).resolve().parent.parent
SIZES: dict[str, dict[str, Any]] = {
    # phase_s, first rate, max steps, latency_s, runs
    "small": dict(phase_s=6.0, first_rate=4000, steps=8, latency_s=12.0, runs=1),
    "full": dict(phase_s=12.0, first_rate=4000, steps=12, latency_s=30.0, runs=3),
}
BATCH_S = 1.0
STEP = 2 ** 0.5
GAP_S = 3.0  # pause between steps: the last batches of a step drain
WARMUP_S = 10.0  # at least, at the first rate, not judged
SETTLE_MAX_S = 120.0  # warm-up ends when the delay of a cold start has drained
SETTLED_MS = 200  # ... that is when the newest batch started within this of its time


def _lines(seed: int = 7, n: int = 5000) -> list[bytes]:
    rnd = random.Random(seed)
    vocab = [f"word{i:03d}" for i in range(1000)]
    return [(" ".join(rnd.choice(vocab) for _ in range(12)) + "\n").encode() for _ in range(n)]


@dataclass
class Phase:
    offered: float  # lines/s
    start: float = 0.0  # wall clock (time.time())
    end: float = 0.0
    sent: int = 0

    @property
    def achieved(self) -> float:
        return self.sent / max(1e-9, self.end - self.start)


class LineServer:
    """Serves lines on 127.0.0.1 at the rate of the current phase to the first client.

    Later connections (a receiver that restarted) are accepted and held idle and
    counted: lines already sent to a dead connection are not resent.
    """

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self.port = self._sock.getsockname()[1]
        self.connected = threading.Event()
        self.reconnects = 0
        self._conn: socket.socket | None = None
        self._idle: list[socket.socket] = []
        self._closed = False
        self._pool = _lines()
        self._i = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            if self._conn is None:
                self._conn = conn
                self.connected.set()
            else:
                self.reconnects += 1
                self._idle.append(conn)

    def serve_newest(self, timeout_s: float) -> None:
        """Serve the newest connection from now on (a restarted receiver's), waiting
        up to ``timeout_s`` for one; the old connection is closed."""
        deadline = time.monotonic() + timeout_s
        while not self._idle:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no receiver reconnected in {timeout_s:.0f} s")
            time.sleep(0.2)
        old, self._conn = self._conn, self._idle.pop()
        if old is not None:
            with contextlib.suppress(OSError):
                old.close()

    def run_phase(self, phase: Phase, seconds: float) -> None:
        assert self._conn is not None
        phase.start = time.time()
        t0 = time.monotonic()
        while True:
            elapsed = time.monotonic() - t0
            if elapsed >= seconds:
                break
            due = int(phase.offered * elapsed) - phase.sent
            if due > 0:
                due = min(due, 20000)
                chunk = []
                for _ in range(due):
                    chunk.append(self._pool[self._i])
                    self._i = (self._i + 1) % len(self._pool)
                try:
                    self._conn.sendall(b"".join(chunk))  # blocks when the receiver lags
                except OSError:
                    break
                phase.sent += due
            else:
                time.sleep(0.005)
        phase.end = time.time()

    def close(self) -> None:
        self._closed = True
        for s in [self._sock, self._conn, *self._idle]:
            if s is not None:
                with contextlib.suppress(OSError):
                    s.close()


@dataclass
class AppRun:
    impl: str
    batches: list[dict[str, Any]] = field(default_factory=list)
    phases: list[Phase] = field(default_factory=list)
    reconnects: int = 0
    warmup_sent: int = 0


class App:
    """One peer_app subprocess in its own process group (always killed).

    Started again with the same ``impl``, ``port`` and ``workdir`` it is the same
    app: same checkpoint (``getOrCreate`` restores it), same output file (appended).
    """

    def __init__(self, impl: str, port: int, bootstrap: str, workdir: Path,
                 extra_args: list[str] | None = None,
                 extra_env: dict[str, str] | None = None) -> None:
        self.impl = impl
        self.out = workdir / f"{impl}-{port}.jsonl"
        self.log_path = workdir / f"{impl}-{port}.log"
        self.checkpoint = workdir / f"cp-{impl}-{port}"
        # PYSPARK_SUBMIT_ARGS is not inherited: walstream's getOrCreate sets its own
        # (the class archive; the master it keeps from its checkpoint), and Spark's
        # side starts as Spark ships it, given only its master.
        env = {k: v for k, v in os.environ.items() if k != "PYSPARK_SUBMIT_ARGS"}
        if impl == "spark":
            # Spark's checkpoint recovery takes spark.master from the launch, not from
            # the checkpoint, and a plain `python app.py` launches with local[*] (2
            # slots here: one receiver, one task). A Spark user restarts with
            # `spark-submit --master`; so does this, with the app's own master.
            args = list(extra_args or [])
            master = args[args.index("--master") + 1] if "--master" in args else "local[3]"
            env["PYSPARK_SUBMIT_ARGS"] = f"--master {master} pyspark-shell"
        env = dict(env, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                   PYSPARK_DRIVER_PYTHON=sys.executable, KAFKA_BOOTSTRAP_SERVERS=bootstrap,
                   WALSTREAM_APP_ID=f"peer-{port}", **(extra_env or {}))
        cmd = [sys.executable, "-c", "import sys, bench.peer_app as a; sys.exit(a.main())",
               "--impl", impl, "--port", str(port), "--batch-s", str(BATCH_S),
               "--checkpoint", str(self.checkpoint), "--out", str(self.out),
               *(extra_args or [])]
        self._log = open(self.log_path, "a")  # noqa: SIM115 (closed in stop)
        self.started_wall = time.time()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def batches(self) -> list[dict[str, Any]]:
        return self.read_batches(self.out)

    @staticmethod
    def read_batches(path: Path) -> list[dict[str, Any]]:
        """The app's per-batch JSON lines (a line being written is skipped)."""
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue  # a line being written
        return out

    def kill(self) -> None:
        """SIGKILL the app, its JVM and its Python workers at once (a crash)."""
        kill_group(self.proc.pid, grace_s=20)
        self._log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
        kill_group(self.proc.pid, grace_s=5)
        self._log.close()


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


def _wait_connected(server: LineServer, app: App, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not server.connected.wait(0.5):
        if app.proc.poll() is not None:
            raise RuntimeError(f"{app.impl} app exited ({app.proc.returncode}); "
                               f"see {app.log_path}:\n{app.log_path.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the receiver did not connect in {timeout_s}s; see {app.log_path}")


def _drain(app: App, want: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(b["records"] for b in app.batches()) >= want:
            return
        time.sleep(0.5)


def _settle(server: LineServer, app: App, rate: float, run: AppRun) -> None:
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


def ladder(impl: str, bootstrap: str, workdir: Path, cfg: dict[str, Any]) -> AppRun:
    server = LineServer()
    app = App(impl, server.port, bootstrap, workdir)
    run = AppRun(impl)
    try:
        _wait_connected(server, app, 120)
        time.sleep(2 * BATCH_S)  # the first (empty) batches
        _settle(server, app, float(cfg["first_rate"]), run)
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
            rate *= STEP
        _drain(app, run.warmup_sent + sum(p.sent for p in run.phases), 30)
        run.batches = app.batches()
        run.reconnects = server.reconnects
    finally:
        app.stop()
        server.close()
    return run


def latency(impl: str, bootstrap: str, workdir: Path, rate: float, seconds: float) -> AppRun:
    server = LineServer()
    app = App(impl, server.port, bootstrap, workdir)
    run = AppRun(impl)
    try:
        _wait_connected(server, app, 120)
        time.sleep(2 * BATCH_S)
        _settle(server, app, rate, run)
        ph = Phase(rate)
        server.run_phase(ph, seconds)
        run.phases.append(ph)
        _drain(app, run.warmup_sent + ph.sent, 30)
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
    ladders: list[AppRun] = field(default_factory=list)


def _check_counts(run: AppRun) -> tuple[bool, str]:
    sent = run.warmup_sent + sum(p.sent for p in run.phases)
    records = sum(b["records"] for b in run.batches)
    words = sum(b["words"] for b in run.batches)
    ok = records == sent and words == 12 * sent
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
        ax1.plot(xs, [b["records"] / BATCH_S for b in run.batches], label=_label(r.impl))
        ax2.plot(xs, [b["total_ms"] / 1000 for b in run.batches], label=_label(r.impl))
    ax1.set_ylabel("lines/s per batch")
    ax2.set_ylabel("batch total delay (s)")
    ax2.set_xlabel("seconds since the first step (the offered rate rises x1.41 per step)")
    ax1.legend()
    ax1.set_title("Word count on local[3], 1 s batches: rate ladder, first run")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def _label(impl: str) -> str:
    return {"spark": "(a) Spark receiver WAL (local disk)",
            "ours": "(b) walstream (Kafka WAL)"}[impl]


def _stat(values: list[float]) -> Stat:
    """Over the runs that measured it (a run with no sustained rate has no latency)."""
    measured = [v for v in values if v == v]
    return Stat.of(measured) if measured else Stat(float("nan"), float("nan"),
                                                       float("nan"), 0)


def render(results: list[Result], facts: dict[str, str], cfg: dict[str, Any],
           size: str, elapsed: float, plotted: str | None) -> str:
    by = {r.impl: r for r in results}
    a, b = by["spark"], by["ours"]
    ra, rb = Stat.of(a.rates), Stat.of(b.rates)
    pa, pb = _stat(a.p99), _stat(b.p99)
    thr_ratio = rb.median / ra.median if ra.median else float("nan")
    rows = []
    for r in (a, b):
        rows.append([_label(r.impl), Stat.of(r.rates).fmt(0),
                     _stat(r.p50).fmt(0), _stat(r.p99).fmt(0),
                     "yes" if all(r.counted_ok) else "NO: " + "; ".join(r.notes)])
    lines = [
        "# Peer benchmark: Spark's own receiver WAL vs walstream", "",
        f"Generated {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by "
        f"`python -m bench.peer_bench --size {size} --runs {len(a.rates)}` "
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
                   "with the WAL)",
            "(b)": "`driver.StreamingContext`; blocks in the Kafka WAL (acks=all, idempotent) "
                   "before AddBlock; tracker events in the driver's Kafka WAL",
            "Input": "one TCP line server in the benchmark process; lines of 12 words "
                     "(about 95 B) from a seeded vocabulary of 1000",
            "Sustained rate": f"warm-up (>= {WARMUP_S:.0f} s, until the newest batch's "
                              f"scheduling delay <= {SETTLED_MS} ms), then a ladder from "
                              f"{cfg['first_rate']} lines/s, x1.41 per step, "
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
        md_table(["System", "Sustained lines/s", "Latency p50 (ms)", "Latency p99 (ms)",
                  "All lines counted exactly"], rows), "",
        f"- Throughput (b)/(a): **{thr_ratio:.2f}x** (target >= 2x): "
        f"**{'met' if thr_ratio >= 2 else 'missed'}**",
        f"- p99 latency at half rate: (b) {pb.median:.0f} ms vs (a) {pa.median:.0f} ms "
        f"(target: lower): **{'met' if pb.median < pa.median else 'missed'}**", "",
    ]
    if plotted:
        lines += [f"![rate ladder]({plotted})", ""]
    lines += ["## Ladder steps (first run)", ""]
    for r in (a, b):
        run = r.ladders[0]
        steps = [[f"{p.offered:.0f}", f"{p.achieved:.0f}", phase_verdict(run.batches, p)[1]]
                 for p in run.phases]
        lines += [f"{_label(r.impl)}:", "",
                  md_table(["Offered lines/s", "Sent lines/s", "Verdict"], steps), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser(__doc__, list(SIZES), ROOT / "bench" / "RESULTS-peer.md")
    ap.add_argument("--runs", type=int, default=None)
    args = ap.parse_args(argv)
    cfg = dict(SIZES[args.size])
    runs = args.runs or int(cfg["runs"])
    exit_on_sigterm()
    started = time.monotonic()
    results = {impl: Result(impl) for impl in ("spark", "ours")}
    workdir = Path(tempfile.mkdtemp(prefix="walstream-peer-"))
    try:
        with bench_broker() as broker:
            facts = machine_info(broker.description)
            for i in range(runs):
                for impl in ("spark", "ours"):  # interleaved: drift hits both alike
                    r = results[impl]
                    log(f"run {i + 1}/{runs}: {impl} ladder")
                    run = ladder(impl, broker.bootstrap, workdir, cfg)
                    r.ladders.append(run)
                    best, _, _ = sustained(run)
                    r.rates.append(best)
                    ok, note = _check_counts(run)
                    r.counted_ok.append(ok)
                    if not ok:
                        r.notes.append(note)
                    log(f"{impl}: sustained {best:.0f} lines/s; {note}")
                    if best <= 0:
                        r.p50.append(float("nan"))
                        r.p99.append(float("nan"))
                        continue
                    lat = latency(impl, broker.bootstrap, workdir, best / 2, cfg["latency_s"])
                    ds = delays(lat)
                    r.p50.append(statistics.median(ds) if ds else float("nan"))
                    r.p99.append(percentile(ds, 99) if ds else float("nan"))
                    log(f"{impl}: latency at {best / 2:.0f}/s: p50 {r.p50[-1]:.0f} ms "
                        f"p99 {r.p99[-1]:.0f} ms over {len(ds)} batches")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    png = args.out.parent / "peer-ladder.png"
    plotted = png.name if plot(list(results.values()), png) else None
    text = render(list(results.values()), facts, cfg, args.size,
                  time.monotonic() - started, plotted)
    write_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
