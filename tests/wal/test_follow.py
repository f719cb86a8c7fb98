"""Following a Kafka WAL (``WriteAheadLog.follow``) against the real broker: the replay,
then live appends, new segments, a drain to the end as of a call, cleaned segments,
corrupt records, prompt close, bounded waits."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from walstream.testing import MemoryWAL
from walstream.wal import BatchedWriteAheadLog, KafkaWriteAheadLog, WalClosedError
from walstream.wal.base import ForwardingWriteAheadLog, LogFollower
from walstream.wal.errors import (
    CorruptRecordError,
    FollowGapError,
    FollowNotSupportedError,
    FollowTimeoutError,
    TornRecordError,
)
from walstream.wal.framing import encode_record

WalFactory = Callable[..., KafkaWriteAheadLog]


def _poll_until(follower: LogFollower, n: int, within_s: float = 20.0) -> list[bytes]:
    """Poll until ``n`` records came; fail (showing what came) after ``within_s``."""
    got: list[bytes] = []
    deadline = time.monotonic() + within_s
    while len(got) < n and time.monotonic() < deadline:
        got.extend(follower.poll(n - len(got), 0.5))
    assert len(got) == n, f"{len(got)} of {n} records within {within_s}s: {got[-3:]!r}"
    return got


def test_follow_yields_the_replay_then_live_appends_of_a_concurrent_batched_writer(
        wal_factory: WalFactory) -> None:
    kafka = wal_factory(chunk_bytes=1024, rolling_interval_ms=400)
    log = BatchedWriteAheadLog(kafka)
    big = bytes(range(256)) * 20  # 5 KiB: a group holding it spans chunks
    before = [f"before-{i}".encode() for i in range(5)] + [big + b"-before"]
    for i, rec in enumerate(before):
        log.write(rec, 1_000 + i * 100)
    follower = log.follow(poll_timeout_s=0.5)
    replay = _poll_until(follower, len(before))
    assert replay == before == list(log.read_all())

    live = [(f"live-{w}-{i}".encode() + (big if i % 7 == 3 else b""), 2_000 + i * 50)
            for w in range(3) for i in range(30)]

    def writer(w: int) -> None:
        for rec, t in live[w * 30:(w + 1) * 30]:
            log.write(rec, t)  # times cross several 400 ms segments while followed

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    followed = _poll_until(follower, len(live), within_s=60)
    for t in threads:
        t.join()
    assert len(kafka.segments()) >= 4
    # Exactly read_all's sequence: the same records in the same order.
    assert replay + followed == list(log.read_all())
    for w in range(3):  # and each writer's records in its write order
        mine = [r for r in followed if r.startswith(f"live-{w}-".encode())]
        assert mine == [rec for rec, _ in live[w * 30:(w + 1) * 30]]
    assert follower.poll(10, 0.3) == [] and follower.caught_up
    follower.close()
    log.close()


def test_a_segment_created_while_following_is_picked_up(wal_factory: WalFactory) -> None:
    log = wal_factory(rolling_interval_ms=1_000)
    log.write(b"first", 100)
    follower = log.follow(poll_timeout_s=0.5)
    assert _poll_until(follower, 1) == [b"first"]
    assert follower.poll(10, 0.2) == [] and follower.caught_up
    log.write(b"second", 900)  # the same segment
    log.write(b"third", 5_000)  # a new segment topic, created now
    log.write(b"fourth", 9_000)  # and another
    assert len(log.segments()) == 3
    started = time.monotonic()
    assert _poll_until(follower, 3) == [b"second", b"third", b"fourth"]
    assert time.monotonic() - started < 10  # metadata polls are bounded, not a timeout
    follower.poll(10, 0.3)
    assert follower.caught_up


def test_a_follower_of_an_empty_log_waits_for_its_first_segment(
        wal_factory: WalFactory) -> None:
    log = wal_factory()
    follower = log.follow(poll_timeout_s=0.2)
    assert follower.poll() == [] and follower.caught_up
    assert list(follower.drain_to_end(5)) == []
    log.write(b"one", 10)
    assert _poll_until(follower, 1) == [b"one"]


def test_drain_to_end_returns_exactly_the_records_written_before_the_call(
        wal_factory: WalFactory) -> None:
    kafka = wal_factory(chunk_bytes=1024, rolling_interval_ms=1_000)
    log = BatchedWriteAheadLog(kafka)
    for i in range(3):
        log.write(f"old-{i}".encode(), 100 + i)
    follower = log.follow(poll_timeout_s=0.5)
    assert _poll_until(follower, 2) == [b"old-0", b"old-1"]  # one record left unread
    tail = [(f"tail-{i}".encode() * (1 + 400 * (i % 3 == 1)), 500 + i * 400)
            for i in range(12)]  # several segments, some records chunked
    for rec, t in tail:
        log.write(rec, t)
    drained = list(follower.drain_to_end(20))
    assert drained == [b"old-2"] + [rec for rec, _ in tail]
    assert follower.caught_up
    log.write(b"after", 9_000)
    assert list(follower.drain_to_end(20)) == [b"after"]
    assert list(follower.drain_to_end(20)) == []


def test_drain_during_concurrent_writes_yields_every_acknowledged_record_in_order(
        wal_factory: WalFactory) -> None:
    log = wal_factory(rolling_interval_ms=300)
    follower = log.follow(poll_timeout_s=0.5)
    acked: list[bytes] = []
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            rec = f"r{i}".encode()
            log.write(rec, 1_000 + i * 20)
            acked.append(rec)
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(1.0)
        before_call = list(acked)
        drained = list(follower.drain_to_end(30))
    finally:
        stop.set()
        thread.join()
    assert len(before_call) > 5
    assert drained[:len(before_call)] == before_call  # everything acknowledged first
    assert drained == acked[:len(drained)]  # then a prefix of what came after
    rest = _poll_until(follower, len(acked) - len(drained))
    assert drained + rest == acked == list(log.read_all())


def test_a_segment_cleaned_under_the_follower_is_skipped_not_waited_on(
        wal_factory: WalFactory, caplog: pytest.LogCaptureFixture) -> None:
    log = wal_factory(rolling_interval_ms=1_000)
    for i in range(6):
        log.write(f"a{i}".encode(), 100 + i)  # segment 0-1000
    log.write(b"b0", 1_500)  # segment 1000-2000
    log.write(b"c0", 2_500)  # segment 2000-3000
    follower = log.follow(poll_timeout_s=0.5)
    assert follower.poll(1, 5) == [b"a0"]  # reading the first segment
    caplog.set_level(logging.WARNING, logger="walstream.wal.follow")
    # This process deletes the segment the follower reads: its consumer is released
    # first (release_topics), and both cleaned segments are skipped.
    log.clean(2_000, wait_for_completion=True)
    started = time.monotonic()
    rest = _poll_until(follower, 1, within_s=10)
    assert time.monotonic() - started < 5
    assert rest == [b"c0"]
    assert any("skipped" in r.getMessage() or "deleted" in r.getMessage()
               for r in caplog.records)
    log.write(b"c1", 2_600)
    assert list(follower.drain_to_end(10)) == [b"c1"]  # deleted segments are no gap


_CLEANER = """
import sys
from walstream.wal import KafkaWriteAheadLog
log = KafkaWriteAheadLog(sys.argv[1], sys.argv[2], rolling_interval_ms=1000)
log.clean(int(sys.argv[3]), wait_for_completion=True)
log.close()
"""


def test_segments_a_caught_up_follower_passed_may_be_cleaned_by_another_process(
        wal_factory: WalFactory, bootstrap: str) -> None:
    """The standby's case: the leader cleans old segments the standby has read."""
    log = wal_factory(rolling_interval_ms=1_000)
    for t in (100, 1_500, 2_500):
        log.write(f"t{t}".encode(), t)
    follower = log.follow(poll_timeout_s=0.5)
    assert _poll_until(follower, 3) == [b"t100", b"t1500", b"t2500"]
    subprocess.run([sys.executable, "-c", _CLEANER, bootstrap, log.name, "2000"],
                   check=True, timeout=60, cwd=Path(__file__).parents[2])
    assert len(log.segments()) == 1
    log.write(b"t2600", 2_600)
    log.write(b"t3500", 3_500)
    assert list(follower.drain_to_end(20)) == [b"t2600", b"t3500"]


