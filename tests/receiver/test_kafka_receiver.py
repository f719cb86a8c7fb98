"""KafkaReceiver without a broker: a fake confluent_kafka Consumer over in-memory partitions.

What matters here is the receiver's side of invariant 2: offsets are committed
only up to what the driver acknowledged, a skipped record still advances the
position, and a restart neither loses nor re-stores records.
"""

from __future__ import annotations

import itertools
import pickle
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, KafkaError, TopicPartition

import walstream.receiver.kafka_receiver as kafka_receiver_module
from tests.receiver.doubles import FakeReporter, ranges_of, record_generator_batches
from walstream.receiver.block import SourceRange, block_items
from walstream.receiver.block_generator import BlockGeneratorConfig
from walstream.receiver.kafka_receiver import KafkaReceiver
from walstream.receiver.supervisor import ReceiverSupervisor
from walstream.receiver.supervisor_config import SupervisorConfig
from walstream.receiver.text_run import TextRun
from walstream.testing import MemoryWAL, wait_until

pytestmark = pytest.mark.timeout(30)


class FakeMsg:
    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None,
                 value: bytes | None, err: Any = None) -> None:
        self._t, self._p, self._o, self._k, self._v, self._e = (
            topic, partition, offset, key, value, err)

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes | None:
        return self._k

    def value(self) -> bytes | None:
        return self._v

    def error(self) -> Any:
        return self._e


class FakeError:
    def __init__(self, code: int, text: str) -> None:
        self._code, self._text = code, text

    def code(self) -> int:
        return self._code

    def str(self) -> str:
        return self._text


class FakeCluster:
    """Partitions, committed offsets and every consumer made; ``acked`` tells what
    the driver acknowledged so a commit beyond it is recorded as a violation."""

    def __init__(self, logs: dict[str, dict[int, list[tuple[bytes | None, bytes | None]]]]):
        self.logs = logs
        self.lock = threading.Lock()
        self.committed: dict[tuple[str, int], int] = {}
        self.consumers: list[FakeConsumer] = []
        self.injected: list[Any] = []  # FakeError messages or exceptions, served by poll
        self.fail_after: dict[int, BaseException] = {}  # raise once after N records polled
        self.polled = 0
        self.acked: Callable[[tuple[str, int]], int] = lambda key: 2**62
        self.violations: list[str] = []

    def end(self, key: tuple[str, int]) -> int:
        return len(self.logs[key[0]][key[1]])


