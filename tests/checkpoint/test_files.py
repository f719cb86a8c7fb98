"""write_checkpoint / read_latest: atomic files, retention, fsync, fallback, late writes."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from tests.checkpoint.helpers import make_data
from walstream.checkpoint import storage
from walstream.checkpoint.data import CheckpointData
from walstream.checkpoint.entries import checkpoint_files
from walstream.checkpoint.files import read_latest, write_checkpoint


def _name(t: int) -> str:
    return f"checkpoint-{t:013d}"


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


# -- write_checkpoint -------------------------------------------------------------------


def test_write_then_read(tmp_path: Path) -> None:
    data = make_data(3000)
    path = write_checkpoint(tmp_path / "cp", data)
    assert path == tmp_path / "cp" / _name(3000)
    assert CheckpointData.decode(path.read_bytes()) == data
    assert read_latest(tmp_path / "cp") == data
    assert _names(tmp_path / "cp") == [_name(3000)]  # no temp file left behind


def test_write_goes_through_a_temp_file_then_rename(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    real_replace = os.replace

    def spy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        calls.append((Path(src).name, Path(dst).name))
        assert Path(src).exists() and not Path(dst).exists()
        # The temp file is complete before the rename.
        assert CheckpointData.decode(Path(src).read_bytes()) == make_data(4000)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    write_checkpoint(tmp_path, make_data(4000))
    assert calls == [(f".{_name(4000)}.tmp", _name(4000))]


def test_crash_before_rename_keeps_previous_checkpoints(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint(tmp_path, make_data(1000))
    write_checkpoint(tmp_path, make_data(2000))

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device (simulated)")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        write_checkpoint(tmp_path, make_data(3000))
    monkeypatch.undo()

    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == [_name(1000), _name(2000)]
    assert read_latest(tmp_path) == make_data(2000)
    for _, path in checkpoint_files(tmp_path):
        CheckpointData.decode(path.read_bytes())  # every kept file is intact


def test_failed_write_leaves_no_temp_file(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing disk must not pile up partial temp files, one per batch."""
    write_checkpoint(tmp_path, make_data(1000))

    def crash(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device (simulated)")

    monkeypatch.setattr(os, "replace", crash)
    for t in (2000, 3000, 4000):
        with pytest.raises(OSError):
            write_checkpoint(tmp_path, make_data(t))
    assert _names(tmp_path) == [_name(1000)]


def test_crash_mid_write_keeps_previous(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint(tmp_path, make_data(1000))

    def die(name: str) -> None:
        if name == "checkpoint.mid_write":
            raise OSError("died mid-write (simulated)")

    monkeypatch.setattr(storage, "kill_point", die)
    with pytest.raises(OSError, match="mid-write"):
        write_checkpoint(tmp_path, make_data(2000))
    assert [p.name for p in tmp_path.glob("checkpoint-*")] == [_name(1000)]
    assert read_latest(tmp_path) == make_data(1000)


def test_keeps_only_newest(tmp_path: Path) -> None:
    for t in range(1000, 9000, 1000):
        write_checkpoint(tmp_path, make_data(t), keep=3)
        assert len(list(tmp_path.glob("checkpoint-*"))) == min(3, t // 1000)
    assert [t for t, _ in checkpoint_files(tmp_path)] == [8000, 7000, 6000]


def test_default_keeps_ten(tmp_path: Path) -> None:
    for t in range(1000, 16000, 1000):
        write_checkpoint(tmp_path, make_data(t))
    assert [t for t, _ in checkpoint_files(tmp_path)] == list(range(15000, 5000, -1000))


def test_retention_leaves_foreign_files_alone(tmp_path: Path) -> None:
    (tmp_path / "README").write_text("mine")
    (tmp_path / "rdds").mkdir()
    for t in range(1000, 6000, 1000):
        write_checkpoint(tmp_path, make_data(t), keep=2)
    assert _names(tmp_path) == ["README", _name(4000), _name(5000), "rdds"]


def test_fsyncs_the_file_and_the_directory(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync_spy(fd: int) -> None:
        mode = os.fstat(fd).st_mode
        events.append("fsync-dir" if stat.S_ISDIR(mode) else "fsync-file")
        real_fsync(fd)

    def replace_spy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        events.append("rename")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync_spy)
    monkeypatch.setattr(os, "replace", replace_spy)
    write_checkpoint(tmp_path, make_data(1000))
    # The file is durable before it gets its name; the name is durable before we return.
    assert events == ["fsync-file", "rename", "fsync-dir"]


def test_same_time_rewritten_replaces(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, make_data(2000, pending_times_ms=(2000,)))
    write_checkpoint(tmp_path, make_data(2000, pending_times_ms=()))
    assert _names(tmp_path) == [_name(2000)]
    latest = read_latest(tmp_path)
    assert latest is not None and latest.pending_times_ms == ()


# -- read_latest -------------------------------------------------------------------------


def test_read_latest_picks_newest(tmp_path: Path) -> None:
    for t in (1000, 3000, 2000):
        write_checkpoint(tmp_path, make_data(t))
    assert read_latest(tmp_path) == make_data(3000)


def test_missing_or_empty_dir_is_none(tmp_path: Path) -> None:
    assert read_latest(tmp_path / "nope") is None
    assert read_latest(tmp_path) is None
    assert checkpoint_files(tmp_path / "nope") == []


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_corrupt_newest_falls_back_with_warning(tmp_path: Path, damage: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    write_checkpoint(tmp_path, make_data(1000))
    write_checkpoint(tmp_path, make_data(2000))
    newest = write_checkpoint(tmp_path, make_data(3000))
    raw = newest.read_bytes()
    if damage == "truncate":
        newest.write_bytes(raw[: len(raw) // 2])
    elif damage == "flip":
        b = bytearray(raw)
        b[len(b) // 3] ^= 0x40
        newest.write_bytes(bytes(b))
    elif damage == "empty":
        newest.write_bytes(b"")
    else:
        newest.write_bytes(b"not a checkpoint\n" * 10)
    with caplog.at_level(logging.WARNING, logger="walstream.checkpoint.files"):
        assert read_latest(tmp_path) == make_data(2000)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(newest) in warnings[0].getMessage()


def test_all_corrupt_is_none(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for t in (1000, 2000):
        write_checkpoint(tmp_path, make_data(t)).write_bytes(b"x" * 40)
    with caplog.at_level(logging.WARNING, logger="walstream.checkpoint.files"):
        assert read_latest(tmp_path) is None
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_unreadable_newest_falls_back(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An entry that cannot be read at all (here a directory by that name) is skipped."""
    write_checkpoint(tmp_path, make_data(1000))
    (tmp_path / _name(5000)).mkdir()
    with caplog.at_level(logging.WARNING, logger="walstream.checkpoint.files"):
        assert read_latest(tmp_path) == make_data(1000)
    assert _name(5000) in caplog.text


def test_foreign_and_temp_files_are_ignored(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, make_data(1000))
    newer = make_data(9000).encode()
    # A temp file of a newer checkpoint (a crash before the rename), complete or not.
    (tmp_path / f".{_name(9000)}.tmp").write_bytes(newer)
    (tmp_path / f".{_name(8000)}.tmp").write_bytes(newer[:10])
    # Names that only look like checkpoints.
    for name in (f"{_name(7000)}.bak", f"{_name(7000)}.tmp", "checkpoint-7000",
                 "checkpoint-00000000070000", "checkpoint-latest", f"x{_name(7000)}"):
        (tmp_path / name).write_bytes(newer)
    (tmp_path / "rdds").mkdir()
    (tmp_path / "notes.txt").write_text("hello")
    assert [t for t, _ in checkpoint_files(tmp_path)] == [1000]
    assert read_latest(tmp_path) == make_data(1000)


def test_time_disagreeing_with_name_is_skipped(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    write_checkpoint(tmp_path, make_data(1000))
    moved = write_checkpoint(tmp_path, make_data(2000))
    moved.rename(tmp_path / _name(6000))  # holds time 2000 under the name of 6000
    with caplog.at_level(logging.WARNING, logger="walstream.checkpoint.files"):
        assert read_latest(tmp_path) == make_data(1000)
    assert _name(6000) in caplog.text


# -- the late-write race (SPARK-11267 / SPARK-11740) -------------------------------------


def test_late_write_of_older_time_does_not_hide_newer(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, make_data(3000))
    write_checkpoint(tmp_path, make_data(2000))  # a slow completion checkpoint, written late
    latest = read_latest(tmp_path)
    assert latest is not None and latest.checkpoint_time_ms == 3000


def test_retention_never_deletes_newest_on_late_write(tmp_path: Path) -> None:
    for t in (3000, 4000, 5000):
        write_checkpoint(tmp_path, make_data(t), keep=2)
    write_checkpoint(tmp_path, make_data(2000), keep=2)  # late, older than all kept
    times = [t for t, _ in checkpoint_files(tmp_path)]
    assert times == [5000, 4000]
    latest = read_latest(tmp_path)
    assert latest is not None and latest.checkpoint_time_ms == 5000


def test_retention_with_keep_one_keeps_newest_time(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, make_data(3000), keep=1)
    write_checkpoint(tmp_path, make_data(1000), keep=1)
    write_checkpoint(tmp_path, make_data(2000), keep=1)
    assert [t for t, _ in checkpoint_files(tmp_path)] == [3000]
    assert read_latest(tmp_path) == make_data(3000)
