"""The pure parts of the chaos harness's HA mode and of the failover demo: the
lost / doubled count, the takeover log lines, the fault plan, the summary table and
what :class:`HAPair` reads of its processes' files (no process is started)."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any, cast

from walstream.testing.chaos import _plan
from walstream.testing.chaos_config import ChaosConfig, ChaosResult, lost_and_doubled
from walstream.testing.chaos_process import FENCED, HAPair, takeovers


def test_lost_and_doubled_count_each_missing_and_each_extra_word() -> None:
    expected = {"a": 3, "b": 2, "c": 1}
    assert lost_and_doubled(expected, dict(expected)) == (0, 0)
    assert lost_and_doubled(expected, {"a": 3, "b": 1}) == (2, 0)  # one b, the c
    assert lost_and_doubled(expected, {"a": 5, "b": 2, "c": 1, "z": 4}) == (0, 6)
    assert lost_and_doubled(expected, {"a": 1, "b": 4, "c": 1}) == (2, 2)  # no netting
    assert lost_and_doubled({}, {}) == (0, 0)


def test_takeover_lines_are_parsed_from_a_log() -> None:
    ha = "2026 INFO walstream.driver.ha.high_availability: high availability:"
    log = (f"{ha} standing by\n"
           f"{ha} leading epoch 3 of t (taking over)\n"
           f"{ha} took over epoch 3 in 0.84 s\n"
           "noise took over epoch x in y s\n"
           f"{ha} took over epoch 12 in 1.50 s\n")
    assert takeovers(log) == [(3, 0.84), (12, 1.5)]
    assert takeovers("") == []


def test_a_fenced_leader_is_told_from_a_takeover_step_line() -> None:
    step = ("INFO walstream.driver.ha.takeover: high availability: epoch 2 steps: "
            "sinks fenced 0.00 s, "
            "checkpoints fenced 0.06 s")
    assert not FENCED.search(step)
    assert FENCED.search("walstream.driver.ha.errors.LeaseFencedError: "
                         "lease holder 'a' of epoch 1 is "
                         "fenced: 'b' holds epoch 2")
    assert FENCED.search("checkpoint 17 of epoch 1 refused: /c is fenced by epoch 2")


def test_the_ha_plan_holds_the_kills_and_pauses_only() -> None:
    cfg = ChaosConfig(mode="ha", driver_kills=4, ha_pauses=2, receiver_kills=5,
                      broker_kills=1, executor_kills=2)
    plan = _plan(cfg, random.Random(3))
    assert sorted(plan) == ["driver"] * 4 + ["pause"] * 2
    assert plan == _plan(cfg, random.Random(3))  # seeded: replayable


def test_the_ha_summary_names_takeovers_and_pauses() -> None:
    result = ChaosResult(ChaosConfig(mode="ha", seed=9))
    result.kills.update({"driver": 3, "pause": 1})
    result.recoveries_s[:] = [3.0, 4.0, 9.0]
    result.takeovers_s[:] = [0.8, 1.0]
    result.words_in = result.words_out = 10
    table = result.table()
    assert "| leader kills (SIGKILL of the group; the standby takes over) | 3 |" in table
    assert "| leader pauses (SIGSTOP past the lease; woke fenced) | 1 |" in table
    assert "9.0 s / 4.0 s" in table and "1.0 s / 0.9 s" in table
    assert "broker kills" not in table and "| result | PASS |" in table
    result.duplicated = 1
    assert not result.ok and "FAIL" in result.table()


def _row(path: Path, **row: Any) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def test_the_pair_reads_roles_batches_and_totals(tmp_path: Path) -> None:
    pair = HAPair(tmp_path, "127.0.0.1:1", "sink", total=10, rate=1.0, seed=1)
    one = cast("subprocess.Popen[bytes]", type("P", (), {"pid": 101})())
    two = cast("subprocess.Popen[bytes]", type("P", (), {"pid": 102})())
    assert pair.role(one) is None and pair.batches() == [] and pair.totals() == {}
    pair.out.mkdir()
    _row(pair.out / "roles.jsonl", pid=101, role="leader", wall=1.0)
    _row(pair.out / "roles.jsonl", pid=102, role="standby", wall=2.0)
    for pid, wall in ((101, 3.0), (101, 4.0), (102, 6.0)):
        _row(pair.out / "progress.jsonl", pid=pid, wall=wall, batch=int(wall * 1000))
    with open(pair.out / "progress.jsonl", "a") as f:
        f.write('{"pid": 102, "wa')  # a line being written
    (pair.out / "totals.json").write_text('{"a": 2}')
    assert (pair.role(one), pair.role(two)) == ("leader", "standby")
    assert [b["wall"] for b in pair.batches(one)] == [3.0, 4.0]
    assert [b["wall"] for b in pair.batches(since=4.0)] == [4.0, 6.0]
    assert [b["pid"] for b in pair.batches(two, 5.0)] == [102]
    assert pair.totals() == {"a": 2}


def test_the_sink_output_is_summed_per_word_and_per_batch(monkeypatch: Any) -> None:
    import walstream.driver as driver
    from walstream.testing.chaos import _sink_output

    records = [(1000, None, b"a\t2"), (1000, None, b"d b\t1"), (2000, None, b"a\t1"),
               (2000, None, b"z\t1")]
    monkeypatch.setattr(driver, "read_exactly_once", lambda bootstrap, topic: iter(records))
    result = ChaosResult(ChaosConfig(mode="ha"))
    per_batch = _sink_output("127.0.0.1:1", "sink", {"a": 3, "d b": 2}, result)
    assert per_batch == {1000: {"a": 2, "d b": 1}, 2000: {"a": 1, "z": 1}}
    assert (result.words_in, result.words_out, result.batches) == (5, 5, 2)
    assert (result.lost, result.duplicated) == (1, 1)
