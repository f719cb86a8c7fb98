"""The line servers and app processes the peer, recovery and soak benchmarks drive.

``LineServer`` offers lines at a set rate over TCP to one receiver (the source of
both systems' ``socketTextStream``); ``App`` runs ``bench/peer_app.py`` (the same word
count for both systems but for its imports) as a subprocess in its own process group,
always killed, with Spark's scratch space in the benchmark's work directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from walstream.procs import kill_group

ROOT = Path(__file__).resolve().parent.parent
BATCH_S = 1.0


WORDS_PER_LINE = 12  # the default line: 12 words, about 95 bytes
#: The first word of each line a LineServer sends once told ``serve_fresh`` (not in the
#: vocabulary): a batch that counts it holds data sent after that moment.
FRESH_WORD = "fresh"


def lines_pool(words: int = WORDS_PER_LINE, seed: int = 7,
               lead: str | None = None) -> list[bytes]:
    """The lines a LineServer cycles through (``words`` words from a seeded vocabulary
    of 1000, newline-terminated; with ``lead``, that word first and one fewer from the
    vocabulary); the floor job counts the same lines."""
    rnd = random.Random(seed)
    vocab = [f"word{i:03d}" for i in range(1000)]
    n = max(100, 60_000 // words)
    first = [lead] if lead else []
    return [(" ".join(first + [rnd.choice(vocab) for _ in range(words - len(first))])
             + "\n").encode() for _ in range(n)]


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

    def __init__(self, words_per_line: int = WORDS_PER_LINE) -> None:
        self.words_per_line = words_per_line
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
        self._pool = lines_pool(words_per_line)
        # At most about 2 MB per send, whatever the line size.
        self._max_chunk = max(1, 2_000_000 // len(self._pool[0]))
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

    def serve_fresh(self) -> None:
        """Every line sent from now on begins with :data:`FRESH_WORD`."""
        self._pool = lines_pool(self.words_per_line, lead=FRESH_WORD)
        self._i = 0

    def run_phase(self, phase: Phase, seconds: float,
                  stop: threading.Event | None = None) -> None:
        """Send at ``phase.offered`` lines/s for ``seconds`` (or until ``stop`` is set)."""
        assert self._conn is not None
        phase.start = time.time()
        t0 = time.monotonic()
        while True:
            elapsed = time.monotonic() - t0
            if elapsed >= seconds or (stop is not None and stop.is_set()):
                break
            due = int(phase.offered * elapsed) - phase.sent
            if due > 0:
                due = min(due, self._max_chunk)
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
        # Spark's scratch space (spark-*, blockmgr-*) in the work directory, which the
        # benchmark removes: a JVM killed with SIGKILL cannot delete its own. The same
        # disk as /tmp, for both systems alike.
        scratch = workdir / "spark-local"
        scratch.mkdir(parents=True, exist_ok=True)
        env.setdefault("SPARK_LOCAL_DIRS", str(scratch))
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


def wait_connected(server: LineServer, app: App, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not server.connected.wait(0.5):
        if app.proc.poll() is not None:
            raise RuntimeError(f"{app.impl} app exited ({app.proc.returncode}); "
                               f"see {app.log_path}:\n{app.log_path.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"the receiver did not connect in {timeout_s}s; see {app.log_path}")


def impl_label(impl: str) -> str:
    return {"spark": "(a) Spark receiver WAL (local disk)",
            "ours": "(b) walstream (Kafka WAL)",
            "floor": "(c) the same word count, a batch job over the lines in memory",
            "ours-nometrics": "(d) walstream, metrics off"}[impl]
