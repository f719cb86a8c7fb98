"""The network-fault tests' hosts and their checker.

:class:`FaultLab`: a broker host running the embedded Tansu broker (optionally
behind a delay proxy for a slow, lossy link) and two driver hosts for the two HA
drivers of one app, each a network namespace on one bridge
(walstream.testing.netns), with :class:`~walstream.testing.netfaults.NetFaults` to
cut and heal links. The test process is outside the lab's network, so what talks
to the broker (topics, the feed, reading the sink) runs on the broker host.

:func:`check_outputs`: for each output path of ``ha_app --per-batch-outputs``
(running totals per batch time in files, per-batch counts appended to a file, the
KafkaSink topic read exactly once), what was lost, doubled, and which batch times
were written twice with different contents (split brain, which no re-run may do).
:func:`redelivered_from` tells a doubling a redelivering source may cause (the
committing receiver's blocks whose outcome it never learnt) from any other.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from walstream.testing.multihost_cluster import BROKER_PORT
from walstream.testing.netfaults import NetFaults
from walstream.testing.netns import NetLab, leftovers, log
from walstream.testing.waiting import wait_until

HOSTS = ("broker", "drivera", "driverb")
_KAFKA_READY = ("import sys\n"
                "from walstream.broker import kafka_ready\n"
                "sys.exit(0 if kafka_ready(sys.argv[1], 30.0) else 1)\n")
PROXY_PORT = 9093  # the delay proxy in front of the broker, when the lab has one
ROOT = Path(__file__).resolve().parent.parent
_SINK_COUNTS = ("import json, sys\n"
                "from walstream.testing.chaos_process import sink_counts\n"
                "print(json.dumps(sink_counts(sys.argv[1], sys.argv[2])))\n")


class FaultLab:
    """``proxied``: clients reach the broker through a delay proxy on its host
    (integration_tests/delay_proxy.py), which :meth:`slow_broker_link` slows."""

    def __init__(self, proxied: bool = False) -> None:
        self.lab = NetLab(list(HOSTS))
        self.run_id = self.lab.run_id
        self.proxy: subprocess.Popen[bytes] | None = None
        self.proxy_control = self.lab.run_dir / "proxy-control.json"
        try:
            if proxied:  # before the broker: the broker's readiness is checked through it
                self._start_proxy()
            self.broker = self._start_broker()
        except BaseException:
            self.lab.close(raise_errors=False)
            raise
        self.faults = NetFaults(self.lab)
        self.feeds: list[subprocess.Popen[bytes]] = []

    @property
    def bootstrap(self) -> str:
        """Where clients reach the broker: the delay proxy's port when there is one
        (the broker advertises it, so every connection passes the proxy)."""
        port = PROXY_PORT if self.proxy is not None else BROKER_PORT
        return f"{self.lab.hosts['broker'].ip}:{port}"

    def _start_proxy(self) -> None:
        ip = self.lab.hosts["broker"].ip
        self.proxy = self.lab.run("broker", [
            sys.executable, "-m", "integration_tests.delay_proxy", f"{ip}:{PROXY_PORT}",
            f"{ip}:{BROKER_PORT}", str(self.proxy_control)], {"PYTHONPATH": str(ROOT)},
            name="delay-proxy")

    def slow_broker_link(self, delay_ms: int = 200, jitter_ms: int = 50,
                         loss_pct: float = 5.0) -> None:
        """Every byte to and from the broker held ``delay_ms`` +- ``jitter_ms`` each
        way, and ``loss_pct`` % of chunks held a retransmission time more
        (integration_tests/delay_proxy.py); :meth:`fast_broker_link` undoes it."""
        if self.proxy is None:
            raise RuntimeError("the lab has no proxy in front of its broker")
        self.proxy_control.write_text(json.dumps(
            {"delay_ms": delay_ms, "jitter_ms": jitter_ms, "loss_pct": loss_pct}))

    def fast_broker_link(self) -> None:
        self.proxy_control.unlink(missing_ok=True)

    def _start_broker(self) -> subprocess.Popen[bytes]:
        from walstream.broker import tansu_binary

        listen = f"tcp://{self.lab.hosts['broker'].ip}:{BROKER_PORT}"
        broker = self.lab.run("broker", [
            str(tansu_binary()), "broker", "--listener-url", listen,
            "--advertised-listener-url", f"tcp://{self.bootstrap}", "--storage-engine",
            "memory://tansu/"], name="tansu")
        res = self.lab.call("drivera", [sys.executable, "-c", _KAFKA_READY, self.bootstrap],
                            timeout=60)
        if res.returncode != 0:
            raise RuntimeError(f"the broker did not answer:\n{self.lab.log_tail(broker)}")
        return broker

    def wrap(self, host: str) -> Callable[[list[str]], list[str]]:
        """A command line turned into one that runs it on ``host``."""
        return lambda argv: self.lab.command(host, argv)

    def _tool(self, *args: str, timeout: float = 120) -> str:
        res = self.lab.call("broker", [sys.executable, *args], timeout=timeout)
        assert res.returncode == 0, f"{args[:3]} failed:\n{res.stderr[-3000:]}"
        return res.stdout

    def create_topics(self, *topics: str) -> None:
        self._tool("-m", "walstream.testing.multihost_app", "topics", "--bootstrap",
                   self.bootstrap, *topics)

    def feed(self, topic: str, seed: int, records: int, rate: float) -> None:
        """Seeded versioned lines (some bad) into ``topic`` from the broker host."""
        self.feeds.append(self.lab.run("broker", [
            sys.executable, "-m", "walstream.testing.multihost_app", "feed", "--bootstrap",
            self.bootstrap, "--records", str(records), "--rate", str(rate),
            "--topic", f"{topic}:{seed}"], name="feed"))

    def fed(self, topic: str, timeout_s: float) -> Counter[str]:
        """The words of the good lines the broker acknowledged, over every feed."""
        words: Counter[str] = Counter()
        for p in self.feeds:
            p.wait(timeout=timeout_s)
            text = self.lab.log_path(p).read_text(errors="replace")
            assert p.returncode == 0, text[-3000:]
            report = json.loads(next(line for line in reversed(text.splitlines())
                                     if line.startswith("{")))
            assert report[topic]["failed"] == [], report[topic]["failed"]
            words.update(report[topic]["expected"])
        return words

    def sink_counts(self, sink: str) -> Counter[str]:
        return Counter(json.loads(self._tool("-c", _SINK_COUNTS, self.bootstrap, sink)))

    def close(self) -> None:
        """Heal every fault, stop every process and remove the lab; raise if anything
        of it stayed."""
        try:
            self.fast_broker_link()
            self.faults.heal_all()
        finally:
            started = time.monotonic()
            self.lab.close()
            log(f"fault lab closed in {time.monotonic() - started:.1f}s")
            assert leftovers(self.run_id) == []


@dataclass
class PathCheck:
    """One output path's verdict against the input."""

    lost: int = 0
    doubled: int = 0
    split_brain: list[int] = field(default_factory=list)  # batch times
    batches: int | None = None  # batch times written (None: the path does not say)

    def exact(self) -> bool:
        return self.lost == 0 and self.doubled == 0 and not self.split_brain

    def __str__(self) -> str:
        written = "" if self.batches is None else f"{self.batches} batches, "
        return (f"{written}{self.lost} lost, {self.doubled} doubled, "
                f"split brain at {self.split_brain or 'no batch'}")


