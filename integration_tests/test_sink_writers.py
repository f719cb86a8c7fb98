"""Several writers into one KafkaSink topic, each app in its own process: two
independent applications copying their own input topics into one shared topic at
the same time, and one application run with HA, then without it, then with it
again. The shared topic read exactly once holds every record."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from walstream import procs
from walstream.testing import wait_until
from walstream.testing.copy_runs import (
    WAIT_S,
    fill,
    launch,
    lost_and_doubled,
    run_to_end,
    sink_values,
    tail,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


def test_two_apps_copying_into_one_topic_at_once_lose_nothing(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    in_a, in_b, out = (topic_factory("in-a"), topic_factory("in-b"),
                       topic_factory("shared-out"))
    fill(bootstrap, in_a, "a", 3000)
    fill(bootstrap, in_b, "b", 2000)
    apps = [launch(tmp_path, "a", bootstrap, in_a, out, 3000),
            launch(tmp_path, "b", bootstrap, in_b, out, 2000)]
    try:
        for app in apps:
            wait_until(lambda app=app: app.poll() is not None, WAIT_S,  # type: ignore[misc]
                       "both apps to copy their input and stop",
                       details=tail(tmp_path, "a", "b"))
        assert [app.returncode for app in apps] == [0, 0], tail(tmp_path, "a", "b")()
    finally:
        for app in apps:
            procs.kill_group(app.pid)
    got = sink_values(bootstrap, out)
    expected = Counter([f"a-{i}" for i in range(3000)] + [f"b-{i}" for i in range(2000)])
    assert lost_and_doubled(got, expected) == (0, 0), (
        f"{sum(got.values())} of 5000 read; lost e.g. {sorted(expected - got)[:5]}, "
        f"doubled e.g. {sorted(got - expected)[:5]}")


def test_an_app_run_with_ha_then_without_it_keeps_writing_as_itself(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    """One app, one checkpoint directory: run with HA (it leads an epoch >= 1 and
    fences its sink and checkpoints), stopped, then run without HA, then with HA
    again. Each run is the same writer: after each, the sink holds every record
    copied so far exactly once, and no run had a checkpoint refused."""
    source, out = topic_factory("in"), topic_factory("out")
    runs = [("x", ("--ha",)), ("y", ()), ("z", ("--ha",))]
    for n, (prefix, extra) in enumerate(runs, start=1):
        fill(bootstrap, source, prefix, 1000)
        run_to_end(tmp_path, "app", bootstrap, source, out, 1000 * n, *extra)
        got = sink_values(bootstrap, out)
        expected = Counter(f"{p}-{i}" for p, _ in runs[:n] for i in range(1000))
        assert lost_and_doubled(got, expected) == (0, 0), (
            f"after run {n}: {sum(got.values())} of {1000 * n} read; lost e.g. "
            f"{sorted(expected - got)[:5]}, doubled e.g. {sorted(got - expected)[:5]}")
    log_text = (tmp_path / "app.log").read_text(errors="replace")
    assert "refused" not in log_text, tail(tmp_path, "app")()
    assert "this driver continues epoch 1" in log_text
