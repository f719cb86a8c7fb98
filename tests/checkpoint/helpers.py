"""Shared builders for the checkpoint tests: CheckpointData values, no Spark."""

from __future__ import annotations

from typing import Any

from walstream.checkpoint.data import CheckpointData, StateRdd


def make_data(t: int = 3000, **overrides: Any) -> CheckpointData:
    """A checkpoint for batch time ``t`` with every field filled in."""
    fields: dict[str, Any] = {
        "checkpoint_time_ms": t,
        "written_wall_ms": 1_700_000_000_000 + t,
        "app_id": "app-test",
        "batch_ms": 1000,
        "zero_time_ms": 0,
        "fingerprint": "0123456789abcdef",
        "graph_shape": ("receiver:R#0()", "updateStateByKey#1(0)", "output:foreachRDD#2(1)"),
        "pending_times_ms": (t,),
        "state_rdds": (StateRdd("updateStateByKey#1(0)", t - 1000, f"/rdds/rdd-{t}"),),
        "conf": {"spark.app.name": "test", "spark.walstream.x": "1"},
    }
    fields.update(overrides)
    return CheckpointData(**fields)
