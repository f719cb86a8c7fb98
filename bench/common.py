"""Helpers shared by the benchmarks: the broker, topics, statistics, machine facts, Markdown.

Nothing here talks to anything but the broker given by ``KAFKA_BOOTSTRAP_SERVERS``
or an embedded Tansu broker on 127.0.0.1 that :func:`bench_broker` always stops.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from walstream.kafka_logging import with_logger

#: The raw confluent-kafka producer every benchmark compares against: what a user
#: would choose for throughput (librdkafka defaults plus acks=all and idempotence,
#: linger.ms=5, and lz4 as walstream's WAL producers use by default, so that the
#: codec is not what a ratio measures), asynchronous with delivery callbacks.
RAW_PRODUCER_CONFIG: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "compression.type": "lz4",
    "socket.connection.setup.timeout.ms": 10_000,
}

# -- statistics -------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    """Median, min and max of one measure over repeated runs."""

    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        if not values:
            raise ValueError("no values")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def fmt(self, digits: int = 1) -> str:
        """``median [min, max]``."""
        return f"{self.median:.{digits}f} [{self.min:.{digits}f}, {self.max:.{digits}f}]"


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of unsorted ``values``."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100), at least 1
    return float(ordered[min(len(ordered), int(rank)) - 1])


# -- machine ----------------------------------------------------------------------


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable ({type(exc).__name__})"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "unavailable"


def _meminfo_gib() -> str:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return "unknown"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _git_revision() -> str:
    root = Path(__file__).resolve().parent.parent
    rev = _first_line(["git", "-C", str(root), "rev-parse", "--short", "HEAD"])
    try:
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "wal", "walstream"],
            capture_output=True, text=True, timeout=20, check=False,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        dirty = ""
    return f"{rev} (wal/ or walstream/ modified in the work tree)" if dirty else rev


def machine_info(broker_description: str) -> dict[str, str]:
    """Facts that make a result comparable: hardware, runtimes, client and broker versions."""
    import confluent_kafka
    import fastavro

    return {
        "CPU": f"{os.cpu_count()} cores, {_cpu_model()}",
        "Memory": _meminfo_gib(),
        "OS": f"{platform.system()} {platform.release()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "Java": _first_line(["java", "-version"]),
        "Broker": broker_description,
        "confluent-kafka / librdkafka": (
            f"{confluent_kafka.__version__} / {confluent_kafka.libversion()[0]}"
        ),
        "fastavro": fastavro.__version__,
        "Code": f"git {_git_revision()}",
    }


def proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process (from /proc)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # state, ppid, pgrp, ...
        out[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return out


def rss_mib(pid: int) -> float | None:
    """Resident memory of ``pid`` in MiB (None when unreadable)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def _system_ticks() -> tuple[int, int]:
    """(user + nice + system, steal) clock ticks of all CPUs since boot (see proc(5))."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    return int(fields[1]) + int(fields[2]) + int(fields[3]), int(fields[8])


def _process_ticks(pid: int) -> int:
    """utime + stime clock ticks of ``pid`` (all its threads); 0 when it is gone."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])  # fields 14 and 15 of proc(5)
    return 0


@dataclass(frozen=True)
class CpuNoise:
    """Average cores taken from a benchmark: by other processes, and by the hypervisor."""

    other: float  # user + system time of processes other than the benchmark's
    steal: float  # time the hypervisor ran something else on this VM's virtual CPUs

    def fmt(self) -> str:
        return f"{self.other:.2f} / {self.steal:.2f}"


class OtherCpu:
    """CPU not available to ``pids`` between :meth:`start` and :meth:`stop`.

    Reported as average busy cores (0 = a quiet machine): the system's user + system
    time minus that of ``pids``, and the steal time. Kernel time on behalf of the
    benchmark (e.g. loopback networking in softirq) is not counted. Linux only; zeros
    elsewhere.
    """

    def __init__(self, pids: Sequence[int]) -> None:
        self.pids = [p for p in pids if p]
        self._t0 = 0.0
        self._busy0 = 0
        self._steal0 = 0
        self._ours0 = 0

    def start(self) -> None:
        with contextlib.suppress(OSError, ValueError, IndexError):
            self._busy0, self._steal0 = _system_ticks()
            self._ours0 = sum(_process_ticks(p) for p in self.pids)
        self._t0 = time.monotonic()

    def stop(self) -> CpuNoise:
        wall = max(time.monotonic() - self._t0, 1e-9)
        try:
            busy, steal = _system_ticks()
        except (OSError, ValueError, IndexError):
            return CpuNoise(0.0, 0.0)
        ours = sum(_process_ticks(p) for p in self.pids) - self._ours0
        tick = os.sysconf("SC_CLK_TCK")
        return CpuNoise(max(0.0, (busy - self._busy0 - ours) / tick / wall),
                        max(0.0, (steal - self._steal0) / tick / wall))


