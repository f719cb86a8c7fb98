"""Local checkpoint directories are private: created 0700, files 0600, whatever the
umask; a directory another user owns or anyone may write is refused, for writing
and for reading (a checkpoint holds the conf, secrets included, and a pickled graph
that a restart executes)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.checkpoint.helpers import make_data
from walstream.checkpoint.errors import CheckpointError, UnsafeCheckpointDirError
from walstream.checkpoint.files import read_latest, write_checkpoint
from walstream.checkpoint.storage import prepare_directory
from walstream.checkpoint.writer import CheckpointWriter
from walstream.driver.dstream.streaming_context import StreamingContext

OTHER_UID = 65534  # nobody


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def permissive_umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_checkpoint_directory_is_created_0700_and_files_0600(
        permissive_umask: int, tmp_path: Path) -> None:
    cp = tmp_path / "app" / "cp"
    final = write_checkpoint(cp, make_data(1000))
    assert _mode(cp) == 0o700
    assert _mode(final) == 0o600


def test_checkpoint_writer_files_are_0600(permissive_umask: int, tmp_path: Path) -> None:
    cp = tmp_path / "cp"
    errors: list[BaseException] = []
    writer = CheckpointWriter(cp, on_error=errors.append)
    try:
        writer.write(make_data(1000))
        writer.write(make_data(2000))
    finally:
        writer.stop()
    assert errors == []
    assert _mode(cp) == 0o700
    names = sorted(os.listdir(cp))
    assert names == ["checkpoint-0000000001000", "checkpoint-0000000002000"]
    assert [_mode(cp / n) for n in names] == [0o600, 0o600]


def test_a_stale_world_readable_temp_file_does_not_widen_the_checkpoint(
        permissive_umask: int, tmp_path: Path) -> None:
    """A temp file left by a crash (or planted) with a wide mode is rewritten 0600."""
    cp = tmp_path / "cp"
    prepare_directory(cp)
    tmp = cp / ".checkpoint-0000000001000.tmp"
    tmp.write_bytes(b"old")
    os.chmod(tmp, 0o666)
    assert _mode(write_checkpoint(cp, make_data(1000))) == 0o600


class _RecordingSparkContext:
    """What StreamingContext.checkpoint touches of a SparkContext."""

    def __init__(self) -> None:
        self.checkpoint_dir: str | None = None

    def setCheckpointDir(self, directory: str) -> None:  # noqa: N802
        self.checkpoint_dir = directory


def test_streaming_context_checkpoint_creates_dir_and_state_rdd_dir_0700(
        permissive_umask: int, tmp_path: Path) -> None:
    """Spark's setCheckpointDir would create both with Hadoop's default 0755."""
    sc = _RecordingSparkContext()
    cp = tmp_path / "cp"
    StreamingContext(sc, 1).checkpoint(str(cp))
    assert sc.checkpoint_dir == str(cp / "rdds")
    assert _mode(cp) == 0o700
    assert _mode(cp / "rdds") == 0o700


def _owned_by_another_user(tmp_path: Path) -> Path:
    cp = tmp_path / "theirs"
    write_checkpoint(cp, make_data(1000))
    os.chown(cp, OTHER_UID, OTHER_UID)
    return cp


def _world_writable(tmp_path: Path) -> Path:
    cp = tmp_path / "open"
    write_checkpoint(cp, make_data(1000))
    os.chmod(cp, 0o777)
    return cp


UNSAFE = {"another-users": (_owned_by_another_user, "owned by uid 65534"),
          "world-writable": (_world_writable, "world-writable")}


@pytest.mark.parametrize("kind", sorted(UNSAFE))
def test_unsafe_checkpoint_directory_is_refused_for_writing(kind: str, tmp_path: Path) -> None:
    make, why = UNSAFE[kind]
    cp = make(tmp_path)
    with pytest.raises(UnsafeCheckpointDirError) as info:
        write_checkpoint(cp, make_data(2000))
    assert str(cp) in str(info.value) and why in str(info.value)
    assert not (cp / "checkpoint-0000000002000").exists()
    with pytest.raises(UnsafeCheckpointDirError):
        prepare_directory(cp)
    with pytest.raises(UnsafeCheckpointDirError):
        StreamingContext(_RecordingSparkContext(), 1).checkpoint(str(cp))


@pytest.mark.parametrize("kind", sorted(UNSAFE))
def test_unsafe_checkpoint_directory_is_refused_for_reading(kind: str, tmp_path: Path) -> None:
    """Its pickled graph would run in the restarted driver: never read it."""
    make, why = UNSAFE[kind]
    cp = make(tmp_path)
    with pytest.raises(UnsafeCheckpointDirError, match=why):
        read_latest(cp)

    def setup() -> Any:
        raise AssertionError("setup must not run over a refused directory")

    with pytest.raises(CheckpointError, match=why):
        StreamingContext.getOrCreate(str(cp), setup)


def test_unsafe_state_rdd_directory_is_refused(tmp_path: Path) -> None:
    cp = tmp_path / "cp"
    prepare_directory(cp)
    os.chmod(cp / "rdds", 0o777)
    with pytest.raises(UnsafeCheckpointDirError, match="rdds"):
        prepare_directory(cp)
