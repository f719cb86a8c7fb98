"""The driver WAL of a highly available driver, one log per lease epoch
(``walstream.wal.epoch_chain``), against the real broker: epoch 0 is the plain log, a takeover's
link fences an old leader's late writes (also into older segments), chains over
several epochs, an epoch whose leader died before its link, a standby following a
takeover by a third party, refusals, cleaning across epochs, and the batched wrapper."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from walstream.errors import ConfigError
from walstream.wal import (
    BatchedWriteAheadLog,
    EpochChainLog,
    EpochTakenError,
    KafkaWriteAheadLog,
    StaleFollowerError,
    serialize_batch,
)
from walstream.wal.base import ForwardingWriteAheadLog, LogFollower
from walstream.wal.config import KafkaWalConfig
from walstream.wal.epoch_links import Member, validate_chain_name
from walstream.wal.errors import EpochNotSupportedError, FollowOverrunError, FollowPositionError
from walstream.wal.framing import encode_record
from walstream.wal.reader import release_topics
from walstream.wal.segments import parse_topics

PREFIX = KafkaWalConfig().topic_prefix
OPTS: dict[str, Any] = {"rolling_interval_ms": 1_000, "write_timeout_s": 20.0,
                        "read_timeout_s": 20.0}


@pytest.fixture
def name(unique_name: Callable[[str], str]) -> str:
    return unique_name("chain") + "-log"  # never ends in -e<digits>


@pytest.fixture
def opened(bootstrap: str, name: str) -> Iterator[list[Any]]:
    """Logs to close after the test; then every topic of the chain is deleted."""
    logs: list[Any] = []
    yield logs
    for wal in logs:
        wal.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    doomed = [t for t in admin.list_topics(timeout=10).topics
              if t.startswith(PREFIX + name + "-") or t.startswith(PREFIX + name + "--")]
    if doomed:
        release_topics(doomed)
        for f in admin.delete_topics(doomed, operation_timeout=10).values():
            f.result(timeout=10)


@pytest.fixture
def chain(bootstrap: str, name: str, opened: list[Any]) -> Callable[..., EpochChainLog]:
    def make(epoch: int = 0, **options: Any) -> EpochChainLog:
        wal = EpochChainLog(bootstrap, name, epoch, **{**OPTS, **options})
        opened.append(wal)
        return wal
    return make


@pytest.fixture
def plain(bootstrap: str, opened: list[Any]) -> Callable[..., KafkaWriteAheadLog]:
    def make(log_name: str, **options: Any) -> KafkaWriteAheadLog:
        wal = KafkaWriteAheadLog(bootstrap, log_name, **{**OPTS, **options})
        opened.append(wal)
        return wal
    return make


def _raw_write(bootstrap: str, topic: str, data: bytes, time_ms: int) -> None:
    """What a write whose segment was chosen before a pause, or one librdkafka kept
    retrying, does: land in ``topic`` whatever segment is newest."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for frame in encode_record(data, 512 * 1024):
        producer.produce(topic, frame, partition=0, timestamp=time_ms)
    assert producer.flush(20) == 0


def _take_over(new: EpochChainLog | BatchedWriteAheadLog, epoch: int,
               expect: list[bytes]) -> None:
    """A new leader's takeover: follow, drain, check it read ``expect``, begin ``epoch``."""
    follower = new.follow(poll_timeout_s=0.3)
    assert list(follower.drain_to_end(20)) == expect
    new.begin_epoch(epoch, follower)
    follower.close()


