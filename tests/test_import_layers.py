"""One import root, and the layers between its packages: imports flow one way, and
the executor side loads no driver code.

Every module is imported as ``walstream.<package>``: the repository's top-level
folders ``wal/``, ``receiver/``, ``driver/`` and ``checkpoint/`` are linked under
``walstream/`` (docs/decisions/one-import-root.md), and nothing anywhere (code,
tests, examples, benchmarks, docs) imports them by their bare folder name.

The order, lowest first (a module imports only from its own unit or a lower layer;
two units on one layer import nothing of each other)::

    6  walstream entry: walstream/__init__ (lazy names), cli, packaging, testing/
    5  structured (the Structured Streaming source: engines over the driver's trackers)
    4  driver
    3  receiver
    2  walstream.rpc
    1  wal    checkpoint
    0  walstream core: errors, avro_codec, killpoints, broker, kafka_logging, ...

``walstream.wal`` and ``walstream.receiver`` run on executors and import nothing from ``driver``, at
module level or inside a function; the wire protocol both sides speak
(``walstream.rpc``) imports neither side. ``import walstream.driver`` is cheap: it loads
no PySpark, no gRPC and none of the driver's modules until a name is used.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINKED = ("wal", "receiver", "driver", "checkpoint")  # top-level folders, walstream.<name>
BARE = frozenset({*LINKED, "structured"})  # import names an installed walstream never adds

# Package directory -> packages (under walstream.) none of its modules may import.
FORBIDDEN: dict[str, frozenset[str]] = {
    "wal": frozenset({"driver", "receiver", "checkpoint"}),
    "receiver": frozenset({"driver", "checkpoint"}),
    "checkpoint": frozenset({"driver", "receiver", "wal"}),
    "walstream/rpc": frozenset({"driver", "receiver", "checkpoint"}),
}


def _sources(top: str) -> list[Path]:
    """The Python files under ``top``, not through the links under walstream/ (each
    file once, under its folder)."""
    found = []
    for path in sorted((ROOT / top).rglob("*.py")):
        rel = path.relative_to(ROOT)
        if any((ROOT / Path(*rel.parts[:i])).is_symlink() for i in range(1, len(rel.parts))):
            continue
        if ".venv" in rel.parts or "build" in rel.parts[:1]:
            continue
        found.append(path)
    return found


def _package_of(name: str) -> str | None:
    """``driver`` for ``walstream.driver.x``; None for a module outside those packages."""
    parts = name.split(".")
    return parts[1] if parts[0] == "walstream" and len(parts) > 1 else None


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every absolute module name ``path`` imports, at any depth (functions too)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


# walstream/worker_daemon.py is core: it names the modules a forked Python worker
# preloads as strings and imports none of them itself.
ENTRY = frozenset({"walstream/__init__.py", "walstream/cli.py", "walstream/packaging.py"})


def _unit_of_file(rel: str) -> tuple[str, int]:
    """The layer unit a file of the repository belongs to, and its rank."""
    if rel in ENTRY or rel.startswith("walstream/testing/"):
        return "walstream entry", 6
    if rel.startswith("walstream/rpc/"):
        return "walstream.rpc", 2
    if rel.startswith("walstream/structured/"):
        return "structured", 5
    top = rel.split("/")[0]
    return {"walstream": ("walstream core", 0), "wal": ("wal", 1),
            "checkpoint": ("checkpoint", 1), "receiver": ("receiver", 3),
            "driver": ("driver", 4)}[top]


def _unit_of_module(name: str) -> tuple[str, int] | None:
    """The layer unit of an imported module name; None when it is not ours."""
    parts = name.split(".")
    if parts[0] != "walstream":
        return None
    if len(parts) > 1 and parts[1] in LINKED:
        parts = parts[1:]  # the folder the link points at
    path = ROOT.joinpath(*parts)
    rel = (f"{'/'.join(parts)}/__init__.py" if path.is_dir() else f"{'/'.join(parts)}.py")
    return _unit_of_file(rel)


def _imports_with_names(path: Path) -> list[tuple[int, str]]:
    """Like :func:`_imported_modules`, with ``from pkg import mod`` read as ``pkg.mod``
    when ``mod`` is a module of ours."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                sub = ROOT.joinpath(*node.module.split("."), alias.name)
                is_module = sub.is_dir() or sub.with_suffix(".py").exists()
                found.append((node.lineno, f"{node.module}.{alias.name}" if is_module
                              else node.module))
    return found


