"""Recovery helpers: times_to_resubmit policies, check_compatible, get_or_create plumbing.

A StreamingContext is replaced by a tiny fake holding a real DStreamGraph of fake
streams whose fingerprints are made by the real ``DStream._fingerprint``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from tests.checkpoint.helpers import make_data
from walstream.checkpoint.data import CheckpointData, StateRdd
from walstream.checkpoint.errors import CheckpointError, IncompatibleGraphError
from walstream.checkpoint.files import write_checkpoint
from walstream.driver.dstream.dstream import DStream
from walstream.driver.dstream.graph import DStreamGraph
from walstream.driver.dstream.recovery import (
    POLICY_KEY,
    UPGRADE_ENV,
    UPGRADE_KEY,
    ContextView,
    build_checkpoint,
    check_compatible,
    completed_before,
    get_or_create,
    restore_state,
    state_floor,
    times_to_resubmit,
)

# -- times_to_resubmit ----------------------------------------------------------------


def _ckpt(t: int, pending: tuple[int, ...], batch_ms: int = 1000) -> CheckpointData:
    return make_data(t, batch_ms=batch_ms, pending_times_ms=pending)


def test_all_resubmits_pending_and_every_missed() -> None:
    data = _ckpt(5000, (4000, 5000))
    assert times_to_resubmit(data, 9000, "all") == [4000, 5000, 6000, 7000, 8000]


def test_coalesce_resubmits_pending_and_the_latest_missed() -> None:
    data = _ckpt(5000, (4000, 5000))
    assert times_to_resubmit(data, 9000, "coalesce") == [4000, 5000, 8000]


def test_skip_resubmits_only_pending() -> None:
    data = _ckpt(5000, (4000, 5000))
    assert times_to_resubmit(data, 9000, "skip") == [4000, 5000]


@pytest.mark.parametrize("policy", ["all", "coalesce", "skip"])
def test_nothing_missed(policy: str) -> None:
    """Restarted within one batch: the first new batch is the next grid time."""
    data = _ckpt(5000, (5000,))
    assert times_to_resubmit(data, 6000, policy) == [5000]


@pytest.mark.parametrize("policy", ["all", "coalesce", "skip"])
def test_no_pending_nothing_missed(policy: str) -> None:
    assert times_to_resubmit(_ckpt(5000, ()), 6000, policy) == []


@pytest.mark.parametrize("policy", ["all", "coalesce", "skip"])
def test_missed_are_strictly_between_checkpoint_and_first_new(policy: str) -> None:
    data = _ckpt(5000, ())
    got = times_to_resubmit(data, 8000, policy)
    assert all(5000 < t < 8000 for t in got)
    assert set(got) <= {6000, 7000}


@pytest.mark.parametrize("policy", ["all", "coalesce", "skip"])
def test_pending_that_is_also_missed_comes_once(policy: str) -> None:
    """A completion checkpoint of 5000 listing 6000 pending; 6000 is also on the grid."""
    data = _ckpt(5000, (7000, 6000, 5000))
    got = times_to_resubmit(data, 9000, policy)
    assert got == sorted(set(got))
    assert {5000, 6000, 7000} <= set(got)
    assert len(got) == len(set(got))


@pytest.mark.parametrize("policy", ["all", "coalesce", "skip"])
def test_a_batch_allocated_after_the_checkpoint_is_resubmitted_whatever_the_policy(
        policy: str) -> None:
    """7000 was allocated (logged) but the driver died before its checkpoint was
    durable: its blocks belong to it, so skipping it would lose them."""
    data = _ckpt(5000, (5000,))
    got = times_to_resubmit(data, 10000, policy, allocated=[4000, 5000, 7000])
    assert {5000, 7000} <= set(got)
    assert 4000 not in got  # completed before the checkpoint: not run twice
    if policy == "skip":
        assert got == [5000, 7000]


@pytest.mark.parametrize("policy", ["all", "coalesce", "skip"])
def test_batches_completed_after_the_checkpoints_time_are_not_run_again(policy: str) -> None:
    """A checkpoint built late (the job generator behind a backlog): named 879 s, it
    holds the state of 882 s and lists 883 s on as pending, so 880 s to 882 s had
    completed. Running them again would need their state, which no checkpoint holds
    (recomputing it from the stream's start hung the DAG scheduler)."""
    data = make_data(879_000, pending_times_ms=(883_000, 884_000),
                     state_rdds=(StateRdd("updateStateByKey#1(0)", 882_000, "/rdds/rdd-9"),))
    got = times_to_resubmit(data, 890_000, policy, allocated=[880_000, 881_000, 883_000])
    assert min(got) >= 882_000, got
    assert {883_000, 884_000} <= set(got)
    if policy == "all":
        assert got == list(range(882_000, 890_000, 1000))


def test_a_pending_batch_older_than_the_state_is_still_run() -> None:
    """With concurrent jobs a newer batch's state can be durable while an older one
    still runs: that one is pending, and it runs again."""
    data = make_data(879_000, pending_times_ms=(880_000, 883_000),
                     state_rdds=(StateRdd("updateStateByKey#1(0)", 882_000, "/rdds/rdd-9"),))
    assert times_to_resubmit(data, 884_000, "skip") == [880_000, 883_000]


def test_the_oldest_stateful_streams_state_bounds_what_completed() -> None:
    data = make_data(5000, pending_times_ms=(), state_rdds=(
        StateRdd("updateStateByKey#1(0)", 8000, "/rdds/a"),
        StateRdd("updateStateByKey#2(0)", 7000, "/rdds/b")))
    assert times_to_resubmit(data, 10_000, "all") == [7000, 8000, 9000]


def test_sorted_even_when_pending_is_not() -> None:
    data = _ckpt(5000, (5000, 3000, 4000))
    assert times_to_resubmit(data, 8000, "all") == [3000, 4000, 5000, 6000, 7000]


def test_grid_follows_the_batch_duration() -> None:
    data = _ckpt(6000, (), batch_ms=2000)
    assert times_to_resubmit(data, 14000, "all") == [8000, 10000, 12000]
    assert times_to_resubmit(data, 14000, "coalesce") == [12000]


def test_skipped_batches_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="walstream.driver.dstream.recovery"):
        times_to_resubmit(_ckpt(5000, ()), 10000, "skip")
    assert "4 missed" in caplog.text


