"""QueryFloors: one query's commit never cleans what another live query of the
same source has not read."""

from __future__ import annotations

from walstream.structured.query_floors import QueryFloors


def test_a_lone_query_cleans_up_to_its_commit() -> None:
    f = QueryFloors()
    f.opened("src", "a")
    f.started_at("src", "a", -1)
    assert f.committed("src", "a", 100) == 100
    assert f.committed("src", "a", 90) == 100  # an older commit moves nothing back


def test_the_slowest_live_query_holds_the_floor_until_it_ends() -> None:
    f = QueryFloors()
    f.opened("src", "a")
    f.opened("src", "b")
    f.started_at("src", "b", 40)  # b asked from 40 before any commit
    f.started_at("src", "b", 70)  # only its first start counts
    assert f.committed("src", "a", 100) == 40
    assert f.committed("src", "b", 60) == 60
    assert f.ended("src", "b") == 1
    assert f.committed("src", "a", 120) == 120


def test_a_session_that_has_not_asked_yet_holds_nothing_and_sources_are_apart() -> None:
    f = QueryFloors()
    f.opened("src", "a")
    f.opened("src", "b")
    f.opened("other", "c")
    f.started_at("other", "c", 5)
    assert f.committed("src", "a", 50) == 50
    assert f.committed("src", "unknown", 7) == 7
    assert f.ended("src", "a") == 1 and f.ended("src", "b") == 0
