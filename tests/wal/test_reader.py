"""WalReader.read_segment's start: offset 0, and the beginning when the head was trimmed.

Unit level (a stand-in consumer): Tansu cannot trim a log's head (no
delete_records, no retention), which is the case the fallback exists for.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError

from walstream.wal import reader as reader_mod
from walstream.wal.framing import encode_record


class _Err:
    def __init__(self, code: int) -> None:
        self._code = code

    def code(self) -> int:
        return self._code

    def retriable(self) -> bool:
        return False

    def str(self) -> str:
        return f"error {self._code}"


class _Msg:
    def __init__(self, value: bytes | None = None, offset: int = 0,
                 error: _Err | None = None) -> None:
        self._value, self._offset, self._error = value, offset, error

    def error(self) -> _Err | None:
        return self._error

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._offset)


class TrimmedLog:
    """A log whose records 0..4 were trimmed by retention: 5..6 remain."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.assigned: list[int] = []
        self._queue: list[_Msg] = []

    def assign(self, tps: list[Any]) -> None:
        offset = tps[0].offset
        self.assigned.append(offset)
        if offset == 0:
            self._queue = [_Msg(error=_Err(KafkaError._AUTO_OFFSET_RESET))]
        else:
            frames = [encode_record(f"rec-{i}".encode(), 1 << 20)[0] for i in (5, 6)]
            self._queue = [_Msg(frames[0], 5), _Msg(frames[1], 6),
                           _Msg(error=_Err(KafkaError._PARTITION_EOF))]

    def poll(self, timeout: float) -> _Msg | None:
        return self._queue.pop(0) if self._queue else None

    def close(self) -> None:
        pass


def test_a_segment_is_read_from_offset_0_and_a_trimmed_head_falls_back_to_the_beginning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[TrimmedLog] = []

    def factory(conf: dict[str, Any]) -> TrimmedLog:
        made.append(TrimmedLog(conf))
        return made[-1]

    monkeypatch.setattr(reader_mod, "Consumer", factory)
    r = reader_mod.WalReader("127.0.0.1:1")
    got = [(rec, first) for rec, _ts, first, _n in r.read_segment("seg")]
    assert got == [(b"rec-5", 5), (b"rec-6", 6)]
    assert made[0].assigned == [0, OFFSET_BEGINNING]


class ShortWaitHidesRecords:
    """Tansu s3:// while a segment is written: a short-wait Fetch brings nothing."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.short = conf["fetch.wait.max.ms"] < 100
        self._queue: list[_Msg] = []

    def assign(self, tps: list[Any]) -> None:
        if not self.short:
            self._queue = [_Msg(encode_record(b"block-7", 1 << 20)[0], tps[0].offset)]

    def poll(self, timeout: float) -> _Msg | None:
        return self._queue.pop(0) if self._queue else None

    def list_topics(self, timeout: float) -> Any:
        return type("Md", (), {"topics": {"seg": None}})()

    def unassign(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_read_that_a_short_fetch_wait_hides_falls_back_to_the_normal_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from walstream.wal.handle import RecordHandle

    made: list[ShortWaitHidesRecords] = []

    def factory(conf: dict[str, Any]) -> ShortWaitHidesRecords:
        made.append(ShortWaitHidesRecords(conf))
        return made[-1]

    monkeypatch.setattr(reader_mod, "Consumer", factory)
    monkeypatch.setattr(reader_mod, "_SLOW_READ_CLUSTERS", set())
    r = reader_mod.WalReader("s3-tansu:1", timeout_s=10)
    data, _ts = r.read(RecordHandle("seg", 0, 7))
    assert data == b"block-7"
    assert [c.short for c in made] == [True, False]
    # This process now reads that cluster with the normal wait at once.
    r2 = reader_mod.WalReader("s3-tansu:1", timeout_s=10)
    assert r2.read(RecordHandle("seg", 0, 8))[0] == b"block-7"
    assert [c.short for c in made] == [True, False, False]
