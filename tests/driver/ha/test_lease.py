"""The driver's lease against the real broker: acquire and renew, expiry and takeover
with the next epoch, fencing of the old holder, one leader per epoch when contenders
race (threads and processes), and config validation."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from walstream.driver.ha.errors import (
    LeaseConfigError,
    LeaseError,
    LeaseFencedError,
    LeaseIOError,
    LeaseLostError,
)
from walstream.driver.ha.lease import WHY_LOST_BUDGET_S, Lease
from walstream.driver.ha.lease_log import (
    CLAIM,
    LEASE_CODEC,
    RELEASE,
    RENEW,
    LeaseConfig,
    LeaseState,
    ensure_lease_topic,
    fold,
)
from walstream.errors import ConfigError, WalStreamError
from walstream.testing import wait_until

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def make_lease(bootstrap: str, unique_name: Callable[[str], str]) -> Iterator[
        Callable[..., Lease]]:
    """Leases over one fresh lease topic per test; all closed at the end."""
    topic = unique_name("lease")
    config = LeaseConfig(bootstrap, topic)
    ensure_lease_topic(config)
    made: list[Lease] = []

    def make(holder: str, config: LeaseConfig = config) -> Lease:
        lease = Lease(config, holder)
        made.append(lease)
        return lease

    make.config = config  # type: ignore[attr-defined]
    yield make
    for lease in made:
        lease.close()


def _rec(kind: str, epoch: int, holder: str) -> dict[str, object]:
    return {"kind": kind, "epoch": epoch, "holder": holder}


def test_the_fold_takes_the_first_claim_of_the_next_epoch_and_ignores_stale_records() -> None:
    s = LeaseState()
    s, live = fold(s, 0, _rec(CLAIM, 1, "a"))
    assert (s.epoch, s.holder, s.claim_offset, s.released, live) == (1, "a", 0, False, True)
    for offset, rec in enumerate([_rec(CLAIM, 1, "b"), _rec(CLAIM, 3, "b"),
                                  _rec(RENEW, 1, "b"), _rec(RELEASE, 0, "a")], start=1):
        s2, live = fold(s, offset, rec)
        assert (s2, live) == (s, False), rec
    assert fold(s, 5, _rec(RENEW, 1, "a")) == (s, True)
    s, _ = fold(s, 6, _rec(CLAIM, 2, "b"))  # wins whatever epoch 1's state
    assert (s.epoch, s.holder, s.claim_offset) == (2, "b", 6)
    assert fold(s, 7, _rec(RENEW, 1, "a")) == (s, False)  # the fenced holder's late renewal
    s, live = fold(s, 8, _rec(RELEASE, 2, "b"))
    assert s.released and s.free and live
    assert fold(s, 9, _rec(RENEW, 2, "b")) == (s, False)


def test_holder_acquires_epoch_one_and_keeps_it_past_the_timeout(
        make_lease: Callable[..., Lease]) -> None:
    a, b = make_lease("a"), make_lease("b")
    assert not a.held and a.epoch is None
    assert a.try_acquire() and a.held and a.epoch == 1
    assert not b.try_acquire()
    time.sleep(a.config.timeout_s * 1.6)  # only renewals keep it
    assert a.held
    a.check()
    view = b.watch(a.config.timeout_s * 0.8)
    assert not view.expired and (view.state.epoch, view.state.holder) == (1, "a")
    assert not b.try_acquire() and b.epoch is None


def test_a_late_reader_starts_from_the_newest_snapshot(
        make_lease: Callable[..., Lease]) -> None:
    a = make_lease("a")
    assert a.try_acquire()
    time.sleep(0.8)  # a few renewals after the claim
    late = make_lease("late")
    late._read_to_end(late._deadline())
    assert late._next > 2  # positioned near the end, not at the claim
    assert late.view().state == LeaseState(1, "a", 0, released=False)


def test_expiry_takeover_with_the_next_epoch_then_the_old_holder_is_fenced(
        make_lease: Callable[..., Lease]) -> None:
    a, b = make_lease("a"), make_lease("b")
    timeout = a.config.timeout_s
    assert a.try_acquire() and a.epoch == 1
    lost: list[LeaseError] = []
    a._on_lost = lost.append
    a._io.acquire()  # the holder pauses: no renewal goes out
    try:
        started = time.monotonic()
        view = b.watch(timeout * 4)
        waited = time.monotonic() - started
        assert view.expired and view.state.epoch == 1
        assert timeout * 0.5 <= waited <= timeout * 2.5, waited
        assert not a.held  # the holder stopped counting itself the holder first
        assert b.try_acquire() and b.epoch == 2 and b.held
    finally:
        a._io.release()  # the holder wakes up
    deadline = time.monotonic() + 5
    while not lost and time.monotonic() < deadline:
        time.sleep(0.02)
    assert lost and isinstance(lost[0], LeaseFencedError), lost
    assert (lost[0].epoch, lost[0].newer_epoch, lost[0].newer_holder) == (1, 2, "b")
    with pytest.raises(LeaseFencedError, match="fenced"):
        a.check()
    assert not a.try_acquire()  # an ended hold never resumes on its object
    time.sleep(timeout * 1.2)
    assert b.held and b.view().state == LeaseState(2, "b", b.view().state.claim_offset, False)


def test_a_release_lets_a_standby_take_the_next_epoch_at_once(
        make_lease: Callable[..., Lease]) -> None:
    a, b = make_lease("a"), make_lease("b")
    assert a.try_acquire()
    a.release()
    assert not a.held
    with pytest.raises(LeaseLostError):
        a.check()
    started = time.monotonic()
    assert b.watch(5).expired
    assert time.monotonic() - started < a.config.timeout_s
    assert b.try_acquire() and b.epoch == 2


def test_the_holder_knows_how_long_its_hold_is_certain(
        make_lease: Callable[..., Lease]) -> None:
    """``valid_for``: from the send time of the last confirmed renewal plus the timeout,
    never more than the timeout; 0 once released (or never held)."""
    a = make_lease("a")
    assert a.valid_for() == 0.0
    assert a.try_acquire()
    assert 0 < a.valid_for() <= a.config.timeout_s
    with a._io:  # no renewal confirmed meanwhile: the validity only shrinks
        first = a.valid_for()
        time.sleep(0.1)
        assert a.valid_for() <= first - 0.1 + 0.005
    a.release()
    assert a.valid_for() == 0.0


def test_a_holder_cut_off_from_the_broker_ends_its_hold_at_the_deadline(
        make_lease: Callable[..., Lease], monkeypatch: pytest.MonkeyPatch) -> None:
    """No renewal goes through and no read of the log answers (the link is cut): the
    hold ends, and ``on_lost`` is told, within milliseconds of the deadline, not after
    another period or a bounded read of the log."""
    told: list[tuple[float, BaseException]] = []
    lease = Lease(make_lease.config, "a",  # type: ignore[attr-defined]
                  on_lost=lambda why: told.append((time.monotonic(), why)))
    try:
        assert lease.try_acquire()

        deadlines: list[float] = []

        def cut(*_: object) -> None:
            if not deadlines:  # no real renewal confirms after this one failed
                deadlines.append(lease._valid_until)
            raise LeaseIOError("lease topic: renewal not acknowledged within bound")

        def unanswered(deadline: float) -> None:  # bounded as the real read is
            time.sleep(max(0.1, deadline - time.monotonic()))
            raise LeaseIOError("no answer")

        monkeypatch.setattr(lease, "_renew_once", cut)
        monkeypatch.setattr(lease, "_read_to_end", unanswered)
        wait_until(lambda: bool(told), 10, "the hold to end", poll_s=0.005)
        at, why = told[0]
        deadline = deadlines[0]
        assert deadline <= at < deadline + WHY_LOST_BUDGET_S + 0.1, \
            f"ended {at - deadline:.3f} s after the deadline"
        assert isinstance(why, LeaseLostError) and "ran out" in str(why)
        assert not lease.held
    finally:
        monkeypatch.undo()
        lease.close()


def _race(make_lease: Callable[..., Lease], names: list[str]) -> list[Lease]:
    leases = [make_lease(n) for n in names]
    for lease in leases:
        lease._read_to_end(lease._deadline())  # connected and positioned
    barrier = threading.Barrier(len(leases))
    won: list[Lease] = []

    def contend(lease: Lease) -> None:
        barrier.wait(5)
        if lease.acquire(0.0):
            won.append(lease)

    threads = [threading.Thread(target=contend, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return won


@pytest.mark.parametrize("round_", range(5))
def test_contenders_racing_for_a_free_lease_yield_exactly_one_leader(
        make_lease: Callable[..., Lease], round_: int) -> None:
    won = _race(make_lease, ["x", "y", "z"])
    assert len(won) == 1 and won[0].epoch == 1, [w.holder_id for w in won]
    # The losers agree with the log: the winner holds epoch 1.
    loser = make_lease("observer")
    assert loser.view().state.holder == won[0].holder_id
    # A takeover race after a release: exactly one of the standbys gets epoch 2.
    won[0].release()
    won2 = _race(make_lease, [f"s{round_}-1", f"s{round_}-2"])
    assert len(won2) == 1 and won2[0].epoch == 2


_CONTENDER = """
import sys, time
from walstream.driver.ha.lease import Lease
from walstream.driver.ha.lease_log import LeaseConfig
cfg = LeaseConfig(sys.argv[1], sys.argv[2])
lease = Lease(cfg, sys.argv[3])
lease.view()
time.sleep(max(0.0, float(sys.argv[4]) - time.time()))
won = lease.try_acquire()
print("leader" if won else "standby", lease.epoch, flush=True)
time.sleep(0.3)
lease.close()
"""


def test_two_processes_starting_at_the_same_moment_end_with_one_leader(
        make_lease: Callable[..., Lease]) -> None:
    config = make_lease.config  # type: ignore[attr-defined]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for round_ in range(2):
        start_at = time.time() + 2.0  # both are connected and positioned by then
        procs = [subprocess.Popen(
            [sys.executable, "-c", _CONTENDER, config.bootstrap_servers, config.topic,
             f"p{round_}-{i}", str(start_at)], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env) for i in range(2)]
        outs = [p.communicate(timeout=30) for p in procs]
        assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
        roles = sorted(o[0].split()[0] for o in outs)
        assert roles == ["leader", "standby"], outs
        leader_epoch = next(o[0].split()[1] for o in outs if o[0].startswith("leader"))
        assert leader_epoch == str(round_ + 1)  # one epoch per round, released at exit


@pytest.mark.parametrize(("field", "value"), [
    ("bootstrap_servers", ""), ("topic", ""), ("topic", "a/b"), ("topic", "x" * 250),
    ("renew_period_s", 0), ("renew_period_s", -1.0), ("renew_period_s", float("nan")),
    ("timeout_s", float("inf")), ("timeout_s", True), ("timeout_s", "1"),
    ("timeout_s", 0.3),  # fewer than two renewals of 200 ms
    ("io_timeout_s", 0), ("fetch_wait_ms", 0), ("fetch_wait_ms", 1.5),
    ("kafka_settings", {"a": "b"}), ("kafka_settings", (("a", 1),)),
])
def test_config_refuses_bad_values_with_a_typed_error(field: str, value: object) -> None:
    kwargs: dict[str, object] = {"bootstrap_servers": "127.0.0.1:9092", "topic": "lease"}
    kwargs[field] = value
    with pytest.raises(LeaseConfigError) as info:
        LeaseConfig(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, ConfigError) and isinstance(info.value, WalStreamError)


def test_config_defaults_and_settings_mapping() -> None:
    config = LeaseConfig.create("h:1", "app-lease", {"security.protocol": "SSL"})
    assert (config.renew_period_s, config.timeout_s) == (0.2, 1.0)
    assert config.kafka_settings == (("security.protocol", "SSL"),)
    assert hash(config) == hash(LeaseConfig.create("h:1", "app-lease",
                                                   {"security.protocol": "SSL"}))
    with pytest.raises(AttributeError):
        config.timeout_s = 2.0  # type: ignore[misc]


def test_foreign_records_in_the_lease_topic_change_nothing(
        make_lease: Callable[..., Lease]) -> None:
    from confluent_kafka import Producer

    config = make_lease.config  # type: ignore[attr-defined]
    p = Producer({"bootstrap.servers": config.bootstrap_servers})
    p.produce(config.topic, value=b"not a lease record", partition=0)
    p.produce(config.topic, value=LEASE_CODEC.magic + b"\x09garbage", partition=0)
    assert p.flush(10) == 0
    a = make_lease("a")
    assert a.view().state == LeaseState()
    assert a.try_acquire() and a.epoch == 1


def test_a_claim_skipping_epochs_wins_only_while_the_lease_is_free() -> None:
    s, _ = fold(LeaseState(), 0, _rec(CLAIM, 7, "a"))  # an empty log: free
    assert (s.epoch, s.holder, s.released) == (7, "a", False)
    assert fold(s, 1, _rec(CLAIM, 9, "b")) == (s, False)  # held: only 8 may win
    assert fold(s, 2, _rec(CLAIM, 7, "b")) == (s, False)
    released, _ = fold(s, 3, _rec(RELEASE, 7, "a"))
    s, live = fold(released, 4, _rec(CLAIM, 12, "b"))
    assert (s.epoch, s.holder, live) == (12, "b", True)
    assert fold(released, 5, _rec(CLAIM, 6, "b")) == (released, False)  # never back


def test_a_claim_is_above_the_floor_when_the_log_lost_its_history(
        make_lease: Callable[..., Lease], caplog: pytest.LogCaptureFixture) -> None:
    """An empty lease log (retention, a recreated topic) while the application has
    used epoch 7 elsewhere: the next claim is 8, never 1; a contender with a lower
    floor claims below the winner and loses."""
    a, b = make_lease("a"), make_lease("b")
    with caplog.at_level("WARNING", logger="walstream.driver.ha.lease"):
        assert a.try_acquire(floor=7) and a.epoch == 8
    assert any("the log is behind" in r.getMessage() for r in caplog.records)
    assert not b.try_acquire(floor=3)
    a.release()
    assert b.try_acquire(floor=3) and b.epoch == 9  # above the log, which knows 8


def test_the_lease_topic_keeps_its_records_forever(
        make_lease: Callable[..., Lease], bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    topic = make_lease.config.topic  # type: ignore[attr-defined]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    assert configs["retention.ms"].value == "-1"
    assert configs["retention.bytes"].value == "-1"


def test_a_holder_whose_lease_log_went_back_stops_leading_at_once(
        make_lease: Callable[..., Lease]) -> None:
    """A renewal stored below the offsets already read means the topic was deleted
    and created again: the holder stops at that renewal, not when its hold runs out.
    (The topic is not really deleted here: against the embedded broker, deleting a
    topic under a live librdkafka consumer crashes the process.)"""
    from walstream.driver.ha.errors import LeaseLogRecreatedError

    a = make_lease("a")
    lost: list[LeaseError] = []
    a._on_lost = lost.append
    assert a.try_acquire()
    time.sleep(0.5)  # renewals move its reads past the first offsets
    real_write = a._write
    a._write = lambda kind, epoch, deadline: (real_write(kind, epoch, deadline), 0)[1]  # type: ignore[method-assign]
    went_back = time.monotonic()
    deadline = went_back + 5
    while not lost and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lost and isinstance(lost[0], LeaseLogRecreatedError), lost
    assert time.monotonic() - went_back < a.config.timeout_s  # before the hold ran out
    assert not a.held
    with pytest.raises(LeaseLogRecreatedError, match="recreated"):
        a.check()


def test_a_lease_topic_deleted_between_runs_never_hands_out_an_epoch_again(
        make_lease: Callable[..., Lease], bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient

    first = make_lease("first")
    assert first.try_acquire() and first.epoch == 1
    first.close()  # released, and its consumer closed: nothing reads the topic
    topic = first.config.topic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=30)
    ensure_lease_topic(first.config)
    second = make_lease("second")
    # The application's floor (its driver WAL chain and checkpoints hold epoch 1).
    assert second.try_acquire(floor=1) and second.epoch == 2