# -- broker -----------------------------------------------------------------------


@dataclass(frozen=True)
class BenchBroker:
    bootstrap: str
    description: str
    pid: int = 0  # of an embedded broker; 0 for an external cluster


@contextlib.contextmanager
def bench_broker() -> Iterator[BenchBroker]:
    """``KAFKA_BOOTSTRAP_SERVERS`` when set, else an embedded in-memory Tansu (always stopped)."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if external:
        yield BenchBroker(external, f"external cluster at {external} (KAFKA_BOOTSTRAP_SERVERS)")
        return
    from walstream import broker as embedded
    from walstream.testing.fixtures import embedded_broker

    version = _first_line([str(embedded.tansu_binary()), "--version"])  # "tansu 0.6.0"
    version = version.replace("tansu", "Tansu", 1)
    with tempfile.TemporaryDirectory(prefix="walstream-bench-") as tmp, embedded_broker(
        Path(tmp), durable=False
    ) as b:
        state = embedded.read_state(Path(tmp))
        pid = state.pid if state is not None else 0
        yield BenchBroker(b.bootstrap, f"{version} memory:// (embedded, {b.bootstrap})", pid)


def admin_client(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient(with_logger(
        {"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 10_000}
    ))


def create_topic(admin: Any, topic: str, partitions: int = 1, timeout_s: float = 30.0) -> None:
    """Create ``topic`` and wait; the caller keeps ``admin`` referenced meanwhile."""
    from confluent_kafka.admin import NewTopic

    futures = admin.create_topics([NewTopic(topic, partitions, -1)], operation_timeout=timeout_s)
    futures[topic].result(timeout=timeout_s)


def delete_topics(admin: Any, topics: Sequence[str], timeout_s: float = 30.0) -> None:
    """Delete ``topics`` and wait; a topic that is already gone is fine."""
    from confluent_kafka import KafkaError, KafkaException

    if not topics:
        return
    futures = admin.delete_topics(list(topics), operation_timeout=timeout_s)
    for f in futures.values():
        try:
            f.result(timeout=timeout_s)
        except KafkaException as exc:
            if not exc.args or exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise


def topics_with_prefix(admin: Any, prefix: str, timeout_s: float = 30.0) -> list[str]:
    return sorted(t for t in admin.list_topics(timeout=timeout_s).topics if t.startswith(prefix))


# -- process ----------------------------------------------------------------------


def exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so ``finally`` blocks (stopping the broker) run."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- Markdown ---------------------------------------------------------------------


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def md_facts(facts: dict[str, str]) -> str:
    return md_table(["", ""], [[f"**{k}**", v] for k, v in facts.items()])


def write_results(path: Path, text: str) -> None:
    """Write a results file (creating its folder), log where, and echo it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    log(f"wrote {path}")
    print(text)


def bench_parser(doc: str, sizes: Sequence[str], out: Path) -> argparse.ArgumentParser:
    """The options every side-by-side benchmark takes: ``--size`` and ``--out``."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--size", choices=sorted(sizes), default="small")
    ap.add_argument("--out", type=Path, default=out)
    return ap


def with_gaps(points: Sequence[tuple[float, float]], gap: float) -> tuple[list[float], list[float]]:
    """x and y lists for a line plot, broken (NaN) where x jumps by more than ``gap``:
    no batch completed there, and a line across the gap would show one."""
    xs: list[float] = []
    ys: list[float] = []
    for x, y in points:
        if xs and x - xs[-1] > gap:
            xs.append(float("nan"))
            ys.append(float("nan"))
        xs.append(x)
        ys.append(y)
    return xs, ys


def finish_plot(plt: Any, fig: Any, ax: Any, path: Path, *, title: str, xlabel: str,
                ylabel: str, log_x: bool = False) -> bool:
    """Label ``ax``, save ``fig`` as a PNG at ``path`` and close it; True (saved)."""
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def pyplot() -> Any | None:
    """matplotlib.pyplot on the Agg backend, or None (logged) when not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing (pip install -e '.[bench]'): no plot")
        return None
    return plt