@pytest.mark.parametrize("policy", ["none", "ALL-ish", ""])
def test_unknown_policy_names_the_key(policy: str) -> None:
    with pytest.raises(CheckpointError) as info:
        times_to_resubmit(_ckpt(5000, ()), 6000, policy)  # also when nothing was missed
    assert POLICY_KEY in str(info.value)
    assert repr(policy) in str(info.value)


# -- check_compatible -------------------------------------------------------------------


class FakeStream:
    """Just what the fingerprint reads, fingerprinted by the real DStream code."""

    _fingerprint = DStream._fingerprint

    def __init__(self, graph: DStreamGraph, kind: str, *parents: FakeStream) -> None:
        self._kind = kind
        self._parents = list(parents)
        self._must_checkpoint = kind.startswith(("updateStateByKey", "reduceByKeyAndWindow"))
        self._generated: dict[int, Any] = {}
        self._restored_floor_ms: int | None = None
        self._id = graph.register(self)  # type: ignore[arg-type]


class FakeContext:
    def __init__(self, batch_ms: int = 1000, conf: dict[str, str] | None = None) -> None:
        self._batch_ms = batch_ms
        self._graph = DStreamGraph(batch_ms)
        self._conf_values = dict(conf or {})
        self._checkpoint_dir: str | None = None
        self._recovered: Any = None

    def _conf(self) -> dict[str, str]:
        return dict(self._conf_values)

    def checkpoint(self, directory: str) -> None:
        self._checkpoint_dir = directory

    def recovery_view(self) -> ContextView:
        return ContextView(self._graph, self._batch_ms, self._conf(), self._checkpoint_dir)

    def resume_from(self, data: CheckpointData) -> None:
        self._recovered = data


