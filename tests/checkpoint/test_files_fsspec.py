"""Checkpoint directories given as URLs go through fsspec (here its memory:// filesystem)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import fsspec
import pytest

from tests.checkpoint.helpers import make_data
from walstream.checkpoint.entries import checkpoint_files
from walstream.checkpoint.errors import CheckpointWriteError
from walstream.checkpoint.files import read_latest, write_checkpoint
from walstream.checkpoint.writer import CheckpointWriter
from walstream.testing import wait_until


@pytest.fixture
def url() -> Iterator[str]:
    base = f"memory://ckpt-{uuid.uuid4().hex[:8]}"
    yield base
    fs = fsspec.filesystem("memory")
    if fs.exists(base.removeprefix("memory://")):
        fs.rm(base.removeprefix("memory://"), recursive=True)


def test_write_then_read_the_newest(url: str) -> None:
    for t in (1000, 3000, 2000):  # a late write of an older batch never hides a newer one
        write_checkpoint(url, make_data(t))
    assert [t for t, _ in checkpoint_files(url)] == [3000, 2000, 1000]
    got = read_latest(url)
    assert got is not None and got == make_data(3000)


def test_keeps_the_newest_n_and_leaves_no_temp_files(url: str) -> None:
    for t in range(1000, 16000, 1000):
        write_checkpoint(url, make_data(t), keep=4)
    fs = fsspec.filesystem("memory")
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(url.removeprefix("memory://"),
                                                        detail=False))
    assert names == [f"checkpoint-{t:013d}" for t in (12000, 13000, 14000, 15000)]


def test_corrupt_newest_falls_back_and_foreign_files_are_ignored(url: str) -> None:
    write_checkpoint(url, make_data(1000))
    write_checkpoint(url, make_data(2000))
    fs = fsspec.filesystem("memory")
    root = url.removeprefix("memory://")
    newest = f"{root}/checkpoint-{2000:013d}"
    fs.pipe_file(newest, fs.cat_file(newest)[:-9])  # truncated
    fs.pipe_file(f"{root}/notes.txt", b"not a checkpoint")
    got = read_latest(url)
    assert got is not None and got.checkpoint_time_ms == 1000


def test_missing_directory_reads_as_no_checkpoint(url: str) -> None:
    assert read_latest(url) is None
    assert checkpoint_files(url) == []


def test_background_writer_on_a_url(url: str) -> None:
    done: list[int] = []
    writer = CheckpointWriter(url)
    writer.write(make_data(5000), on_done=lambda: done.append(5000))
    try:
        wait_until(lambda: done, 10, "the background write to finish", poll_s=0.01)
    finally:
        writer.stop()
    assert done == [5000]
    got = read_latest(url)
    assert got is not None and got.checkpoint_time_ms == 5000


def test_unknown_scheme_says_what_to_install() -> None:
    with pytest.raises(CheckpointWriteError, match="install"):
        write_checkpoint("nosuchscheme://bucket/app", make_data(1000))
