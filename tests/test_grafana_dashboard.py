"""deploy/grafana-dashboard.json charts only metrics the driver serves."""

from __future__ import annotations

import json
import re
from pathlib import Path

from walstream.driver.ui.metrics import EngineMetrics

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana-dashboard.json"


def _served_names() -> set[str]:
    names: set[str] = set()
    for family in EngineMetrics("app").registry.collect():
        names.add(family.name)
        names.update(s.name for s in family.samples)
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
    return names


def test_every_panel_queries_served_metrics() -> None:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\bwalstream_[a-z_]+", e)}
    assert len(used) >= 15, used
    missing = used - _served_names()
    assert not missing, f"the dashboard queries metrics the driver does not serve: {missing}"
    assert all(p["datasource"]["uid"] == "${datasource}" for p in board["panels"])