def _stateful_app(ssc: FakeContext, outputs: int = 1, stateful: bool = True) -> FakeContext:
    """socketTextStream -> flatMap -> map -> updateStateByKey -> pprint (and more outputs)."""
    g = ssc._graph
    lines = FakeStream(g, "receiver:SocketTextReceiver")
    words = FakeStream(g, "transform", lines)
    pairs = FakeStream(g, "transform", words)
    last = FakeStream(g, "updateStateByKey", pairs) if stateful else pairs
    for _ in range(outputs):
        FakeStream(g, "output:foreachRDD", last)
    return ssc


def _checkpoint_of(ssc: FakeContext) -> CheckpointData:
    g = ssc._graph
    return make_data(5000, batch_ms=ssc._batch_ms, fingerprint=g.fingerprint(),
                     graph_shape=tuple(s._fingerprint() for s in g.streams))


def _check(ssc: FakeContext, data: CheckpointData) -> None:
    check_compatible(ssc.recovery_view(), data)


def test_same_graph_passes() -> None:
    data = _checkpoint_of(_stateful_app(FakeContext()))
    _check(_stateful_app(FakeContext()), data)


def test_fingerprint_is_stable_and_shape_sensitive() -> None:
    a = _stateful_app(FakeContext())._graph.fingerprint()
    assert a == _stateful_app(FakeContext())._graph.fingerprint()
    assert a != _stateful_app(FakeContext(), outputs=2)._graph.fingerprint()
    assert a != _stateful_app(FakeContext(batch_ms=2000))._graph.fingerprint()


def test_different_batch_duration_is_refused_naming_both() -> None:
    data = _checkpoint_of(_stateful_app(FakeContext(batch_ms=1000)))
    with pytest.raises(IncompatibleGraphError) as info:
        _check(_stateful_app(FakeContext(batch_ms=2000)), data)
    assert "1000 ms" in str(info.value) and "2000 ms" in str(info.value)


def test_different_batch_duration_is_refused_even_in_upgrade_mode() -> None:
    data = _checkpoint_of(_stateful_app(FakeContext(batch_ms=1000)))
    with pytest.raises(IncompatibleGraphError, match="2000 ms"):
        _check(_stateful_app(FakeContext(batch_ms=2000, conf={UPGRADE_KEY: "true"})), data)


def test_added_output_is_refused_suggesting_upgrade_mode() -> None:
    data = _checkpoint_of(_stateful_app(FakeContext()))
    new = _stateful_app(FakeContext(), outputs=2)
    added = new._graph.streams[-1]._fingerprint()
    assert added.startswith("output:foreachRDD#")
    with pytest.raises(IncompatibleGraphError) as info:
        _check(new, data)
    message = str(info.value)
    assert added in message
    assert "added" in message
    assert f"{UPGRADE_KEY}=true" in message


