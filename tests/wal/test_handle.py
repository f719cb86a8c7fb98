from __future__ import annotations

import pytest

from walstream.errors import CorruptDataError
from walstream.wal.handle import RecordHandle


def test_handle_is_frozen_comparable_and_round_trips() -> None:
    h = RecordHandle("t", 0, 5, 2)
    assert RecordHandle.from_dict(h.to_dict()) == h
    assert RecordHandle("t", 0, 4) < h
    with pytest.raises(AttributeError):
        h.offset = 3  # type: ignore[misc]
    assert RecordHandle("t", 0, 5, 2, 3).group() == h


def test_invalid_handles_are_refused() -> None:
    with pytest.raises(CorruptDataError):
        RecordHandle("", 0, 0)
    with pytest.raises(CorruptDataError):
        RecordHandle.from_dict({"topic": "t"})
