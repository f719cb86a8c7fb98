"""Combine the benchmarks' result files into ``bench/RESULTS.md``.

``python -m bench.report`` (the last step of ``make bench``): the machine, every
target line of every ``RESULTS-*.md`` (met or missed, with its figure) in one
table, then each file in full, so one page holds every table and plot. Nothing is
measured here; a missing file is listed as not run.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

from bench.common import machine_info, md_facts, md_table, write_results

HERE = Path(__file__).resolve().parent
#: (file, title) in the issue's order.
PARTS = [
    ("RESULTS-ingest.md", "1. Ingest ceiling vs raw Kafka"),
    ("RESULTS-peer.md", "2. Peer: Spark's own receiver WAL"),
    ("RESULTS-recovery.md", "3. Recovery time against backlog"),
    ("RESULTS-recovery-large.md", "3a. Recovery at a backlog of 10^4 blocks"),
    ("RESULTS-recovery-small.md", "3c. Around a driver kill (small run, with its plot)"),
    ("RESULTS-soak.md", "3b/5. Soak: memory over 30 minutes, recovery after it"),
    ("RESULTS-addblock.md", "4. Driver WAL: AddBlock"),
    ("RESULTS-wal.md", "WAL write throughput vs raw produce"),
]
VERDICT = re.compile(r"\*\*(met|missed)\*\*")


def verdicts(text: str) -> list[tuple[str, str]]:
    """(line without the verdict, met|missed) for every target line of a results file."""
    out = []
    for line in text.splitlines():
        m = VERDICT.search(line)
        if m:
            what = line.lstrip("-| ").replace("**", "").strip()
            out.append((what, m.group(1)))
    return out


def _demote(text: str) -> str:
    """Headings one level down, so each file nests under its section."""
    return "\n".join("#" + line if line.startswith("#") else line for line in text.splitlines())


def render(facts: dict[str, str]) -> str:
    rows: list[list[str]] = []
    sections: list[str] = []
    for name, title in PARTS:
        path = HERE / name
        if not path.exists():
            rows.append([title, "not run", ""])
            continue
        text = path.read_text()
        for what, verdict in verdicts(text) or [("(no target line)", "")]:
            rows.append([f"[{title}]({name})", what, verdict])
        sections += [f"## {title}", "", _demote(text), ""]
    return "\n".join([
        "# Benchmark results", "",
        f"Assembled {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())} by "
        "`python -m bench.report` from the files below; each was measured side by side "
        "with its reference in one run on this machine (its own header gives the date, "
        "the exact command and the load).", "",
        "## Machine", "", md_facts(facts), "",
        "## Targets", "",
        md_table(["Benchmark", "Target line (figure)", "Verdict"], rows), "",
        *sections,
    ])


def main() -> int:
    write_results(HERE / "RESULTS.md", render(machine_info("see each benchmark")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
