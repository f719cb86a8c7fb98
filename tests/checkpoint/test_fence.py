"""Checkpoint fences (issue 29, hot standby): the epoch cut in the checkpoint directory.

A checkpoint of epoch x is read only if every fence of an epoch y > x lists it with
its content; writers below the highest fence refuse; retention never deletes the
checkpoint the reader would return, nor a fence still needed.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tests.checkpoint.helpers import make_data
from walstream.checkpoint import fence_files, files
from walstream.checkpoint.data import CODEC, CheckpointData
from walstream.checkpoint.entries import (
    CheckpointEntry,
    checkpoint_entries,
    checkpoint_files,
    checkpoint_name,
)
from walstream.checkpoint.errors import (
    CheckpointError,
    CheckpointFencedError,
    CheckpointWriteError,
    CorruptFenceError,
)
from walstream.checkpoint.fence import Fence, identity
from walstream.checkpoint.fence_files import fence_name, highest_fence, write_fence
from walstream.checkpoint.files import read_latest, write_checkpoint
from walstream.checkpoint.writer import CheckpointWriter


def _ck(t: int, epoch: int = 0, **kw: Any) -> CheckpointData:
    return make_data(t, epoch=epoch, **kw)


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _fence(directory: Path, epoch: int) -> Fence:
    path = directory / fence_name(epoch)
    return Fence.decode(path.read_bytes(), str(path))


def _latest(directory: Any) -> tuple[int, int] | None:
    data = read_latest(directory)
    return None if data is None else (data.checkpoint_time_ms, data.epoch)


# -- names -------------------------------------------------------------------------


def test_epoch_0_keeps_the_old_name_and_others_carry_their_epoch(tmp_path: Path) -> None:
    assert checkpoint_name(3000) == "checkpoint-0000000003000"
    assert checkpoint_name(3000, 2) == "checkpoint-0000000003000-e2"
    write_checkpoint(tmp_path, _ck(3000))
    write_checkpoint(tmp_path, _ck(3000, 2))
    write_checkpoint(tmp_path, _ck(2000, 1))
    # A fenced driver's file of the same batch time can never replace a newer one's.
    assert [(e.time_ms, e.epoch) for e in checkpoint_entries(tmp_path)] == \
        [(3000, 2), (3000, 0), (2000, 1)]
    assert [t for t, _ in checkpoint_files(tmp_path)] == [3000, 3000, 2000]
    assert _latest(tmp_path) == (3000, 2)


def test_a_file_whose_epoch_disagrees_with_its_name_is_skipped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_checkpoint(tmp_path, _ck(1000, 1))
    (tmp_path / checkpoint_name(2000, 1)).write_bytes(_ck(2000, 0).encode())
    with caplog.at_level(logging.WARNING, logger="walstream.checkpoint.files"):
        assert _latest(tmp_path) == (1000, 1)
    assert any("epoch 0, not its name's" in r.getMessage() for r in caplog.records)


# -- the fence's content -----------------------------------------------------------


def test_the_fence_lists_exactly_the_older_checkpoints_present(tmp_path: Path) -> None:
    old0 = write_checkpoint(tmp_path, _ck(1000, 0))
    old1 = write_checkpoint(tmp_path, _ck(2000, 1))
    write_checkpoint(tmp_path, _ck(3000, 2))  # its own epoch: not judged, not listed
    write_checkpoint(tmp_path, _ck(4000, 3))  # a newer epoch: not judged either
    (tmp_path / "notes.txt").write_text("foreign")
    (tmp_path / ".checkpoint-0000000005000-e1.tmp").write_bytes(b"torn")
    path = write_fence(tmp_path, 2)
    assert path == tmp_path / "fence-e2"
    fence = _fence(tmp_path, 2)
    assert fence.epoch == 2
    assert dict(fence.listed) == {old0.name: identity(old0.read_bytes()),
                                  old1.name: identity(old1.read_bytes())}
    assert "fence-e2.pending" not in _names(tmp_path)
    assert highest_fence(tmp_path) == 2


def test_the_fence_is_private_and_written_through_a_temp_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = os.umask(0o000)
    try:
        write_checkpoint(tmp_path / "cp", _ck(1000, 1))
        renames: list[tuple[str, str]] = []
        real = os.replace

        def spy(src: Any, dst: Any) -> None:
            renames.append((Path(src).name, Path(dst).name))
            real(src, dst)

        monkeypatch.setattr(os, "replace", spy)
        path = write_fence(tmp_path / "cp", 2)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert renames == [(".fence-e2.pending.tmp", "fence-e2.pending"),
                       (".fence-e2.tmp", "fence-e2")]


def test_older_checkpoints_are_listed_only_once_the_pending_fence_stops_writers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every checkpoint a fenced writer went on to clean after is in the list: the
    list is taken after the pending marker already refuses older writers."""
    write_checkpoint(tmp_path, _ck(1000, 1))
    real = fence_files.checkpoint_entries
    seen: list[int] = []

    def listing(directory: Any) -> list[CheckpointEntry]:
        seen.append(highest_fence(directory))
        return real(directory)

    monkeypatch.setattr(fence_files, "checkpoint_entries", listing)
    write_fence(tmp_path, 2)
    assert seen and seen[0] == 2
    with pytest.raises(CheckpointFencedError):
        write_checkpoint(tmp_path, _ck(2000, 1))


