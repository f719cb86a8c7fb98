"""A Kafka WAL's replay progress (``replay_progress``): the Kafka records ahead of a
``read_all`` from its segments' end offsets, and the records it has passed, by offsets,
which reach that total exactly whatever the records hold (chunks, skipped records)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError

from walstream.testing import MemoryWAL
from walstream.wal import BatchedWriteAheadLog, KafkaWriteAheadLog
from walstream.wal import reader as reader_mod
from walstream.wal.base import ForwardingWriteAheadLog, ReplayProgress

WalFactory = Callable[..., KafkaWriteAheadLog]


def test_read_all_counts_the_kafka_records_of_its_segments(wal_factory: WalFactory) -> None:
    """Chunks produced back to back share a Kafka batch, whose base offset is what
    ListOffsets reports as the end on the embedded broker: the total must come from
    the Fetch-based probe to count every chunk."""
    log = wal_factory(chunk_bytes=1024, rolling_interval_ms=100)
    assert log.replay_progress() is None  # no read yet
    sizes = [10, 5000, 20, 3000, 30, 40, 2500, 50]
    handles = [log.write(bytes([i]) * n, 1_000 + i * 60) for i, n in enumerate(sizes)]
    frames = sum(h.chunks for h in handles)
    assert frames > len(sizes) and len(log.segments()) >= 3

    records = log.read_all()
    progress = log.replay_progress()
    assert progress == ReplayProgress(None, 0)  # known once the read starts
    assert next(records) == bytes([0]) * 10
    assert progress is not None and progress.total == frames
    assert progress.consumed == handles[0].chunks
    passed = [progress.consumed for _ in records]
    assert passed == [sum(h.chunks for h in handles[:i + 1]) for i in range(1, len(sizes))]
    assert progress.consumed == progress.total

    reread = log.read_all()  # each read_all has its own progress
    assert log.replay_progress() is not progress
    assert len(list(reread)) == len(sizes)
    assert log.replay_progress() == ReplayProgress(frames, frames)


def test_records_skipped_below_a_clean_threshold_count_as_read(
        wal_factory: WalFactory) -> None:
    log = wal_factory(chunk_bytes=1024, rolling_interval_ms=1_000)
    old = [log.write(b"o" * 3000, 1_000 + i) for i in range(3)]  # segment 1000-2000
    new = [log.write(b"n" * 100, 1_500 + i) for i in range(2)]  # the same segment
    log.clean(1_500, wait_for_completion=True)  # the segment straddles the threshold
    assert list(log.read_all()) == [b"n" * 100] * 2
    total = sum(h.chunks for h in old + new)
    assert log.replay_progress() == ReplayProgress(total, total)


def test_an_empty_log_has_nothing_ahead_and_wrappers_forward(
        wal_factory: WalFactory) -> None:
    log = wal_factory()
    wrapped = ForwardingWriteAheadLog(BatchedWriteAheadLog(log))
    assert list(wrapped.read_all()) == []
    assert wrapped.replay_progress() == ReplayProgress(0, 0)
    assert MemoryWAL().replay_progress() is None
    wrapped.close()


def test_extents_of_an_empty_segment_and_a_deleted_one(
        wal_factory: WalFactory, topic_factory: Callable[..., str]) -> None:
    log = wal_factory()
    empty = topic_factory("empty")
    h = log.write(b"x" * 10, 1_000)
    reader = reader_mod.WalReader(log.bootstrap_servers, 20.0)
    try:
        extents = reader.segment_extents([h.topic, empty, f"{empty}-never-made"])
    finally:
        reader.close()
    assert extents == {h.topic: (0, 1), empty: (0, 0), f"{empty}-never-made": (0, 0)}


class _Err:
    def __init__(self, code: int) -> None:
        self._code = code

    def code(self) -> int:
        return self._code


class _Msg:
    def __init__(self, topic: str, error: _Err) -> None:
        self._topic, self._error = topic, error

    def topic(self) -> str:
        return self._topic

    def error(self) -> _Err:
        return self._error


class TrimmedHead:
    """A segment whose records 0..4 were trimmed by retention: 5..6 remain."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.conf = conf
        self._queue: list[_Msg] = []
        self.paused: list[str] = []

    def assign(self, tps: list[Any]) -> None:
        self._queue = [_Msg(tp.topic, _Err(KafkaError._AUTO_OFFSET_RESET)) for tp in tps]

    def poll(self, timeout: float) -> _Msg | None:
        return self._queue.pop(0) if self._queue else None

    def get_watermark_offsets(self, tp: Any, timeout: float = 0, cached: bool = False
                              ) -> tuple[int, int]:
        assert not cached  # the log start is asked for, as the read falls back to it
        return 5, 7

    def pause(self, tps: list[Any]) -> None:
        self.paused += [tp.topic for tp in tps]

    def close(self) -> None:
        pass


def test_a_trimmed_head_counts_from_the_log_start(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[TrimmedHead] = []

    def factory(conf: dict[str, Any]) -> TrimmedHead:
        made.append(TrimmedHead(conf))
        return made[-1]

    monkeypatch.setattr(reader_mod, "Consumer", factory)
    extents = reader_mod.WalReader("127.0.0.1:1").segment_extents(["seg"])
    assert extents == {"seg": (5, 7)}
    assert made[0].paused == ["seg"]
    assert made[0].conf["queued.max.messages.kbytes"] == 1  # buffers little