def _poll_until(follower: LogFollower, n: int, within_s: float = 20.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + within_s
    while len(got) < n and time.monotonic() < deadline:
        got.extend(follower.poll(n - len(got), 0.3))
    assert len(got) == n, f"{len(got)} of {n} records within {within_s}s: {got[-3:]!r}"
    return got


def _records(tag: str, n: int) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


def test_epoch_zero_chain_is_the_plain_log(chain: Callable[..., EpochChainLog],
                                           plain: Callable[..., KafkaWriteAheadLog],
                                           name: str, bootstrap: str) -> None:
    wal = chain()
    a = _records("a", 6)
    handles = [wal.write(rec, 500 + i * 400) for i, rec in enumerate(a)]  # 3 segments
    same = plain(name)
    same.write(b"by-plain", 2_900)
    assert next(h.topic for h in handles) == same.segments()[0].topic
    assert list(same.read_all()) == list(wal.read_all()) == [*a, b"by-plain"]
    assert wal.read(handles[2]) == a[2]
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    mine = sorted(t for t in topics if t.startswith(PREFIX + name))
    assert mine == sorted(s.topic for s in same.segments())  # no link, no other topic
    assert wal.chain() == [Member(0, None)]
    progress = wal.replay_progress()
    assert progress is not None and progress.total == progress.consumed == 7
    follower = wal.follow(poll_timeout_s=0.3)
    assert _poll_until(follower, 7) == [*a, b"by-plain"]
    assert follower.positions().log == name
    with pytest.raises(EpochNotSupportedError):
        same.begin_epoch(1, follower)


def test_segment_names_of_epoch_logs_never_mix(chain: Callable[..., EpochChainLog],
                                              plain: Callable[..., KafkaWriteAheadLog],
                                              name: str) -> None:
    p = PREFIX
    topics = [f"{p}x--0000000000000-0000000000010", f"{p}x-e1--0000000000000-0000000000010",
              f"{p}x-e1--cleaned--0000000000005", f"{p}x-e1--link", f"{p}x-e12--link",
              f"{p}x-extra--0000000000000-0000000000010"]
    segs, markers = parse_topics(topics, p, "x")
    assert [s.topic for s in segs] == [topics[0]] and markers == {}
    segs, markers = parse_topics(topics, p, "x-e1")
    assert [s.topic for s in segs] == [topics[1]] and list(markers) == [5]
    for bad in ("x-e1", "x-e0", "app-e12"):
        with pytest.raises(ConfigError):
            validate_chain_name(bad)
    validate_chain_name("x-e1a")

    wal = chain()
    wal.write(b"a", 100)
    unlinked = plain(f"{name}-e1")  # epoch 1's log without a link: empty
    unlinked.write(b"x", 100)
    assert [s.topic for s in plain(name).segments()] == [s.topic for s in wal._log(0).segments()]
    assert all("-e1--" in s.topic for s in unlinked.segments())
    assert list(plain(name).read_all()) == [b"a"] and list(unlinked.read_all()) == [b"x"]
    assert list(chain().read_all()) == [b"a"]


def test_a_takeover_fences_an_old_leaders_late_writes_also_into_older_segments(
        chain: Callable[..., EpochChainLog], plain: Callable[..., KafkaWriteAheadLog],
        name: str, bootstrap: str) -> None:
    old = chain()
    a = _records("a", 8)
    for i, rec in enumerate(a):
        old.write(rec, 1_000 + i * 300)  # 3 segments
    first_segment = old._log(0).segments()[0].topic
    new = chain()
    _take_over(new, 1, a)
    assert new.epoch == 1
    b = _records("b", 4)
    for i, rec in enumerate(b):
        new.write(rec, 4_000 + i * 300)
    # The zombie: into its current segment, into an older one, into a new one.
    old.write(b"z-current", 1_100)
    _raw_write(bootstrap, first_segment, b"z-older", 1_050)
    old.write(b"z-new-segment", 9_000)
    assert any(b"z-" in r for r in plain(name).read_all())  # they are in epoch 0's log

    fresh = chain()
    assert list(fresh.read_all()) == a + b
    assert fresh.late_records == 3
    assert [m.epoch for m in fresh.chain()] == [0, 1]
    assert list(plain(f"{name}-e1").read_all()) == b  # the old leader never names it
    assert list(new.read_all()) == a + b
    progress = fresh.replay_progress()
    assert progress is not None and progress.total is not None
    assert progress.consumed == progress.total


def test_a_chain_over_three_epochs_with_a_zombie_at_each_step(
        chain: Callable[..., EpochChainLog], name: str, bootstrap: str) -> None:
    leaders = [chain()]
    expect: list[bytes] = []
    for epoch in range(3):
        leader = leaders[-1]
        recs = _records(f"e{epoch}", 3)
        for i, rec in enumerate(recs):
            leader.write(rec, 1_000 * (epoch + 1) + i * 200)
        expect += recs
        if epoch == 2:
            break
        nxt = chain()
        _take_over(nxt, epoch + 1, expect)
        leaders.append(nxt)
        leader.write(f"zombie-{epoch}".encode(), 100)  # its current segment, late
        _raw_write(bootstrap, leader._log(epoch).segments()[0].topic,
                   f"zombie-old-{epoch}".encode(), 50)
    fresh = chain()
    assert list(fresh.read_all()) == expect
    assert fresh.late_records == 4
    assert [m.epoch for m in fresh.chain()] == [0, 1, 2]
    # The follower of a standby started now replays the same sequence.
    assert _poll_until(fresh.follow(poll_timeout_s=0.3), len(expect)) == expect


def test_an_epoch_whose_leader_died_before_its_link_is_skipped(
        chain: Callable[..., EpochChainLog], plain: Callable[..., KafkaWriteAheadLog],
        name: str, bootstrap: str) -> None:
    leader0 = chain()
    leader0.write(b"a", 100)
    leader1 = chain()
    _take_over(leader1, 1, [b"a"])
    leader1.write(b"b", 200)
    # Epoch 2's leader died before its link: its link topic is empty. Records in its
    # log (no leader of epoch 2 could have written them; they stand for what no
    # reader may take) count as nothing.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for epoch in (2, 4):
        topic = f"{PREFIX}{name}-e{epoch}--link"
        admin.create_topics([NewTopic(topic, 1, -1)])[topic].result(10)
    _raw_write(bootstrap, f"{PREFIX}{name}-e4--link", b"not a link", 0)  # a corrupt link
    plain(f"{name}-e2").write(b"never", 300)
    assert [m.epoch for m in chain().chain()] == [0, 1]
    leader3 = chain()
    _take_over(leader3, 3, [b"a", b"b"])
    leader3.write(b"c", 400)
    leader1.write(b"late-1", 250)
    fresh = chain()
    assert [m.epoch for m in fresh.chain()] == [0, 1, 3]
    assert list(fresh.read_all()) == [b"a", b"b", b"c"]
    assert fresh.late_records == 1
    with pytest.raises(EpochTakenError):  # epoch 4's link topic holds a record
        _take_over(chain(), 4, [b"a", b"b", b"c"])


def test_a_standby_follows_a_takeover_by_a_third_party(
        chain: Callable[..., EpochChainLog], name: str, bootstrap: str) -> None:
    leader0 = chain()
    a = _records("a", 3)
    for i, rec in enumerate(a):
        leader0.write(rec, 1_000 + i * 400)
    standby = chain().follow(poll_timeout_s=0.3)
    assert _poll_until(standby, 3) == a
    leader0.write(b"a-3", 2_500)  # before the takeover: the new leader reads it
    leader1 = chain()
    _take_over(leader1, 1, [*a, b"a-3"])
    b = _records("b", 5)
    for i, rec in enumerate(b):
        leader1.write(rec, 3_000 + i * 400)
    assert _poll_until(standby, 6) == [b"a-3", *b]
    assert standby.epoch == 1
    leader0.write(b"zombie", 2_600)  # after the standby moved on: never seen
    leader2 = chain()
    _take_over(leader2, 2, [*a, b"a-3", *b])
    leader2.write(b"c", 6_000)
    assert _poll_until(standby, 1) == [b"c"]
    assert standby.poll(10, 0.5) == [] and standby.caught_up
    assert standby.positions().log == f"{name}-e2"
    assert list(chain().read_all()) == [*a, b"a-3", *b, b"c"]
    standby.close()


def test_a_standby_that_read_an_old_leaders_late_write_is_told_to_replay(
        chain: Callable[..., EpochChainLog]) -> None:
    leader0 = chain()
    leader0.write(b"a", 100)
    standby = chain().follow(poll_timeout_s=0.3)
    leader1 = chain()
    follower = leader1.follow(poll_timeout_s=0.3)
    assert list(follower.drain_to_end(20)) == [b"a"]
    leader0.write(b"late", 200)  # after the new leader's drain, before its link
    assert _poll_until(standby, 2) == [b"a", b"late"]
    leader1.begin_epoch(1, follower)
    leader1.write(b"b", 300)
    with pytest.raises(FollowOverrunError):
        for _ in range(20):
            standby.poll(10, 0.3)
    assert list(chain().read_all()) == [b"a", b"b"]


def test_begin_epoch_refuses_a_taken_target_and_a_stale_follower(
        chain: Callable[..., EpochChainLog], plain: Callable[..., KafkaWriteAheadLog],
        name: str, bootstrap: str) -> None:
    leader0 = chain()
    leader0.write(b"a", 100)
    plain(f"{name}-e1").write(b"other leader", 100)
    new = chain()
    follower = new.follow(poll_timeout_s=0.3)
    assert list(follower.drain_to_end(20)) == [b"a"]
    with pytest.raises(EpochTakenError):
        new.begin_epoch(1, follower)
    assert new.epoch == 0
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert f"{PREFIX}{name}-e1--link" not in topics  # nothing written
    with pytest.raises(StaleFollowerError):
        new.begin_epoch(0, follower)  # not newer
    stale = chain().follow(poll_timeout_s=0.3)
    list(stale.drain_to_end(20))
    new.begin_epoch(2, follower)
    with pytest.raises(StaleFollowerError):
        chain().begin_epoch(3, stale)  # reads epoch 0, but epoch 2 is linked
    with pytest.raises(StaleFollowerError):
        chain().begin_epoch(2, _follower_at(chain(), 2))  # epoch 2 is not newer


def _follower_at(wal: EpochChainLog, epoch: int) -> LogFollower:
    follower = wal.follow(poll_timeout_s=0.3)
    list(follower.drain_to_end(20))
    assert follower.positions().log.endswith(f"-e{epoch}")
    return follower


def test_clean_drops_old_records_of_every_epoch_and_keeps_the_links(
        chain: Callable[..., EpochChainLog], plain: Callable[..., KafkaWriteAheadLog],
        name: str) -> None:
    leader0 = chain()
    for t in range(1_000, 5_000, 500):
        leader0.write(f"a@{t}".encode(), t)
    leader1 = chain()
    _take_over(leader1, 1, [f"a@{t}".encode() for t in range(1_000, 5_000, 500)])
    for t in range(1_000, 9_000, 500):  # epoch 1 starts its own segments from 1 s
        leader1.write(f"b@{t}".encode(), t)
    leader1.clean(4_000, True)
    assert all(s.end_ms > 4_000 for s in plain(name).segments())
    assert all(s.end_ms > 4_000 for s in plain(f"{name}-e1").segments())
    expect = ([f"a@{t}".encode() for t in range(4_000, 5_000, 500)]
              + [f"b@{t}".encode() for t in range(4_000, 9_000, 500)])
    assert list(chain().read_all()) == expect
    assert [m.epoch for m in chain().chain()] == [0, 1]  # the link outlived the clean
    leader1.clean(8_000, False)
    deadline = time.monotonic() + 20
    while (plain(name).segments()
           or any(s.end_ms <= 8_000 for s in plain(f"{name}-e1").segments())):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert list(chain().read_all()) == [b"b@8000", b"b@8500"]
    leader1.write(b"b-after", 9_500)
    assert list(chain().read_all())[-1] == b"b-after"


def test_a_batched_log_over_the_chain_end_to_end(
        bootstrap: str, name: str, opened: list[Any],
        plain: Callable[..., KafkaWriteAheadLog]) -> None:
    def batched() -> BatchedWriteAheadLog:
        wal = BatchedWriteAheadLog(EpochChainLog(bootstrap, name, **OPTS))
        opened.append(wal)
        return wal

    old = batched()
    a = _records("a", 5)
    for i, rec in enumerate(a):
        old.write(rec, 1_000 + i * 400)
    group = serialize_batch([b"g-0", b"g-1", b"g-2"])
    old.wrapped.write(group, 3_000)  # one stored group of three records
    peek = batched().follow(poll_timeout_s=0.3)
    assert _poll_until(peek, 6) == [*a, b"g-0"]
    with pytest.raises(FollowPositionError):
        peek.positions()  # two records of the group are still held
    assert _poll_until(peek, 2) == [b"g-1", b"g-2"]
    assert peek.positions().log == name

    new = batched()
    follower = new.follow(poll_timeout_s=0.3)
    replayed = list(follower.drain_to_end(20))
    assert replayed == [*a, b"g-0", b"g-1", b"g-2"]
    ForwardingWriteAheadLog(new).begin_epoch(1, follower)  # forwarded to the chain
    follower.close()
    b = _records("b", 4)
    for i, rec in enumerate(b):
        new.write(rec, 4_000 + i * 400)
    old.write(b"zombie", 3_100)
    _raw_write(bootstrap, plain(name).segments()[0].topic, serialize_batch([b"z-old"]), 900)
    assert list(batched().read_all()) == replayed + b
    assert _poll_until(peek, 4) == b  # the standby's follower moved to epoch 1


def test_a_record_whose_last_chunks_land_after_the_link_is_left_out(
        chain: Callable[..., EpochChainLog], bootstrap: str) -> None:
    old = chain(chunk_bytes=1024)
    old.write(b"a", 100)
    topic = old._log(0).segments()[0].topic
    frames = encode_record(b"x" * 3000, 1024)  # three chunks
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, frames[0], partition=0, timestamp=150)  # a pause after chunk 1
    assert producer.flush(20) == 0
    new = chain(chunk_bytes=1024)
    _take_over(new, 1, [b"a"])  # the torn record is not read: its write never returned
    for frame in frames[1:]:
        producer.produce(topic, frame, partition=0, timestamp=150)
    assert producer.flush(20) == 0
    new.write(b"b", 200)
    fresh = chain(chunk_bytes=1024)
    assert list(fresh.read_all()) == [b"a", b"b"]
    assert fresh.late_records == 1


def test_a_prepared_chain_takes_over_the_same_way_and_preparing_changes_nothing_read(
        chain: Callable[..., EpochChainLog], plain: Callable[..., KafkaWriteAheadLog],
        name: str) -> None:
    old = chain()
    a = _records("a", 3)
    for i, rec in enumerate(a):
        old.write(rec, 1_000 + i * 300)
    new = chain()
    new.prepare_epoch(20)
    new.prepare_epoch(20)  # idempotent
    BatchedWriteAheadLog(chain()).prepare_epoch(20)  # passed through to the chain
    assert list(chain().read_all()) == a  # no link, no epoch log: nothing to read
    _take_over(new, 1, a)
    new.write(b"b0", 5_000)
    assert list(chain().read_all()) == [*a, b"b0"]
    plain(f"{name}-x").prepare_epoch(1)  # a log without epochs: nothing to prepare
    new.close()
    with pytest.raises(Exception, match="closed"):
        new.prepare_epoch(1)