@pytest.mark.parametrize("value", ["true", "True", "TRUE"])
def test_added_output_is_accepted_in_upgrade_mode(value: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    data = _checkpoint_of(_stateful_app(FakeContext()))
    new = _stateful_app(FakeContext(conf={UPGRADE_KEY: value}), outputs=2)
    with caplog.at_level(logging.WARNING, logger="walstream.driver.dstream.recovery"):
        _check(new, data)
    assert "upgrade mode" in caplog.text


def test_upgrade_false_still_refuses() -> None:
    data = _checkpoint_of(_stateful_app(FakeContext()))
    with pytest.raises(IncompatibleGraphError):
        _check(_stateful_app(FakeContext(conf={UPGRADE_KEY: "false"}), outputs=2), data)


@pytest.mark.parametrize("upgrade", [False, True])
def test_removed_stateful_operator_is_refused_naming_it(upgrade: bool) -> None:
    data = _checkpoint_of(_stateful_app(FakeContext()))
    conf = {UPGRADE_KEY: "true"} if upgrade else {}
    new = _stateful_app(FakeContext(conf=conf), stateful=False)
    with pytest.raises(IncompatibleGraphError) as info:
        _check(new, data)
    message = str(info.value)
    assert "updateStateByKey#3(2)" in message
    assert "removed" in message
    assert "stateful" in message
    assert f"{UPGRADE_KEY}=true" not in message  # upgrade mode would not help


def test_added_stateful_operator_is_refused_in_upgrade_mode() -> None:
    data = _checkpoint_of(_stateful_app(FakeContext(), stateful=False))
    with pytest.raises(IncompatibleGraphError, match="updateStateByKey"):
        _check(_stateful_app(FakeContext(conf={UPGRADE_KEY: "true"})), data)


def test_changed_input_is_refused_in_upgrade_mode() -> None:
    old = FakeContext()
    FakeStream(old._graph, "output:foreachRDD", FakeStream(old._graph, "queue"))
    new = FakeContext(conf={UPGRADE_KEY: "true"})
    FakeStream(new._graph, "output:foreachRDD", FakeStream(new._graph, "kafkaDirect"))
    with pytest.raises(IncompatibleGraphError) as info:
        _check(new, _checkpoint_of(old))
    assert "queue#0()" in str(info.value) and "kafkaDirect#0()" in str(info.value)


def test_changed_window_of_inverse_reduce_is_refused_in_upgrade_mode() -> None:
    def app(ssc: FakeContext, window_ms: int) -> FakeContext:
        g = ssc._graph
        src = FakeStream(g, "receiver:R")
        red = FakeStream(g, f"reduceByKeyAndWindow({window_ms},1000)", src)
        FakeStream(g, "output:foreachRDD", red)
        return ssc

    data = _checkpoint_of(app(FakeContext(), 30000))
    _check(app(FakeContext(), 30000), data)
    with pytest.raises(IncompatibleGraphError, match=r"reduceByKeyAndWindow\(60000,1000\)"):
        _check(app(FakeContext(conf={UPGRADE_KEY: "true"}), 60000), data)


# -- get_or_create ------------------------------------------------------------------------


def _no_restore(sc: Any, batch_ms: int, graph: DStreamGraph) -> Any:
    raise AssertionError("these checkpoints hold no graph: setupFunc builds it")


def test_get_or_create_without_checkpoint_returns_fresh_context(tmp_path: Path) -> None:
    ssc = _stateful_app(FakeContext())
    got = get_or_create(str(tmp_path / "cp"), lambda: ssc, _no_restore)
    assert got is ssc
    assert ssc._checkpoint_dir == str(tmp_path / "cp")
    assert ssc._recovered is None


def test_get_or_create_recovers_the_newest_checkpoint(tmp_path: Path) -> None:
    cp = tmp_path / "cp"
    data = _checkpoint_of(_stateful_app(FakeContext()))
    write_checkpoint(cp, data)
    write_checkpoint(cp, make_data(4000, fingerprint=data.fingerprint,
                                   graph_shape=data.graph_shape))
    ssc = _stateful_app(FakeContext())
    get_or_create(str(cp), lambda: ssc, _no_restore)
    assert ssc._recovered == data


def test_get_or_create_refuses_an_incompatible_graph(tmp_path: Path) -> None:
    cp = tmp_path / "cp"
    write_checkpoint(cp, _checkpoint_of(_stateful_app(FakeContext())))
    ssc = _stateful_app(FakeContext(), outputs=2)
    with pytest.raises(IncompatibleGraphError):
        get_or_create(str(cp), lambda: ssc, _no_restore)
    assert ssc._recovered is None


def test_get_or_create_refuses_another_checkpoint_dir(tmp_path: Path) -> None:
    ssc = _stateful_app(FakeContext())
    ssc.checkpoint(str(tmp_path / "elsewhere"))
    with pytest.raises(CheckpointError, match="must be the same"):
        get_or_create(str(tmp_path / "cp"), lambda: ssc, _no_restore)


def test_get_or_create_needs_a_context(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="StreamingContext"):
        get_or_create(str(tmp_path), lambda: None, _no_restore)


# -- state RDDs across restarts ------------------------------------------------------


class FakeRdd:
    def __init__(self, path: str, checkpointed: bool) -> None:
        self._path, self._checkpointed = path, checkpointed

    def isCheckpointed(self) -> bool:  # noqa: N802
        return self._checkpointed

    def getCheckpointFile(self) -> str:  # noqa: N802
        return self._path


class FakeSparkContext:
    serializer = None

    def _checkpointFile(self, path: str, serializer: Any) -> FakeRdd:  # noqa: N802
        return FakeRdd(path, checkpointed=False)  # as PySpark: read back, not "checkpointed"


class RestorableContext(FakeContext):
    def __init__(self) -> None:
        super().__init__()
        self.sparkContext = FakeSparkContext()
        self._engine = None
        self._graph.zero_ms = 0



def _restored_app() -> tuple[RestorableContext, CheckpointData, FakeStream]:
    ssc = RestorableContext()
    _stateful_app(ssc)  # type: ignore[arg-type]
    state = next(s for s in ssc._graph.streams if s._must_checkpoint)
    data = make_data(6000, state_rdds=(StateRdd(state._fingerprint(), 4000, "/rdds/rdd-7"),))
    restore_state(ssc.sparkContext, ssc._graph, data)
    return ssc, data, state  # type: ignore[return-value]


def _build(ssc: RestorableContext, t: int) -> CheckpointData:
    return build_checkpoint(ssc._graph, t, [t], app_id="", conf=ssc._conf(), graph_bytes=b"")


def test_checkpoint_written_after_a_restore_still_names_the_restored_state() -> None:
    """Chaos run 20261122 (direct): a restart wrote its first checkpoint (the re-run
    pending batch) before it had checkpointed new state; that checkpoint named no
    state RDD, so the next restart recomputed state from batches cleanup had dropped
    and the running totals lost the first two batches (8217 of 8992 words)."""
    ssc, data, _ = _restored_app()
    again = _build(ssc, 7000)
    assert again.state_rdds == data.state_rdds
    assert state_floor(ssc._graph, again) == 4000


def test_every_remembered_durable_state_is_named_oldest_first() -> None:
    """As Spark's checkpoint data: the restored state and newer checkpointed state
    while the stream remembers them; state not yet durable is not named. The floor
    that cleanup keeps is the oldest, and what completed is bounded by the newest."""
    ssc, _, state = _restored_app()
    state._generated[8000] = FakeRdd("/rdds/rdd-9", checkpointed=True)
    state._generated[10000] = FakeRdd("/rdds/rdd-11", checkpointed=False)  # not durable yet
    again = _build(ssc, 10000)
    fp = state._fingerprint()
    assert again.state_rdds == (StateRdd(fp, 4000, "/rdds/rdd-7"),
                                StateRdd(fp, 8000, "/rdds/rdd-9"))
    assert state_floor(ssc._graph, again) == 4000
    assert completed_before(again) == 8000
    del state._generated[4000]  # forgotten past the remember window
    assert _build(ssc, 11000).state_rdds == (StateRdd(fp, 8000, "/rdds/rdd-9"),)


def test_a_restart_restores_every_named_state_and_knows_the_oldest() -> None:
    ssc = RestorableContext()
    _stateful_app(ssc)  # type: ignore[arg-type]
    state = next(s for s in ssc._graph.streams if s._must_checkpoint)
    fp = state._fingerprint()
    data = make_data(9000, state_rdds=(StateRdd(fp, 4000, "/rdds/a"),
                                       StateRdd(fp, 8000, "/rdds/b")))
    restore_state(ssc.sparkContext, ssc._graph, data)
    assert sorted(state._generated) == [4000, 8000]
    assert state._restored_floor_ms == 4000


def test_state_older_than_every_restored_one_is_an_error_not_a_recomputation() -> None:
    """Recomputing it would start from the stream's zero time, over inputs cleanup
    dropped, through a lineage the DAG scheduler takes exponential time to place."""
    from walstream.driver.dstream.dstream_kinds import StateDStream

    stream = object.__new__(StateDStream)
    stream._slide_ms, stream._zero_ms = 1000, 0
    stream._generated = {4000: object()}
    stream._restored_floor_ms = 4000
    with pytest.raises(CheckpointError, match="needs the state of 2000, older than the "
                                              "oldest state restored"):
        stream.compute(3000)


# -- upgrade mode: the conf key and the environment variable, on every path ----------


def _upgrade_via(how: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The upgrade switch set through the conf key or the environment variable."""
    monkeypatch.delenv(UPGRADE_ENV, raising=False)
    if how == "env":
        monkeypatch.setenv(UPGRADE_ENV, "true")
        return {}
    return {UPGRADE_KEY: "true"}


@pytest.mark.parametrize("how", ["conf", "env"])
def test_check_compatible_honours_upgrade_conf_key_and_env_var(
        how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    data = _checkpoint_of(_stateful_app(FakeContext()))
    conf = _upgrade_via(how, monkeypatch)
    _check(_stateful_app(FakeContext(conf=conf), outputs=2), data)


@pytest.mark.parametrize("how", ["conf", "env"])
def test_get_or_create_upgrade_path_honours_conf_key_and_env_var(
        how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint without a graph takes setupFunc's graph; a changed one is accepted
    in upgrade mode whichever way the mode is switched on."""
    cp = tmp_path / "cp"
    write_checkpoint(cp, _checkpoint_of(_stateful_app(FakeContext())))
    ssc = _stateful_app(FakeContext(conf=_upgrade_via(how, monkeypatch)), outputs=2)
    assert get_or_create(str(cp), lambda: ssc, _no_restore) is ssc
    assert ssc._recovered is not None


def test_upgrade_conf_key_set_to_false_beats_the_env_var(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(UPGRADE_ENV, "true")
    data = _checkpoint_of(_stateful_app(FakeContext()))
    with pytest.raises(IncompatibleGraphError):
        _check(_stateful_app(FakeContext(conf={UPGRADE_KEY: "false"}), outputs=2), data)


def test_refusal_names_both_ways_to_upgrade(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UPGRADE_ENV, raising=False)
    data = _checkpoint_of(_stateful_app(FakeContext()))
    with pytest.raises(IncompatibleGraphError) as info:
        _check(_stateful_app(FakeContext(), outputs=2), data)
    assert f"{UPGRADE_KEY}=true" in str(info.value)
    assert f"{UPGRADE_ENV}=true" in str(info.value)


# -- secrets stay off disk ------------------------------------------------------------


def test_a_checkpoint_holds_no_secret_and_a_restart_takes_them_from_its_environment(
        tmp_path: Path) -> None:
    from walstream.checkpoint.files import read_latest
    from walstream.driver.dstream.recovery import recovered_conf

    conf = {"spark.walstream.kafka.security.protocol": "SASL_PLAINTEXT",
            "spark.walstream.kafka.sasl.username": "app",
            "spark.walstream.kafka.sasl.password": "s3cret",
            "spark.authenticate.secret": "endpoint-s3cret", "spark.app.name": "x"}
    ssc = RestorableContext()
    data = build_checkpoint(ssc._graph, 7000, [7000], app_id="a", conf=conf, graph_bytes=b"")
    write_checkpoint(tmp_path / "cp", data)
    on_disk = b"".join(p.read_bytes() for p in (tmp_path / "cp").iterdir() if p.is_file())
    assert b"s3cret" not in on_disk
    saved = read_latest(tmp_path / "cp")
    assert saved is not None
    assert saved.conf == {"spark.walstream.kafka.security.protocol": "SASL_PLAINTEXT",
                          "spark.walstream.kafka.sasl.username": "app",
                          "spark.app.name": "x"}
    restarted = recovered_conf(saved.conf, {"spark.walstream.kafka.sasl.password": "new",
                                            "spark.authenticate.secret": "e2",
                                            "spark.walstream.kafka.sasl.username": "other"})
    assert restarted["spark.walstream.kafka.sasl.password"] == "new"
    assert restarted["spark.authenticate.secret"] == "e2"
    assert restarted["spark.walstream.kafka.sasl.username"] == "app"  # not a secret: saved
