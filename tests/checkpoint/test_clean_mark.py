"""Never fall back past a WAL cleanup: a checkpoint that cannot be restored is
replaced by an older one only when no cleanup ran after that older one (the clean
mark); a transient read error is retried, not taken for a damaged file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.checkpoint.helpers import make_data
from walstream.checkpoint import files
from walstream.checkpoint.entries import checkpoint_name
from walstream.checkpoint.errors import (
    CheckpointError,
    CheckpointFallbackError,
    CorruptCheckpointError,
)
from walstream.checkpoint.files import (
    read_clean_mark,
    read_latest,
    write_checkpoint,
    write_clean_mark,
)


def _damage(path: Any) -> None:
    Path(path).write_bytes(b"not a checkpoint\n" * 10)


def test_a_damaged_newest_checkpoint_after_a_cleanup_is_an_error_naming_it(
        tmp_path: Path) -> None:
    write_checkpoint(tmp_path, make_data(1000))
    write_checkpoint(tmp_path, make_data(2000))
    newest = write_checkpoint(tmp_path, make_data(3000))
    write_clean_mark(tmp_path, 3000)  # the cleanup after 3000 may have deleted 2000's data
    _damage(newest)
    with pytest.raises(CheckpointFallbackError, match=str(newest)) as info:
        read_latest(tmp_path)
    assert isinstance(info.value, CheckpointError) and "nothing was restored" in str(info.value)


def test_a_fallback_to_a_checkpoint_no_cleanup_passed_is_taken(tmp_path: Path) -> None:
    """A crash after checkpoint 3000 was written and before its cleanup (no mark for
    it): the damaged 3000 falls back to 2000, whose cleanup is the newest mark."""
    write_checkpoint(tmp_path, make_data(1000))
    write_checkpoint(tmp_path, make_data(2000))
    write_clean_mark(tmp_path, 2000)
    _damage(write_checkpoint(tmp_path, make_data(3000)))
    assert read_latest(tmp_path) == make_data(2000)
    assert read_clean_mark(tmp_path) == 2000


def test_every_checkpoint_damaged_after_a_cleanup_is_an_error_not_an_empty_start(
        tmp_path: Path) -> None:
    _damage(write_checkpoint(tmp_path, make_data(1000)))
    write_clean_mark(tmp_path, 1000)
    with pytest.raises(CheckpointFallbackError, match="starting empty"):
        read_latest(tmp_path)


def test_an_unreadable_entry_after_a_cleanup_is_an_error(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, make_data(1000))
    write_clean_mark(tmp_path, 5000)
    (tmp_path / Path(str(checkpoint_name(5000))).name).mkdir()  # cannot be read
    with pytest.raises(CheckpointFallbackError):
        read_latest(tmp_path)


def test_a_transient_read_error_is_retried_not_fallen_back_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint(tmp_path, make_data(1000))
    newest = write_checkpoint(tmp_path, make_data(2000))
    monkeypatch.setattr(files, "READ_BACKOFF_S", 0.01)
    real_read, failures = files.read_bytes, []

    def flaky(path: Any) -> bytes:
        if str(path) == str(newest) and len(failures) < files.READ_TRIES - 1:
            failures.append(path)
            raise OSError(5, "Input/output error")
        return real_read(path)

    monkeypatch.setattr(files, "read_bytes", flaky)
    assert read_latest(tmp_path) == make_data(2000)
    assert len(failures) == files.READ_TRIES - 1


def test_a_persistent_read_error_counts_as_unusable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint(tmp_path, make_data(1000))
    newest = write_checkpoint(tmp_path, make_data(2000))
    write_clean_mark(tmp_path, 2000)
    monkeypatch.setattr(files, "READ_BACKOFF_S", 0.01)
    real_read = files.read_bytes

    def broken(path: Any) -> bytes:
        if str(path) == str(newest):
            raise OSError(5, "Input/output error")
        return real_read(path)

    monkeypatch.setattr(files, "read_bytes", broken)
    with pytest.raises(CheckpointFallbackError, match=str(newest)):
        read_latest(tmp_path)


def test_a_damaged_mark_is_an_error(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, make_data(1000))
    write_clean_mark(tmp_path, 1000)
    (tmp_path / "clean-mark").write_bytes(b"garbage")
    with pytest.raises(CorruptCheckpointError, match="clean mark"):
        read_latest(tmp_path)