class FakeConsumer:
    def __init__(self, cluster: FakeCluster, conf: dict[str, Any]) -> None:
        self.cluster = cluster
        self.conf = conf
        self.positions: dict[tuple[str, int], int] = {}
        self.closed = False
        self.eof_sent: set[tuple[str, int]] = set()
        cluster.consumers.append(self)

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(topics={
            t: SimpleNamespace(partitions={p: None for p in parts})
            for t, parts in self.cluster.logs.items()})

    def committed(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        with self.cluster.lock:
            return [TopicPartition(tp.topic, tp.partition,
                                   self.cluster.committed.get((tp.topic, tp.partition),
                                                              OFFSET_INVALID))
                    for tp in tps]

    def assign(self, tps: list[TopicPartition]) -> None:
        for tp in tps:  # OFFSET_INVALID -> auto.offset.reset=earliest
            self.positions[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else 0

    def poll(self, timeout: float) -> FakeMsg | None:
        assert not self.closed, "poll after close"
        c = self.cluster
        with c.lock:
            if c.injected:
                x = c.injected.pop(0)
                if isinstance(x, BaseException):
                    raise x
                return x
            exc = c.fail_after.pop(c.polled, None)
            if exc is not None:
                raise exc
            for (t, p), pos in sorted(self.positions.items()):
                log = c.logs[t][p]
                if pos < len(log):
                    self.positions[(t, p)] = pos + 1
                    c.polled += 1
                    return FakeMsg(t, p, pos, *log[pos])
                if (t, p) not in self.eof_sent:
                    self.eof_sent.add((t, p))
                    return FakeMsg(t, p, pos, None, None,
                                   FakeError(KafkaError._PARTITION_EOF, "eof"))
        time.sleep(min(timeout, 0.005))
        return None

    def consume(self, num_messages: int, timeout: float) -> list[FakeMsg]:
        """Like librdkafka's: up to ``num_messages``; an injected exception is raised
        at the start of a call (messages already collected are returned first)."""
        out: list[FakeMsg] = []
        while len(out) < num_messages:
            with self.cluster.lock:
                pending_exc = (bool(self.cluster.injected) and isinstance(
                    self.cluster.injected[0], BaseException
                )) or self.cluster.polled in self.cluster.fail_after
            if out and pending_exc:
                break
            msg = self.poll(0.0 if out else timeout)
            if msg is None:
                break
            out.append(msg)
        return out

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        assert not self.closed
        with self.cluster.lock:
            for tp in offsets:
                key = (tp.topic, tp.partition)
                if tp.offset > self.cluster.acked(key):
                    self.cluster.violations.append(
                        f"committed {key}@{tp.offset} beyond the acknowledged "
                        f"{self.cluster.acked(key)}")
                self.cluster.committed[key] = tp.offset

    def close(self) -> None:
        self.closed = True


def kv(t: str, p: int, i: int) -> tuple[bytes, bytes]:
    return (f"{t}{p}-k{i}".encode(), f"{t}{p}-v{i}".encode())


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    c = FakeCluster({"src": {0: [kv("src", 0, i) for i in range(30)],
                             1: [kv("src", 1, i) for i in range(20)]}})
    monkeypatch.setattr(kafka_receiver_module, "Consumer", lambda conf: FakeConsumer(c, conf))
    return c


@pytest.fixture
def run(
    cluster: FakeCluster, wal: MemoryWAL, reporter: FakeReporter
) -> Iterator[Callable[..., tuple[ReceiverSupervisor, KafkaReceiver]]]:
    made: list[ReceiverSupervisor] = []

    def acked(key: tuple[str, int]) -> int:
        return max((r.until_offset for r in ranges_of(list(reporter.blocks))
                    if (r.topic, r.partition) == key), default=-1)

    cluster.acked = acked

    def start(receiver: KafkaReceiver, **cfg: Any) -> tuple[ReceiverSupervisor, KafkaReceiver]:
        cfg.setdefault("restart_delay_s", 0.05)
        sup = ReceiverSupervisor(receiver, 1, wal, reporter,
                                 BlockGeneratorConfig(block_interval_ms=10),
                                 SupervisorConfig(**cfg))
        made.append(sup)
        sup.start()
        return sup, receiver

    yield start
    for sup in made:
        sup.stop("teardown", None)


def all_committed(cluster: FakeCluster) -> bool:
    with cluster.lock:
        return all(cluster.committed.get((t, p)) == len(log)
                   for t, parts in cluster.logs.items() for p, log in parts.items())


def expected_items(cluster: FakeCluster, skip: frozenset[tuple[str, int, int]] = frozenset()
                   ) -> list[tuple[str, str]]:
    return sorted((k.decode(), v.decode())  # type: ignore[union-attr]
                  for t, parts in cluster.logs.items() for p, log in parts.items()
                  for i, (k, v) in enumerate(log) if (t, p, i) not in skip)


def no_overlap(ranges: list[SourceRange]) -> None:
    by_key: dict[tuple[str, int], list[SourceRange]] = {}
    for r in ranges:
        by_key.setdefault((r.topic, r.partition), []).append(r)
    for key, rs in by_key.items():
        rs.sort()
        for a, b in itertools.pairwise(rs):
            assert b.from_offset >= a.until_offset, f"{key}: offsets stored twice: {a} {b}"


def test_records_flow_and_offsets_follow_the_driver(
    cluster: FakeCluster, run: Callable[..., Any], reporter: FakeReporter
) -> None:
    cluster.logs["src"][0][7] = (b"k", b"\xff\xfe not utf-8")
    cluster.injected.append(FakeMsg("src", 0, -1, None, None,
                                    FakeError(KafkaError._TRANSPORT, "broker hiccup")))
    receiver = KafkaReceiver("fake:9092", "grp", {"src": 2, "absent-topic": 1},
                             kafka_params={"enable.auto.commit": True})
    sup, _ = run(receiver)
    wait_until(lambda: all_committed(cluster), what="every offset committed")
    sup.stop("done", None)

    consumer = cluster.consumers[0]
    assert consumer.conf["enable.auto.commit"] is False  # never auto-commit
    assert consumer.closed
    assert sup.error is None
    assert receiver.undecodable == 1
    errors = [m for m, _ in reporter.errors]
    assert any("undecodable" in m for m in errors) and any("consumer error" in m for m in errors)
    assert sorted(reporter.reported_items()) == expected_items(
        cluster, frozenset({("src", 0, 7)}))
    for p in (0, 1):  # per-partition order is kept
        values = [v for _, v in reporter.reported_items() if v.startswith(f"src{p}-")]
        assert values == sorted(values, key=lambda s: int(s.rsplit("v", 1)[1]))
    no_overlap(ranges_of(reporter.blocks))
    assert cluster.violations == []
    assert reporter.violations == []


def test_clean_poll_batches_are_stored_whole_with_exact_contiguous_ranges(
    cluster: FakeCluster, run: Callable[..., Any], reporter: FakeReporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No error, all UTF-8, under max_block_bytes: never the per-record path.
    cluster.logs["src"][1][3] = (None, b"no key")

    def parts(*args: Any) -> Any:
        raise AssertionError("a clean poll batch went through _store_parts")

    monkeypatch.setattr(KafkaReceiver, "_store_parts", parts)
    receiver = KafkaReceiver("fake:9092", "grp", {"src": 1})
    sup, _ = run(receiver)
    wait_until(lambda: all_committed(cluster), what="every offset committed")
    sup.stop("done", None)

    assert sup.error is None and receiver.undecodable == 0
    items = sorted(reporter.reported_items(), key=repr)
    expected = [(None if k is None else k.decode(), v.decode())
                for parts_ in cluster.logs["src"].values() for k, v in parts_]
    assert items == sorted(expected, key=repr)
    ranges = ranges_of(reporter.blocks)
    no_overlap(ranges)
    for p, n in ((0, 30), (1, 20)):  # together the ranges cover each partition exactly
        mine = sorted(r for r in ranges if r.partition == p)
        assert mine[0].from_offset == 0 and mine[-1].until_offset == n
        assert all(a.until_offset == b.from_offset for a, b in itertools.pairwise(mine))
    assert receiver.source_ends()[("src", 0)] >= 30
    assert cluster.violations == [] and reporter.violations == []


@pytest.mark.parametrize("mixed", [False, True], ids=["clean", "mixed"])
def test_keyless_records_are_stored_as_keyless_pairs_in_v3_blocks_when_they_can_be(
    cluster: FakeCluster, run: Callable[..., Any], reporter: FakeReporter, wal: MemoryWAL,
    mixed: bool,
) -> None:
    # The usual Kafka record has no key: keyless UTF-8 values, ASCII or not. Mixed:
    # one value holds a newline (its block cannot be newline-joined text), one is a
    # tombstone, one is not UTF-8 (skipped and reported).
    cluster.logs["src"][0] = [(None, f"v{i} caf\u00e9".encode()) for i in range(30)]
    cluster.logs["src"][1] = [(None, f"w{i}".encode()) for i in range(20)]
    if mixed:
        cluster.logs["src"][1][4] = (None, b"two\nlines")
        cluster.logs["src"][1][9] = (None, None)
        cluster.logs["src"][1][12] = (None, b"\xc3 bad")
    receiver = KafkaReceiver("fake:9092", "grp", {"src": 1})
    sup, _ = run(receiver)
    wait_until(lambda: all_committed(cluster), what="every offset committed")
    sup.stop("done", None)

    assert sup.error is None and receiver.undecodable == (1 if mixed else 0)
    expected = [(None, None if v is None else v.decode())
                for p, log in cluster.logs["src"].items() for i, (_, v) in enumerate(log)
                if not (mixed and (p, i) == (1, 12))]
    assert sorted(reporter.reported_items(), key=repr) == sorted(expected, key=repr)
    versions = set()
    for info in list(reporter.blocks):
        data = wal.read(info.handle)
        items = reporter.items_of(info)
        assert block_items(data) == items  # the task's reader agrees
        text = all(v is not None and "\n" not in v for _, v in items)
        assert data[4] == (3 if text else 1), items
        versions.add(data[4])
    if not mixed:
        assert versions == {3}
    no_overlap(ranges_of(reporter.blocks))
    assert cluster.violations == [] and reporter.violations == []


@pytest.mark.parametrize("keyed", [False, True], ids=["keyless", "keyed"])
def test_one_assigned_partition_gets_each_batch_s_range_from_its_ends_exact_and_contiguous(
    cluster: FakeCluster, run: Callable[..., Any], reporter: FakeReporter, wal: MemoryWAL,
    monkeypatch: pytest.MonkeyPatch, keyed: bool,
) -> None:
    # One partition assigned: a batch's range is its first record's offset to the one
    # after its last, read off the batch's two ends. Small batches make many blocks; a
    # value with a newline in one batch sends that batch down the list path.
    values = [f"r{i}".encode() for i in range(40)]
    values[17] = b"two\nlines"
    cluster.logs = {"one": {0: [(b"k" if keyed else None, v) for v in values]}}
    batches = record_generator_batches(monkeypatch)
    receiver = KafkaReceiver("fake:9092", "grp", {"one": 1}, max_batch_records=7)
    sup, _ = run(receiver)
    wait_until(lambda: all_committed(cluster), what="every offset committed")
    sup.stop("done", None)

    assert receiver._only_partition == ("one", 0)
    assert sup.error is None
    assert reporter.reported_items() == [("k" if keyed else None, v.decode()) for v in values]
    mine = sorted(ranges_of(reporter.blocks))
    assert mine[0].from_offset == 0 and mine[-1].until_offset == 40
    assert all(a.until_offset == b.from_offset for a, b in itertools.pairwise(mine))
    # Keyless batches go to the generator as runs, except the one with the newline.
    runs = [isinstance(b, TextRun) for b in batches]
    assert runs == ([False] * len(batches) if keyed
                    else [not any(b"\n" in r for r in b) for b in batches])
    assert keyed or runs.count(False) == 1
    assert cluster.violations == [] and reporter.violations == []


def test_start_offsets_win_over_committed_which_win_over_reset(cluster: FakeCluster) -> None:
    cluster.logs["src"][2] = []
    cluster.committed = {("src", 0): 12, ("src", 1): 5}
    receiver = KafkaReceiver("fake:9092", "grp", {"src": 3}, start_offsets={("src", 0): 20})
    assignment = receiver._assignment(FakeConsumer(cluster, {}))  # type: ignore[arg-type]
    got = {(tp.topic, tp.partition): tp.offset for tp in assignment}
    assert got == {("src", 0): 20, ("src", 1): 5, ("src", 2): OFFSET_BEGINNING}
    # The reset rule, resolved here: no second look at the commits before a fetch.
    for reset, offset in (("latest", OFFSET_END), ("LARGEST", OFFSET_END),
                          ("smallest", OFFSET_BEGINNING), ("error", OFFSET_INVALID)):
        assignment = receiver._assignment(FakeConsumer(cluster, {}), reset)  # type: ignore[arg-type]
        assert {(tp.topic, tp.partition): tp.offset for tp in assignment}[("src", 2)] == offset


def test_driver_acknowledged_positions_win_over_everything(cluster: FakeCluster) -> None:
    """A relaunched receiver resumes where the driver's WAL says its data ends."""
    from types import SimpleNamespace

    from walstream.receiver.block import SourceRange

    cluster.logs["src"][2] = []
    cluster.committed = {("src", 0): 12, ("src", 1): 5}
    receiver = KafkaReceiver("fake:9092", "grp", {"src": 3}, start_offsets={("src", 0): 20})
    receiver._supervisor = SimpleNamespace(  # type: ignore[assignment]
        start_positions=(SourceRange("src", 0, 31, 31), SourceRange("src", 2, 4, 4)))
    assignment = receiver._assignment(FakeConsumer(cluster, {}))  # type: ignore[arg-type]
    got = {(tp.topic, tp.partition): tp.offset for tp in assignment}
    assert got == {("src", 0): 31, ("src", 1): 5, ("src", 2): 4}


def test_a_restart_neither_loses_nor_re_stores_records(
    cluster: FakeCluster, run: Callable[..., Any], reporter: FakeReporter
) -> None:
    cluster.fail_after[25] = RuntimeError("consumer went away")
    receiver = KafkaReceiver("fake:9092", "grp", {"src": 2})
    sup, _ = run(receiver)
    wait_until(lambda: len(cluster.consumers) == 2, what="the restart's new consumer")
    wait_until(lambda: all_committed(cluster), what="every offset committed")
    sup.stop("done", None)
    assert sup.error is None
    assert cluster.consumers[0].closed and cluster.consumers[1].closed
    no_overlap(ranges_of(reporter.blocks))
    assert sorted(reporter.reported_items()) == expected_items(cluster)
    assert cluster.violations == []


def test_a_restart_with_start_offsets_does_not_rewind(
    cluster: FakeCluster, run: Callable[..., Any], reporter: FakeReporter
) -> None:
    """start_offsets are the driver's positions when the app started: a later
    in-process restart must resume after what was stored since, not rewind."""
    cluster.fail_after[40] = RuntimeError("consumer went away")
    receiver = KafkaReceiver("fake:9092", "grp", {"src": 2},
                             start_offsets={("src", 0): 10, ("src", 1): 0})
    sup, _ = run(receiver)
    wait_until(lambda: len(cluster.consumers) == 2, what="the restart's new consumer")
    wait_until(lambda: all_committed(cluster), what="every offset committed")
    sup.stop("done", None)
    assert sup.error is None
    no_overlap(ranges_of(reporter.blocks))
    skipped = frozenset(("src", 0, i) for i in range(10))
    assert sorted(reporter.reported_items()) == expected_items(cluster, skipped)


def test_kafka_receiver_pickles(cluster: FakeCluster, run: Callable[..., Any]) -> None:
    receiver = KafkaReceiver("fake:9092", "grp", {"src": 2}, kafka_params={"x": 1},
                             start_offsets={("src", 0): 3})
    blob = pickle.dumps(receiver)
    copy = pickle.loads(blob)
    assert (copy.bootstrap_servers, copy.group_id, copy.topics, copy.kafka_params,
            copy.start_offsets) == ("fake:9092", "grp", {"src": 2}, {"x": 1}, {("src", 0): 3})
    copy.on_block_reported("b", (SourceRange("src", 0, 3, 9),))  # its lock works
    assert copy._to_commit == {("src", 0): 9}
    run(receiver)  # a started one pickles too, without consumer or thread
    wait_until(lambda: cluster.consumers != [])
    started = pickle.loads(pickle.dumps(receiver))
    assert started._consumer is None and started._thread is None
    with pytest.raises(Exception, match="not started by a supervisor"):
        _ = started.supervisor


def test_on_stop_on_the_receiving_thread_still_commits_and_closes(
    cluster: FakeCluster,
) -> None:
    receiver = KafkaReceiver("fake:9092", "grp", {"src": 2})
    consumer = FakeConsumer(cluster, {})
    receiver._consumer = consumer  # type: ignore[assignment]
    receiver.on_block_reported("b", (SourceRange("src", 1, 0, 4),))
    errors: list[BaseException] = []

    def on_its_own_thread() -> None:
        try:
            receiver.onStop()
        except BaseException as exc:
            errors.append(exc)

    receiver._thread = threading.Thread(target=on_its_own_thread)
    receiver._thread.start()
    receiver._thread.join(5)
    assert errors == []
    assert consumer.closed
    assert cluster.committed == {("src", 1): 4}


def test_bad_record_policy_fail_closes_the_consumer(
    cluster: FakeCluster, run: Callable[..., Any], reporter: FakeReporter
) -> None:
    cluster.logs["src"][0][5] = (b"k", b"v" * 200)
    receiver = KafkaReceiver("fake:9092", "grp", {"src": 2})
    sup, _ = run(receiver, bad_record_policy="fail", max_record_bytes=100)
    assert sup.await_termination(5)
    wait_until(lambda: cluster.consumers[0].closed, what="the consumer closed")
    assert len(cluster.consumers) == 1  # stopped, not restarted
    acked = {(r.topic, r.partition): r.until_offset for r in ranges_of(reporter.blocks)}
    assert acked.get(("src", 0), 0) <= 5  # the bad record is not acknowledged
    assert cluster.committed.get(("src", 0), 0) <= 5
    assert cluster.violations == []


def test_a_put_timeout_does_not_silently_end_consumption(
    cluster: FakeCluster, wal: MemoryWAL, reporter: FakeReporter
) -> None:
    """With put_timeout_s, a slow driver makes add_data raise; the Kafka receiver
    must not take that for a stop and quietly end its thread while the supervisor
    lives on: every record still arrives, exactly once."""
    slow = threading.Event()
    real = reporter.add_block

    def slow_once(info: Any, figures: Any = None) -> bool:
        if not slow.is_set():
            slow.set()
            time.sleep(0.6)  # the driver stalls once
        return real(info, figures=figures)

    reporter.add_block = slow_once  # type: ignore[method-assign]
    receiver = KafkaReceiver("fake:9092", "grp", {"src": 2})
    sup = ReceiverSupervisor(
        receiver, 1, wal, reporter,
        BlockGeneratorConfig(block_interval_ms=5, queue_size=1, max_block_records=1,
                             put_timeout_s=0.1),
        SupervisorConfig(restart_delay_s=0.05),
    )
    sup.start()
    try:
        wait_until(lambda: all_committed(cluster) or sup.stopped.is_set(),
                   what="every offset committed (or the stream failing visibly)")
    finally:
        sup.stop("done", None)
    assert sup.error is None
    no_overlap(ranges_of(reporter.blocks))
    assert sorted(reporter.reported_items()) == expected_items(cluster)


def test_source_ends_are_at_least_the_offset_after_the_last_fetched_record(
    cluster: FakeCluster, run: Callable[..., Any]
) -> None:
    """A consumer that knows no watermark (this fake has none) still gives ends."""
    _, receiver = run(KafkaReceiver("fake:9092", "g", {"src": 1}))
    wait_until(lambda: all_committed(cluster))
    assert receiver.source_ends() == {("src", 0): 30, ("src", 1): 20}


def test_source_ends_are_the_cached_high_watermarks(
    cluster: FakeCluster, run: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """librdkafka's cached high watermark, asked with cached=True (no request), is the
    end when it is beyond the records fetched so far."""
    asked: list[bool] = []

    def watermarks(self: FakeConsumer, tp: TopicPartition, cached: bool = False,
                   timeout: float | None = None) -> tuple[int, int]:
        asked.append(cached)
        return 0, self.cluster.end((tp.topic, tp.partition)) + 5

    monkeypatch.setattr(FakeConsumer, "get_watermark_offsets", watermarks, raising=False)
    _, receiver = run(KafkaReceiver("fake:9092", "g", {"src": 1}))
    wait_until(lambda: all_committed(cluster))
    assert receiver.source_ends() == {("src", 0): 35, ("src", 1): 25}
    assert asked and all(asked)
    copy = pickle.loads(pickle.dumps(receiver))
    assert copy.source_ends() == {}  # positions of this process mean nothing elsewhere
