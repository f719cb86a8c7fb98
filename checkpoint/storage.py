"""Where checkpoint files live: a local directory through the OS, or a URL
(``s3://bucket/app``, ``gs://``, ``hdfs://``, ``memory://`` ...) through fsspec with
the filesystem's own package installed (s3fs, gcsfs, ...).

A file is published atomically (:func:`write_file`): a temp file ``.<name>.tmp``,
fsynced (one whole-object write on fsspec, which object stores publish
atomically), then renamed (``mv`` on fsspec), then (locally) the directory fsynced.
A crash before the rename changes no file of that name and leaves no temp file
that a reader would take.

Local directories are private: created 0700 (and ``<dir>/rdds``, the state RDDs'
directory, by :func:`prepare_directory`), files 0600 whatever the umask, since a
checkpoint holds the whole Spark conf (Kafka passwords included) and a pickled
graph that a restart executes. A directory another user owns or anyone may write
is refused for writing and for reading (:func:`check_private`).
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from walstream.checkpoint.errors import CheckpointWriteError, UnsafeCheckpointDirError
from walstream.killpoints import kill_point


def is_url(directory: str | Path) -> bool:
    return isinstance(directory, str) and "://" in directory and \
        not directory.startswith("file://")


def fs_of(url: str) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:  # pragma: no cover - a dependency of ours
        raise CheckpointWriteError(f"checkpoint directory {url}: fsspec is needed") from exc
    try:
        fs, path = fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise CheckpointWriteError(
            f"checkpoint directory {url}: no filesystem for it ({exc}); install the "
            "fsspec implementation for that scheme (s3fs, gcsfs, ...)") from exc
    return fs, str(path).rstrip("/")


def list_names(directory: str | Path) -> list[str]:
    """The names in ``directory``, [] when it does not exist."""
    if is_url(directory):
        fs, root = fs_of(str(directory).rstrip("/"))
        try:
            return [str(p).rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)]
        except FileNotFoundError:
            return []
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def child(directory: str | Path, name: str) -> Any:
    if is_url(directory):
        return f"{str(directory).rstrip('/')}/{name}"
    return Path(directory) / name


def write_file(directory: str | Path, name: str, payload: bytes,
                before_publish: Callable[[], None] | None = None,
                mid_write: str | None = None) -> Any:
    """Publish ``payload`` as ``directory/name`` atomically: a temp file ``.<name>.tmp``
    (0600 locally, fsynced; one whole-object write on fsspec), ``before_publish()``,
    the rename, then (locally) an fsync of the directory. A failure or crash before
    the rename leaves no file of that name changed and no temp file behind.
    ``mid_write`` names the kill point reached halfway through the temp file."""
    if is_url(directory):
        url = str(directory).rstrip("/")
        fs, root = fs_of(url)
        fs.makedirs(root, exist_ok=True)
        remote_tmp, remote_final = f"{root}/.{name}.tmp", f"{root}/{name}"
        if mid_write is not None:
            kill_point(mid_write)
        try:
            fs.pipe_file(remote_tmp, payload)
            if before_publish is not None:
                before_publish()
            fs.mv(remote_tmp, remote_final)
        except BaseException:
            with contextlib.suppress(Exception):
                fs.rm(remote_tmp)
            raise
        return f"{url}/{name}"
    directory = Path(directory)
    private_dir(directory)
    path, tmp = directory / name, directory / f".{name}.tmp"
    try:
        # 0600 whatever the umask, also over a stale temp file of a wider mode; the
        # rename keeps the mode. Never through a symlink.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with open(fd, "wb") as f:
            os.fchmod(fd, 0o600)
            half = len(payload) // 2
            f.write(payload[:half])
            f.flush()
            if mid_write is not None:
                kill_point(mid_write)
            f.write(payload[half:])
            f.flush()
            os.fsync(f.fileno())
        if before_publish is not None:
            before_publish()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)
    return path


def fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove(path: Any) -> None:
    if isinstance(path, str):
        fs, p = fs_of(path)
        with contextlib.suppress(FileNotFoundError):
            fs.rm(p)
    else:
        Path(path).unlink(missing_ok=True)


def read_bytes(path: Any) -> bytes:
    if isinstance(path, str):
        fs, p = fs_of(path)
        return bytes(fs.cat_file(p))
    return Path(path).read_bytes()


STATE_RDD_SUBDIR = "rdds"


def check_private(path: Path) -> None:
    """Refuse a directory another user owns or anyone may write: they could read
    the conf's secrets or plant a checkpoint whose pickled graph a restart runs."""
    try:
        st = os.stat(path)  # a symlink is judged by what it points to
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeCheckpointDirError(f"checkpoint directory {path} is not a directory")
    if st.st_uid != os.geteuid():
        raise UnsafeCheckpointDirError(
            f"checkpoint directory {path} is owned by uid {st.st_uid}, not by this user "
            f"(uid {os.geteuid()}): its checkpoints hold the Spark conf and code a restart "
            "runs; use a directory of your own")
    if st.st_mode & stat.S_IWOTH:
        raise UnsafeCheckpointDirError(
            f"checkpoint directory {path} is world-writable (mode "
            f"{stat.S_IMODE(st.st_mode):04o}): anyone could plant a checkpoint a restart "
            f"would run; chmod it (e.g. 0700) or use another directory")


def private_dir(path: Path) -> None:
    """``path`` exists, ours and not world-writable; created 0700 when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # the umask may have taken bits away; ours, just made
    except FileExistsError:
        pass
    check_private(path)


def prepare_directory(directory: str | Path) -> None:
    """Make a local checkpoint directory and its state-RDD subdirectory ``rdds``
    ready before anything writes there: created 0700 when missing, refused with
    :class:`UnsafeCheckpointDirError` when another user owns either or anyone may
    write it. Spark's ``setCheckpointDir`` would create them with Hadoop's default
    0755, so this runs first. A URL directory is left to its filesystem."""
    if is_url(directory):
        return
    directory = Path(directory)
    private_dir(directory)
    private_dir(directory / STATE_RDD_SUBDIR)