def test_write_fence_again_returns_the_same_fence_never_a_wider_one(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, _ck(1000, 1))
    first = write_fence(tmp_path, 2).read_bytes()
    # A late epoch-1 write lands after the fence (past the writer's check).
    (tmp_path / checkpoint_name(2000, 1)).write_bytes(_ck(2000, 1).encode())
    assert write_fence(tmp_path, 2) == tmp_path / "fence-e2"
    assert (tmp_path / "fence-e2").read_bytes() == first
    assert _latest(tmp_path) == (1000, 1)


def test_write_fence_refuses_when_a_newer_epoch_fenced_already(tmp_path: Path) -> None:
    write_fence(tmp_path, 3)
    with pytest.raises(CheckpointFencedError, match="epoch 3") as info:
        write_fence(tmp_path, 2)
    assert info.value.fence_epoch == 3 and info.value.epoch == 2
    with pytest.raises(CheckpointWriteError, match="at least 1"):
        write_fence(tmp_path, 0)


def test_an_empty_directory_can_be_fenced(tmp_path: Path) -> None:
    write_fence(tmp_path / "new", 1)
    assert dict(_fence(tmp_path / "new", 1).listed) == {}
    assert read_latest(tmp_path / "new") is None


# -- the reading rule --------------------------------------------------------------


