"""The chaos harness's configuration, result and kill points (:mod:`walstream.testing.chaos`)."""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KILL_POINTS = (
    "receiver.after_store_before_report",
    "tracker.after_add_block_before_answer",
    "tracker.after_allocation_logged",
    "checkpoint.mid_write",
    "checkpoint.after_write_before_clean",
    "batch.during_output",
)
RECEIVER_ONLY_POINTS = {"receiver.after_store_before_report",
                        "tracker.after_add_block_before_answer"}


@dataclass
class ChaosConfig:
    mode: str = "receiver"
    seed: int = 1
    cluster: bool = False  # a standalone cluster (master + 2 workers) instead of local[3]
    executor_kills: int = 0  # SIGKILL of the executor JVM hosting a receiver (cluster)
    driver_kills: int = 5
    receiver_kills: int = 5
    broker_kills: int = 1
    kill_points: tuple[str, ...] = KILL_POINTS  # each once (receiver-only ones skipped in direct)
    records: int = 6000
    rate: float = 0.0  # records/s; 0: spread the records over the planned faults
    bad_every: int = 500  # one bad record per this many good ones
    broker_down_s: float = 10.0
    ha_pauses: int = 0  # mode ha: SIGSTOPs of the leader past its lease (it must wake fenced)
    ha_pause_s: float = 5.0  # mode ha: how long a pause lasts (longer than the lease timeout)
    fault_gap_s: tuple[float, float] = (4.0, 9.0)
    timeout_s: float = 900.0  # bound on waits with no progress (see _wait_progressing)
    drain_limit_s: float = 3 * 3600.0  # bound on the final catch-up, progressing or not
    workdir: Path | None = None


@dataclass
class ChaosResult:
    config: ChaosConfig
    kills: Counter[str] = field(default_factory=Counter)
    records_in: int = 0
    bad_in: int = 0
    words_in: int = 0
    words_out: int = 0
    lost: int = 0
    duplicated: int = 0
    bad_reported: int = 0
    recoveries_s: list[float] = field(default_factory=list)
    takeovers_s: list[float] = field(default_factory=list)  # mode ha: as the new leader logged
    rss_mib: list[float] = field(default_factory=list)
    batches: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems and self.lost == 0 and self.duplicated == 0

    def table(self) -> str:
        ha = self.config.mode == "ha"
        rows = [
            ("mode / seed", f"{self.config.mode}"
             f"{' on a standalone cluster' if self.config.cluster else ''} / {self.config.seed}"),
            ("leader kills (SIGKILL of the group; the standby takes over)" if ha else
             "driver kills (SIGKILL of the group)", str(self.kills["driver"])),
        ]
        if ha:
            rows += [
                ("leader pauses (SIGSTOP past the lease; woke fenced)", str(self.kills["pause"])),
                ("records in (receiver lines + direct good / direct bad)",
                 f"{self.records_in} / {self.bad_in}"),
            ]
        else:
            rows += [
                ("kill-point deaths", str(self.kills["kill_point"])),
                ("receiver worker kills", str(self.kills["receiver"])),
                ("executor JVM kills (standalone cluster)", str(self.kills["executor"])),
                ("broker kills", str(self.kills["broker"])),
                ("records in (good / bad)", f"{self.records_in} / {self.bad_in}"),
            ]
        rows += [
            ("words in / words out", f"{self.words_in} / {self.words_out}"),
            ("lost / duplicated", f"{self.lost} / {self.duplicated}"),
        ]
        if not ha:
            rows.append(("bad records reported", f"{self.bad_reported} of {self.bad_in}"))
        rows.append(("batches output", str(self.batches)))
        if ha:
            rows += [
                ("takeovers, longest / median (SIGKILL or SIGSTOP -> new leader's first "
                 "batch)", f"{_longest(self.recoveries_s)} / {_median(self.recoveries_s)}"),
                ("took over, longest / median (logged: lease expiry seen -> leading)",
                 f"{_longest(self.takeovers_s)} / {_median(self.takeovers_s)}"),
                ("leader + standby RSS at start / end", " / ".join(
                    f"{r:.0f} MiB" for r in self.rss_mib[:1] + self.rss_mib[-1:])),
            ]
        else:
            rows += [
                ("longest recovery (restart -> first batch)", _longest(self.recoveries_s)),
                ("driver RSS at start / end", " / ".join(
                    f"{r:.0f} MiB" for r in self.rss_mib[:1] + self.rss_mib[-1:])),
            ]
        rows += [
            ("wall time", f"{self.seconds:.0f} s"),
            ("result", "PASS" if self.ok else "FAIL: " + "; ".join(self.problems)),
        ]
        return "\n".join(["| | |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows])


def _longest(seconds: list[float]) -> str:
    return f"{max(seconds, default=0.0):.1f} s"


def _median(seconds: list[float]) -> str:
    return f"{statistics.median(seconds):.1f} s" if seconds else "-"


def lost_and_doubled(expected: Mapping[str, int], got: Mapping[str, int]) -> tuple[int, int]:
    """Words missing from ``got`` and words ``got`` has beyond ``expected``, summed
    over the words (a word counted twice is doubled once per extra count)."""
    lost = sum(max(0, n - got.get(w, 0)) for w, n in expected.items())
    doubled = sum(max(0, n - expected.get(w, 0)) for w, n in got.items())
    return lost, doubled


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