def _against(got: Counter[str], want: Counter[str], check: PathCheck) -> PathCheck:
    check.lost, check.doubled = sum((want - got).values()), sum((got - want).values())
    return check


def _by_time(out: Path, want: Counter[str]) -> PathCheck:
    written: dict[int, set[str]] = {}
    for f in (out / "by-time").glob("*.*.json"):
        t = int(f.name.split(".")[0])
        written.setdefault(t, set()).add(f.read_text())
    check = PathCheck(split_brain=sorted(t for t, c in written.items() if len(c) > 1),
                      batches=len(written))
    last = max(written, default=None)
    final = Counter(json.loads((out / "by-time" / f"{last}.json").read_text())) \
        if last is not None else Counter()
    return _against(final, want, check)


def _appended(out: Path, want: Counter[str]) -> PathCheck:
    per_time: dict[int, set[str]] = {}
    path = out / "counts.jsonl"
    for line in (path.read_text().splitlines() if path.exists() else []):
        row: dict[str, Any] = json.loads(line)
        per_time.setdefault(int(row["t"]), set()).add(json.dumps(row["counts"],
                                                                sort_keys=True))
    check = PathCheck(split_brain=sorted(t for t, c in per_time.items() if len(c) > 1),
                      batches=len(per_time))
    got: Counter[str] = Counter()
    for contents in per_time.values():  # one copy per batch time: a re-run wrote the same
        got.update(json.loads(min(contents)))
    return _against(got, want, check)


def redelivered_from(extra: Counter[str], blocks: list[Counter[str]]) -> bool:
    """Whether ``extra`` is the words of some of ``blocks``, each taken at most once:
    a doubling a source that redelivers may cause, from blocks whose outcome its
    receiver never learnt, and nothing else."""
    def made_of(i: int, rest: Counter[str]) -> bool:
        if not rest:
            return True
        if i == len(blocks):
            return False
        if not blocks[i] - rest and made_of(i + 1, rest - blocks[i]):
            return True
        return made_of(i + 1, rest)

    return not extra - sum(blocks, Counter()) and made_of(0, extra)


def check_outputs(out: Path, sink: Counter[str], want: Counter[str]) -> dict[str, PathCheck]:
    return {"totals per batch time (files)": _by_time(out, want),
            "counts appended (file)": _appended(out, want),
            "KafkaSink (read exactly once)": _against(sink, want, PathCheck())}


def wait_exited(p: subprocess.Popen[bytes], timeout_s: float, what: str,
                details: Callable[[], str]) -> float:
    """Wait for ``p`` to exit; the wall time it was seen gone."""
    wait_until(lambda: p.poll() is not None, timeout_s, what, poll_s=0.2, details=details)
    return time.time()
