"""What Spark's file sink committed: the files its ``_spark_metadata`` log lists.

A micro-batch killed mid-write can leave part files behind that no batch
committed; readers of the sink (``spark.read``) skip them by this log, and so
does :func:`committed_lines`, without starting Spark.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse


def committed_files(sink: Path) -> set[Path]:
    """The files every batch file and compaction of the sink's log added (less
    those it deleted)."""
    log = sink / "_spark_metadata"
    added: set[Path] = set()
    deleted: set[Path] = set()
    if not log.is_dir():
        return added
    for entry in log.iterdir():
        if entry.name.startswith(".") or entry.name.endswith(".tmp"):
            continue
        lines = entry.read_text().splitlines()
        if not lines or lines[0] != "v1":
            continue  # being written: the rename makes it whole
        for line in lines[1:]:
            rec = json.loads(line)
            path = Path(unquote(urlparse(rec["path"]).path))
            (deleted if rec.get("action") == "delete" else added).add(path)
    return added - deleted


def committed_lines(sink: Path) -> list[str]:
    """Every line of every committed file of a JSON (or text) sink."""
    return [line for f in sorted(committed_files(sink))
            for line in f.read_text().splitlines() if line]