def test_a_zombie_written_after_the_fence_is_ignored_and_the_earlier_one_used(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_checkpoint(tmp_path, _ck(1000, 1))
    write_checkpoint(tmp_path, _ck(2000, 1))
    write_fence(tmp_path, 2)
    # The old leader was paused past its check and publishes afterwards.
    zombie = tmp_path / checkpoint_name(3000, 1)
    zombie.write_bytes(_ck(3000, 1).encode())
    with caplog.at_level(logging.WARNING, logger="walstream.checkpoint.files"):
        assert _latest(tmp_path) == (2000, 1)
        assert _latest(tmp_path) == (2000, 1)  # a second read: no second warning
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert str(zombie) in warnings[0] and str(tmp_path / "fence-e2") in warnings[0]
    # The new leader's first checkpoint wins over everything older.
    write_checkpoint(tmp_path, _ck(2500, 2))
    assert _latest(tmp_path) == (2500, 2)


def test_a_listed_name_rewritten_after_the_fence_is_ignored(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The generator writes a batch's checkpoint twice (generated, completed); a
    fenced driver's second write of a listed name is not the listed file."""
    write_checkpoint(tmp_path, _ck(1000, 1))
    write_checkpoint(tmp_path, _ck(2000, 1, pending_times_ms=(2000,)))
    write_fence(tmp_path, 2)
    (tmp_path / checkpoint_name(2000, 1)).write_bytes(
        _ck(2000, 1, pending_times_ms=()).encode())
    with caplog.at_level(logging.WARNING, logger="walstream.checkpoint.files"):
        assert _latest(tmp_path) == (1000, 1)
    assert any("rewritten after the fence" in r.getMessage() for r in caplog.records)


def test_a_chain_of_epochs_with_zombies_at_every_step(tmp_path: Path) -> None:
    def zombie(t: int, epoch: int) -> None:
        (tmp_path / checkpoint_name(t, epoch)).write_bytes(_ck(t, epoch).encode())

    write_checkpoint(tmp_path, _ck(1000, 1))
    write_fence(tmp_path, 2)
    zombie(2000, 1)  # epoch 1 after fence 2
    assert _latest(tmp_path) == (1000, 1)
    write_checkpoint(tmp_path, _ck(1500, 2))  # its retention deletes the zombie
    assert checkpoint_name(2000, 1) not in _names(tmp_path)
    write_checkpoint(tmp_path, _ck(1600, 2))
    zombie(2000, 1)  # epoch 1 again, still after fence 2
    assert _latest(tmp_path) == (1600, 2)
    write_fence(tmp_path, 3)  # lists the epoch-1 zombie too: fence 2 still rejects it
    assert set(_fence(tmp_path, 3).listed) >= {checkpoint_name(2000, 1),
                                               checkpoint_name(1600, 2)}
    zombie(5000, 2)  # epoch 2 after fence 3
    zombie(6000, 1)  # epoch 1 after both fences
    assert _latest(tmp_path) == (1600, 2)
    write_checkpoint(tmp_path, _ck(1700, 3))
    write_fence(tmp_path, 4)
    zombie(7000, 3)
    zombie(7100, 2)
    zombie(7200, 1)
    assert _latest(tmp_path) == (1700, 3)
    write_checkpoint(tmp_path, _ck(1800, 4))
    assert _latest(tmp_path) == (1800, 4)
    # Every zombie is rejected, whoever reads: with the epoch-4 one gone, epoch 3's.
    (tmp_path / checkpoint_name(1800, 4)).unlink()
    assert _latest(tmp_path) == (1700, 3)


def test_a_fence_newer_than_every_checkpoint_judges_the_highest_written_epoch(
        tmp_path: Path) -> None:
    """Right after a takeover no checkpoint of the new epoch exists yet; the
    previous leader's checkpoints count only as listed."""
    write_checkpoint(tmp_path, _ck(1000, 1))
    write_fence(tmp_path, 2)
    (tmp_path / checkpoint_name(2000, 1)).write_bytes(_ck(2000, 1).encode())
    assert _latest(tmp_path) == (1000, 1)


def test_a_corrupt_eligible_checkpoint_falls_back_as_before(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, _ck(1000, 1))
    newest = write_checkpoint(tmp_path, _ck(2000, 1))
    write_fence(tmp_path, 2)
    newest.write_bytes(newest.read_bytes()[:-1] + b"\x00")  # now also unlisted content
    assert _latest(tmp_path) == (1000, 1)
    write_checkpoint(tmp_path, _ck(3000, 2)).write_bytes(b"garbage")
    assert _latest(tmp_path) == (1000, 1)


# -- corrupt fences ----------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_corrupt_fence_refuses_to_read_older_checkpoints_naming_it(
        tmp_path: Path, damage: str) -> None:
    write_checkpoint(tmp_path, _ck(1000, 1))
    fence = write_fence(tmp_path, 2)
    raw = fence.read_bytes()
    fence.write_bytes({"truncate": raw[:-3], "garbage": b"not a fence" * 5,
                       "empty": b""}[damage])
    with pytest.raises(CorruptFenceError) as info:
        read_latest(tmp_path)
    assert str(fence) in str(info.value) and info.value.path == str(fence)
    assert isinstance(info.value, CheckpointError)
    # The writer's check reads names: a corrupt fence still fences.
    with pytest.raises(CheckpointFencedError):
        write_checkpoint(tmp_path, _ck(2000, 1))


def test_a_corrupt_fence_is_harmless_when_nothing_depends_on_it(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, _ck(1000, 1))
    write_fence(tmp_path, 2).write_bytes(b"broken")
    write_checkpoint(tmp_path, _ck(2000, 2))
    assert _latest(tmp_path) == (2000, 2)  # epoch 2 is not judged by fence 2


def test_a_readable_newer_fence_decides_before_a_corrupt_older_one(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, _ck(1000, 2))
    write_fence(tmp_path, 3)
    (tmp_path / checkpoint_name(2000, 1)).write_bytes(_ck(2000, 1).encode())
    (tmp_path / "fence-e2").write_bytes(b"broken")  # a corrupt fence below fence 3
    # The epoch-1 zombie is rejected by fence 3 whatever fence 2 says; the epoch-2
    # checkpoint is listed by fence 3 and judged by no other fence.
    assert _latest(tmp_path) == (1000, 2)


def test_a_fence_whose_content_names_another_epoch_is_corrupt(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, _ck(1000, 1))
    write_fence(tmp_path, 2)
    os.replace(tmp_path / "fence-e2", tmp_path / "fence-e5")
    with pytest.raises(CorruptFenceError, match="epoch 2, not its name's"):
        read_latest(tmp_path)


# -- writers -----------------------------------------------------------------------


def test_a_writer_below_the_highest_fence_refuses_and_publishes_nothing(
        tmp_path: Path) -> None:
    write_checkpoint(tmp_path, _ck(1000, 1))
    write_fence(tmp_path, 2)
    before = _names(tmp_path)
    with pytest.raises(CheckpointFencedError) as info:
        write_checkpoint(tmp_path, _ck(2000, 1))
    assert info.value.epoch == 1 and info.value.fence_epoch == 2 and info.value.path is None
    assert "not written" in str(info.value)
    assert _names(tmp_path) == before  # no temp file either
    write_checkpoint(tmp_path, _ck(2000, 2))  # the fencing epoch writes
    write_checkpoint(tmp_path, _ck(3000, 3))  # so does a newer one


def test_a_pending_fence_already_refuses_older_writers(tmp_path: Path) -> None:
    """A takeover that died mid-fence leaves the marker: writers stay refused,
    readers ignore it, and fencing again completes."""
    write_checkpoint(tmp_path, _ck(1000, 1))
    (tmp_path / "fence-e2.pending").write_bytes(b"")
    with pytest.raises(CheckpointFencedError):
        write_checkpoint(tmp_path, _ck(2000, 1))
    (tmp_path / checkpoint_name(2000, 1)).write_bytes(_ck(2000, 1).encode())
    assert _latest(tmp_path) == (2000, 1)  # no cut was drawn
    write_fence(tmp_path, 2)
    assert _names(tmp_path) == [checkpoint_name(1000, 1), checkpoint_name(2000, 1),
                                "fence-e2"]
    assert _latest(tmp_path) == (2000, 1)


def test_a_fence_landing_between_the_check_and_the_rename(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The window no check closes: the write lands after the fence, raises so the
    caller cleans nothing, runs no retention, and readers never use it."""
    for t in (1000, 2000):
        write_checkpoint(tmp_path, _ck(t, 1))
    real = os.replace
    fenced = threading.Event()

    def replace_after_a_takeover(src: Any, dst: Any) -> None:
        if Path(dst).name == checkpoint_name(3000, 1) and not fenced.is_set():
            fenced.set()
            write_fence(tmp_path, 2)
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace_after_a_takeover)
    with pytest.raises(CheckpointFencedError) as info:
        write_checkpoint(tmp_path, _ck(3000, 1), keep=1)
    assert info.value.path == str(tmp_path / checkpoint_name(3000, 1))
    assert "nothing is cleaned" in str(info.value)
    # keep=1 did not run: both pre-fence checkpoints are still there.
    assert checkpoint_name(1000, 1) in _names(tmp_path)
    assert _latest(tmp_path) == (2000, 1)


def test_the_background_writer_stamps_its_epoch_and_stops_when_fenced(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    cleaned: list[int] = []
    writer = CheckpointWriter(tmp_path, on_error=errors.append, epoch=1)
    try:
        writer.write(_ck(1000), lambda: cleaned.append(1000))  # epoch 0: stamped 1
        writer.stop()
    finally:
        writer.stop()
    assert _latest(tmp_path) == (1000, 1) and cleaned == [1000] and errors == []

    write_fence(tmp_path, 2)
    writer = CheckpointWriter(tmp_path, on_error=errors.append, epoch=1)
    try:
        writer.write(_ck(2000), lambda: cleaned.append(2000))
        writer.write(_ck(3000, 1), lambda: cleaned.append(3000))
    finally:
        writer.stop()
    assert cleaned == [1000]  # never clean after a fenced checkpoint
    assert len(errors) == 1 and isinstance(errors[0], CheckpointFencedError)
    assert writer.fenced is errors[0] and writer.written == 0
    assert "epoch 2" in str(errors[0]) and "another driver has taken over" in str(errors[0])
    assert [e.time_ms for e in checkpoint_entries(tmp_path)] == [1000]


def test_the_writer_refuses_a_checkpoint_of_another_epoch(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    writer = CheckpointWriter(tmp_path, on_error=errors.append, epoch=2)
    try:
        writer.write(_ck(1000, 3))
    finally:
        writer.stop()
    assert len(errors) == 1 and isinstance(errors[0], CheckpointWriteError)
    assert "epoch 3" in str(errors[0])
    with pytest.raises(CheckpointWriteError, match="negative"):
        CheckpointWriter(tmp_path, epoch=-1)


# -- retention and fence collection ------------------------------------------------


def test_retention_never_deletes_the_newest_eligible_checkpoint(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, _ck(1000, 1))
    write_checkpoint(tmp_path, _ck(2000, 1))
    write_fence(tmp_path, 2)
    for t in (3000, 4000, 5000):  # newer by time, all fenced off
        (tmp_path / checkpoint_name(t, 1)).write_bytes(_ck(t, 1).encode())
    # Epoch 2's first write is older by time than every zombie; keep=1 still keeps it.
    write_checkpoint(tmp_path, _ck(2500, 2), keep=1)
    assert _latest(tmp_path) == (2500, 2)
    assert [e.name for e in checkpoint_entries(tmp_path)] == [checkpoint_name(2500, 2)]


def test_an_eligible_checkpoint_of_a_newer_time_wins_over_a_newer_epoch(
        tmp_path: Path) -> None:
    """Newest by batch time among the eligible, as without fences: a new leader
    re-running a pending batch older than the checkpoint it resumed from writes an
    older time, which must not hide the newer one (nor be what retention keeps)."""
    write_checkpoint(tmp_path, _ck(2000, 1))
    write_fence(tmp_path, 2)
    write_checkpoint(tmp_path, _ck(1500, 2), keep=1)
    assert _latest(tmp_path) == (2000, 1)
    assert [e.name for e in checkpoint_entries(tmp_path)] == [checkpoint_name(2000, 1)]


def test_retention_keeps_the_newest_eligible_of_an_older_epoch(tmp_path: Path) -> None:
    """Before the new leader has a checkpoint of its own, retention run by it (or by
    anyone) keeps what the fence makes eligible."""
    for t in (1000, 2000, 3000):
        write_checkpoint(tmp_path, _ck(t, 1))
    write_fence(tmp_path, 2)
    (tmp_path / checkpoint_name(9000, 1)).write_bytes(_ck(9000, 1).encode())
    files._retain(tmp_path, 2)
    assert [e.time_ms for e in checkpoint_entries(tmp_path)] == [3000, 2000]
    assert _latest(tmp_path) == (3000, 1)


def test_retention_counts_only_eligible_checkpoints(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, _ck(1000, 1))
    write_fence(tmp_path, 2)
    for t in (2000, 3000):
        write_checkpoint(tmp_path, _ck(t, 2), keep=3)
    assert [e.time_ms for e in checkpoint_entries(tmp_path)] == [3000, 2000, 1000]
    write_checkpoint(tmp_path, _ck(4000, 2), keep=3)
    assert [e.time_ms for e in checkpoint_entries(tmp_path)] == [4000, 3000, 2000]


def test_retention_leaves_a_checkpoint_only_a_corrupt_fence_could_judge(
        tmp_path: Path) -> None:
    write_checkpoint(tmp_path, _ck(1000, 1))
    write_fence(tmp_path, 2).write_bytes(b"broken")
    for t in (2000, 3000, 4000):
        write_checkpoint(tmp_path, _ck(t, 2), keep=1)
    assert [e.name for e in checkpoint_entries(tmp_path)] == \
        [checkpoint_name(4000, 2), checkpoint_name(1000, 1)]


def test_old_fences_are_collected_only_when_no_checkpoint_needs_them(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, _ck(1000, 0))
    write_fence(tmp_path, 1)
    write_checkpoint(tmp_path, _ck(2000, 1), keep=5)
    write_fence(tmp_path, 2)
    write_checkpoint(tmp_path, _ck(3000, 2), keep=5)
    # Epoch-0 and epoch-1 checkpoints remain: both fences still judge something.
    assert {"fence-e1", "fence-e2"} <= set(_names(tmp_path))
    write_checkpoint(tmp_path, _ck(4000, 2), keep=2)  # the epoch-0 and -1 ones go
    assert _names(tmp_path) == [checkpoint_name(3000, 2), checkpoint_name(4000, 2),
                                "fence-e2"]  # the highest fence always stays
    # Zombies of any older epoch stay rejected by the highest fence alone.
    (tmp_path / checkpoint_name(9000, 1)).write_bytes(_ck(9000, 1).encode())
    (tmp_path / checkpoint_name(9000)).write_bytes(_ck(9000).encode())
    assert _latest(tmp_path) == (4000, 2)


def test_a_fence_is_kept_while_an_older_checkpoint_it_judges_remains(tmp_path: Path) -> None:
    """Fence 2 rejects an epoch-1 file that fence 3 lists (it was there when fence 3
    was written): collecting fence 2 would admit it."""
    write_checkpoint(tmp_path, _ck(1000, 1))
    write_fence(tmp_path, 2)
    write_checkpoint(tmp_path, _ck(1500, 2))
    write_fence(tmp_path, 3)
    write_checkpoint(tmp_path, _ck(2000, 3), keep=10)
    assert {"fence-e2", "fence-e3"} <= set(_names(tmp_path))
    assert _latest(tmp_path) == (2000, 3)


def test_stale_pending_markers_are_collected(tmp_path: Path) -> None:
    (tmp_path / "fence-e1.pending").write_bytes(b"")  # a takeover that died
    write_fence(tmp_path, 2)
    (tmp_path / "fence-e3.pending").write_bytes(b"")  # one in progress
    write_checkpoint(tmp_path, _ck(1000, 3))
    assert _names(tmp_path) == [checkpoint_name(1000, 3), "fence-e2", "fence-e3.pending"]


# -- fsspec directories ------------------------------------------------------------


@pytest.fixture
def url() -> Iterator[str]:
    base = f"memory://fence-{uuid.uuid4().hex[:8]}"
    yield base
    fs = fsspec.filesystem("memory")
    if fs.exists(base.removeprefix("memory://")):
        fs.rm(base.removeprefix("memory://"), recursive=True)


def test_fences_on_an_fsspec_directory(url: str) -> None:
    fs = fsspec.filesystem("memory")
    root = url.removeprefix("memory://")
    write_checkpoint(url, _ck(1000, 1))
    write_checkpoint(url, _ck(2000, 1))
    assert write_fence(url, 2) == f"{url}/fence-e2"
    fs.pipe_file(f"{root}/{checkpoint_name(3000, 1)}", _ck(3000, 1).encode())  # a zombie
    assert _latest(url) == (2000, 1)
    with pytest.raises(CheckpointFencedError):
        write_checkpoint(url, _ck(4000, 1))
    write_checkpoint(url, _ck(2500, 2), keep=1)
    names = sorted(str(p).rsplit("/", 1)[-1] for p in fs.ls(root, detail=False))
    assert names == [checkpoint_name(2500, 2), "fence-e2"]
    assert _latest(url) == (2500, 2)


def test_a_corrupt_fence_of_the_same_epoch_is_not_rewritten(tmp_path: Path) -> None:
    write_checkpoint(tmp_path, _ck(1000, 1))
    write_fence(tmp_path, 2).write_bytes(b"broken")
    with pytest.raises(CorruptFenceError, match="fence-e2"):
        write_fence(tmp_path, 2)
    assert (tmp_path / "fence-e2").read_bytes() == b"broken"


def test_a_pre_epoch_checkpoint_is_fenced_and_read_as_epoch_0(tmp_path: Path) -> None:
    """The upgrade path: a directory of version-2 checkpoints (no epoch) taken over
    by the first HA leader."""
    data = _ck(1000, graph=b"g")
    datum = {"checkpoint_time_ms": 1000, "written_wall_ms": data.written_wall_ms,
             "app_id": data.app_id, "batch_ms": data.batch_ms, "zero_time_ms": 0,
             "fingerprint": data.fingerprint, "graph_shape": list(data.graph_shape),
             "pending_times_ms": list(data.pending_times_ms),
             "state_rdds": [{"stream": s.stream, "time_ms": s.time_ms, "path": s.path}
                            for s in data.state_rdds],
             "conf": dict(data.conf), "graph": b"g"}
    body = CODEC.encode(datum, version=2)
    (tmp_path / checkpoint_name(1000)).write_bytes(body + zlib.crc32(body).to_bytes(4, "big"))
    write_fence(tmp_path, 1)
    (tmp_path / checkpoint_name(2000)).write_bytes(_ck(2000).encode())  # a late epoch-0 one
    assert read_latest(tmp_path) == data