def test_corrupt_and_torn_records_are_reported_and_skipped(
        wal_factory: WalFactory, bootstrap: str) -> None:
    reports: list[CorruptRecordError] = []
    log = wal_factory(on_corrupt=reports.append, chunk_bytes=1024)
    log.write(b"good-1", 1)
    follower = log.follow(poll_timeout_s=0.5)
    assert _poll_until(follower, 1) == [b"good-1"]
    topic = log.segments()[0].topic
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, b"not a wal frame", partition=0)
    p.produce(topic, encode_record(b"x" * 3000, 1024)[0], partition=0)  # torn: 1 of 3
    p.flush(10)
    log.write(b"good-2" * 500, 2)  # chunked, after the torn record
    assert _poll_until(follower, 1) == [b"good-2" * 500]
    assert len(reports) == 2 and log.corrupt_records == 2
    assert "bad magic" in str(reports[0])
    assert isinstance(reports[1], TornRecordError)
    strict = wal_factory(name=log.name, strict=True).follow(poll_timeout_s=0.5)
    with pytest.raises(CorruptRecordError):
        _poll_until(strict, 3)


def test_a_write_racing_a_roll_from_another_writer_is_a_gap_for_drain(
        wal_factory: WalFactory) -> None:
    old = wal_factory(rolling_interval_ms=1_000)
    new = wal_factory(name=old.name, rolling_interval_ms=1_000)
    old.write(b"old-1", 100)  # old's current segment: 0-1000
    new.write(b"new-1", 1_500)  # new's: 1000-2000
    follower = new.follow(poll_timeout_s=0.5)
    assert _poll_until(follower, 2) == [b"old-1", b"new-1"]
    old.write(b"old-late", 200)  # still into 0-1000, behind the follower
    assert follower.poll(10, 1.0) == []
    with pytest.raises(FollowGapError, match="replay"):
        list(follower.drain_to_end(20))
    assert list(new.read_all()) == [b"old-1", b"old-late", b"new-1"]


