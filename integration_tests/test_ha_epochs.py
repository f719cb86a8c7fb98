"""Epochs only grow, whatever happens to the lease topic: an HA app whose lease topic
is deleted between two runs claims an epoch above every one its driver WAL chain
and checkpoints know, says so in one line, and its output stays exact."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from walstream.testing.copy_runs import fill, lost_and_doubled, run_to_end, sink_values

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]
LEADING = re.compile(r"leading epoch (\d+) of (\S+)")


def _leading(log_text: str) -> list[tuple[int, str]]:
    return [(int(e), topic) for e, topic in LEADING.findall(log_text)]


def test_a_lease_topic_deleted_between_runs_is_resumed_above_the_known_epochs(
        bootstrap: str, topic_factory: Callable[..., str], tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient

    source, out = topic_factory("in"), topic_factory("out")
    fill(bootstrap, source, "x", 1000)
    run_to_end(tmp_path, "app", bootstrap, source, out, 1000, "--ha")
    (first, lease_topic), = _leading((tmp_path / "app.log").read_text(errors="replace"))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([lease_topic])[lease_topic].result(timeout=30)
    fill(bootstrap, source, "y", 1000)
    run_to_end(tmp_path, "app", bootstrap, source, out, 2000, "--ha")
    log_text = (tmp_path / "app.log").read_text(errors="replace")
    led = _leading(log_text)
    assert [e for e, _ in led] == [first, first + 1], led
    assert "the log is behind" in log_text
    got = sink_values(bootstrap, out)
    expected = Counter(f"{p}-{i}" for p in "xy" for i in range(1000))
    assert lost_and_doubled(got, expected) == (0, 0)
