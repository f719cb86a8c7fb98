from __future__ import annotations

from collections import Counter

from walstream.driver.receiver_tracker.scheduling import (
    ExecutorLocation,
    reschedule_receiver,
    schedule_receivers,
)

E = [ExecutorLocation("h1", "1"), ExecutorLocation("h1", "2"), ExecutorLocation("h2", "3")]


def test_receivers_are_spread_evenly() -> None:
    plan = schedule_receivers({s: None for s in range(6)}, E)
    assert Counter(loc for locs in plan.values() for loc in locs) == {
        "executor_h1_1": 2, "executor_h1_2": 2, "executor_h2_3": 2}


def test_preferred_location_is_honoured_and_balanced_on_its_host() -> None:
    plan = schedule_receivers({0: "h2", 1: "h1", 2: "h1", 3: None}, E)
    assert plan[0] == ["executor_h2_3"]
    assert sorted(plan[1] + plan[2]) == ["executor_h1_1", "executor_h1_2"]
    assert plan[3] == ["executor_h2_3"] or plan[3][0].startswith("executor_h")


def test_unknown_preferred_host_is_kept_by_name() -> None:
    assert schedule_receivers({0: "h9"}, E) == {0: ["h9"]}
    assert schedule_receivers({0: None, 1: "h3"}, []) == {0: [], 1: ["h3"]}


def test_a_relaunch_goes_to_the_least_loaded_survivor() -> None:
    survivors = [E[0], E[2]]  # executor 2 died
    running = {0: E[0], 1: None}
    assert reschedule_receiver(None, survivors, running) == ["executor_h2_3"]
    assert reschedule_receiver("h1", survivors, running) == ["executor_h1_1"]