def test_close_is_prompt_and_final(wal_factory: WalFactory) -> None:
    log = wal_factory()
    log.write(b"x", 1)
    follower = log.follow(poll_timeout_s=30)
    assert _poll_until(follower, 1) == [b"x"]
    returned: list[float] = []

    def waiter() -> None:
        follower.poll(10, 30)
        returned.append(time.monotonic())

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.5)
    closed_at = time.monotonic()
    follower.close()
    thread.join(5)
    assert returned and returned[0] - closed_at < 1.0
    with pytest.raises(WalClosedError):
        follower.poll()
    with pytest.raises(WalClosedError):
        follower.drain_to_end(1)
    follower.close()  # idempotent
    other = log.follow()
    log.close()  # closes its followers
    with pytest.raises(WalClosedError):
        other.poll()
    with pytest.raises(WalClosedError):
        log.follow()


def test_waits_are_bounded(wal_factory: WalFactory) -> None:
    log = wal_factory(chunk_bytes=1024)
    follower = log.follow(poll_timeout_s=0.3)
    for timeout in (0.0, 0.3, 1.0):
        started = time.monotonic()
        assert follower.poll(10, timeout) == []
        assert time.monotonic() - started < timeout + 0.5
    started = time.monotonic()
    assert follower.poll() == []  # the follower's default
    assert time.monotonic() - started < 0.8
    for i in range(200):
        log.write(bytes([i % 256]) * 3000, i)
    fresh = log.follow(poll_timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(FollowTimeoutError):
        for _ in fresh.drain_to_end(0.001):
            time.sleep(0.01)  # the caller's time between records counts too
    assert time.monotonic() - started < 2.0
    assert len(list(follower.drain_to_end(20))) == 200


def test_logs_that_cannot_be_followed_say_so_and_wrappers_forward(
        wal_factory: WalFactory) -> None:
    with pytest.raises(FollowNotSupportedError):
        MemoryWAL().follow()
    with pytest.raises(FollowNotSupportedError):
        ForwardingWriteAheadLog(MemoryWAL()).follow()
    log = wal_factory()
    log.write(b"a", 1)
    wrapped = ForwardingWriteAheadLog(log)
    follower = wrapped.follow(poll_timeout_s=0.2)
    assert isinstance(follower, LogFollower) and follower.poll_timeout_s == 0.2
    assert _poll_until(follower, 1) == [b"a"]
    follower.close()