def test_imports_between_packages_flow_one_way() -> None:
    bad, edges = [], set()
    for top in ("walstream", *LINKED):
        for path in _sources(top):
            rel = path.relative_to(ROOT).as_posix()
            unit, rank = _unit_of_file(rel)
            for line, name in _imports_with_names(path):
                target = _unit_of_module(name)
                if target is None or target[0] == unit:
                    continue
                edges.add((unit, target[0]))
                if target[1] >= rank:
                    bad.append(f"{rel}:{line}: {unit} (layer {rank}) imports {name} "
                               f"({target[0]}, layer {target[1]})")
    assert not bad, "\n".join(bad)
    # The walk saw the imports it checks: the driver builds on every lower layer.
    assert {("driver", u) for u in ("checkpoint", "receiver", "walstream.rpc", "wal",
                                    "walstream core")} <= edges, sorted(edges)


def _run(code: str) -> None:
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_module_of_the_package_imports_a_higher_layer(package: str) -> None:
    files = _sources(package)
    assert files, package
    bad = [f"{path.relative_to(ROOT)}:{line}: import {name}"
           for path in files for line, name in _imported_modules(path)
           if _package_of(name) in FORBIDDEN[package]]
    assert not bad, "\n".join(bad)


def test_nothing_imports_a_package_by_its_bare_folder_name() -> None:
    """``import driver`` would load a second copy of every module (its classes
    distinct from walstream.driver's) where the repository root is on the path, and
    fail where walstream is installed: every import names ``walstream.``."""
    bad = [f"{path.relative_to(ROOT)}:{line}: import {name}"
           for top in ("walstream", *LINKED, "tests", "integration_tests", "examples", "bench",
                       "scripts")
           if (ROOT / top).is_dir()
           for path in _sources(top) for line, name in _imported_modules(path)
           if name.split(".")[0] in BARE]
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
            *sorted((ROOT / "examples").rglob("*.md")), *sorted((ROOT / "bench").glob("*.md"))]
    bare = re.compile(rf"^\s*(?:from|import) (?:{'|'.join(sorted(BARE))})\b", re.M)
    bad += [f"{doc.relative_to(ROOT)}: {m.group(0).strip()}" for doc in docs
            for m in bare.finditer(doc.read_text(encoding="utf-8"))]
    assert not bad, "\n".join(bad)


def test_an_executor_running_a_receiver_or_reading_a_block_loads_no_driver_package() -> None:
    _run("import sys\n"
         "import walstream.receiver.task, walstream.receiver.driver_client\n"
         "import walstream.receiver.supervisor, walstream.wal.kafka_log\n"
         "import walstream.wal.reader, walstream.rpc.messages\n"
         "loaded = [m for m in sys.modules if m.startswith('walstream.driver')]\n"
         "assert not loaded, loaded")


def test_a_task_reading_a_walstream_source_loads_no_driver_package() -> None:
    _run("import sys\n"
         "import walstream.structured.datasource, walstream.structured.rows\n"
         "loaded = [m for m in sys.modules if m.startswith('walstream.driver')]\n"
         "assert not loaded, loaded")


def test_importing_driver_loads_no_spark_no_grpc_and_none_of_its_modules() -> None:
    _run("import sys, walstream.driver\n"
         "heavy = ('pyspark', 'py4j', 'grpc', 'confluent_kafka')\n"
         "loaded = [m for m in sys.modules if m.split('.')[0] in heavy\n"
         "          or m.startswith('walstream.driver.')]\n"
         "assert not loaded, loaded")


def test_driver_public_names_load_on_first_use_and_are_the_defining_modules_objects() -> None:
    import importlib

    import walstream.driver as driver

    for name in driver.__all__:
        defining = importlib.import_module(driver._EXPORTS[name])
        assert getattr(driver, name) is getattr(defining, name)
    assert set(driver.__all__) <= set(dir(driver))
    from walstream.driver import KafkaUtils, StreamingContext

    assert StreamingContext.__module__ == "walstream.driver.dstream.streaming_context"
    assert KafkaUtils.__module__ == "walstream.driver.dstream.kafka_utils"
    with pytest.raises(AttributeError, match="no_such_name"):
        driver.no_such_name  # noqa: B018
