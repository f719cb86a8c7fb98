"""``walstream package --out PATH``: the environment executors run in, as one archive.

Executors run receivers, block reads and direct-stream reads in Python workers:
they need this project and its native dependencies (confluent-kafka, grpcio,
fastavro, and pyarrow for Spark's Python data source reader) where no copy of
the repository or the driver's virtualenv exists.
PySpark ships such an environment with ``--archives env.tar.gz#environment`` and
``spark.pyspark.python=./environment/bin/python``; this builds the archive.

How, and what the archive holds:

1. A new virtualenv of the running interpreter, in a temporary directory.
2. The executors' dependencies and everything they require, at the versions
   installed here (so driver and executors agree on the wire and the WAL
   format), installed by pip as that exact list.
3. This project's packages (``wal``, ``receiver``, ``driver``, ``checkpoint``,
   ``structured``, ``walstream``), copied from where they are imported, so an
   editable install packs what the driver runs: their Python sources only (no
   checkpoint, data or other file that landed in a package folder, and not the
   test kit).
4. ``venv-pack`` writes the virtualenv as a relocatable ``.tar.gz``.

Not in it: PySpark itself (each executor has Spark, whose Python part its
launcher puts on the workers' path) and the Python interpreter (venv-pack links
``bin/python`` to ``python_prefix``, the interpreter's installation, which must
exist at that path on every worker host: a Python 3.11 installed there).
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

from walstream.errors import PackageError

log = logging.getLogger(__name__)

#: What executors import beyond the standard library and PySpark: ours, and pyarrow,
#: which Spark's own Python data source reader (``format("walstream")``'s block
#: reads run in it) imports on the executors.
EXECUTOR_DISTRIBUTIONS = ("confluent-kafka", "fastavro", "grpcio", "fsspec", "pyarrow")
PACKAGES = ("walstream",)  # its linked folders are copied as the folders they link to
#: Bounds the pip install (wheels usually come from pip's cache).
PIP_TIMEOUT_S = 900


def pinned_requirements() -> list[str]:
    """``name==version`` of each executor dependency and of what it requires
    (transitively, extras left out), as installed here."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins: dict[str, str] = {}
    todo = list(EXECUTOR_DISTRIBUTIONS)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in pins:
            continue
        try:
            pins[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError as exc:
            raise PackageError(f"{name} is not installed here: run `make setup`") from exc
        for line in importlib.metadata.requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


def _site_packages(env: Path) -> Path:
    found = sorted(env.glob("lib/python*/site-packages"))
    if len(found) != 1:
        raise PackageError(f"no single site-packages under {env}: {found}")
    return found[0]


def _sources_only(directory: str, names: list[str]) -> set[str]:
    """What :func:`_copy_project` leaves out of a package folder: everything but
    Python sources and sub-packages, so that a checkpoint, data or a repository's
    metadata that landed inside a package folder never ships; and the test kit."""
    where = Path(directory)
    return {n for n in names
            if n in ("__pycache__", "testing")
            or ((where / n).is_dir() and not (where / n / "__init__.py").is_file())
            or ((where / n).is_file() and not n.endswith(".py"))}


def _copy_project(site: Path) -> None:
    import importlib

    for name in PACKAGES:
        source = Path(importlib.import_module(name).__file__ or "").parent
        shutil.copytree(source, site / name, ignore=_sources_only)


def _link_python(env: Path, python_prefix: str) -> None:
    """Point the virtualenv's interpreter at ``python_prefix``'s (the path workers
    have), rather than letting venv-pack rewrite links: its rewrite is a prefix
    substitution that mangles ``bin/python3.11``."""
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    target = Path(python_prefix) / "bin" / name
    for link in env.glob("bin/python*"):
        if link.is_symlink():
            link.unlink()
            link.symlink_to(target if link.name == name else name)
    cfg = env / "pyvenv.cfg"
    lines = [f"home = {target.parent}" if line.startswith("home =") else line
             for line in cfg.read_text().splitlines()]
    cfg.write_text("\n".join(lines) + "\n")


def build(out: Path, python_prefix: str | None = None) -> Path:
    """Steps 1-4; returns ``out``, a ``.tar.gz`` executors unpack as ``environment``."""
    try:
        import venv_pack  # type: ignore[import-untyped]
    except ImportError as exc:
        raise PackageError("venv-pack is not installed: run `make setup`") from exc
    if not str(out).endswith(".tar.gz"):
        raise PackageError(f"{out}: the archive's name must end in .tar.gz")
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="walstream-package-") as tmp:
        env = Path(tmp) / "environment"
        venv.EnvBuilder(with_pip=True, symlinks=True).create(env)          # 1
        pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet",
               "--disable-pip-version-check", "--no-deps", *pinned_requirements()]
        try:
            done = subprocess.run(pip, capture_output=True, text=True,    # 2
                                  timeout=PIP_TIMEOUT_S, env={**os.environ, "PIP_USER": "0"})
        except subprocess.TimeoutExpired as exc:
            raise PackageError(f"pip did not finish in {PIP_TIMEOUT_S} s") from exc
        if done.returncode != 0:
            raise PackageError(f"pip could not install the executors' dependencies:\n"
                               f"{done.stderr[-2000:]}")
        _copy_project(_site_packages(env))                                  # 3
        _link_python(env, python_prefix or sys.base_prefix)
        tmp_out = out.with_name(out.name + ".partial")
        venv_pack.pack(prefix=str(env), output=str(tmp_out), format="tar.gz",  # 4
                       force=True,
                       filters=[("exclude", "*/site-packages/pip/*"),
                                ("exclude", "*/site-packages/setuptools/*"),
                                ("exclude", "*/__pycache__/*")])
        os.chmod(tmp_out, 0o644)  # no secret in it; Spark may read it as another user
        os.replace(tmp_out, out)  # a half-written archive never has the final name
    log.info("executor environment written to %s", out)
    return out
