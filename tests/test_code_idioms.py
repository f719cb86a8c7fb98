"""Idioms the product code keeps in one form: each package's error classes in its
``errors.py``, and optional capabilities declared on the interface that offers them
(``WriteAheadLog.pipelines_writes``, ``BlockReporter.add_block(figures=)``), not
probed with ``getattr`` or ``inspect.signature``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("wal", "receiver", "driver", "checkpoint", "walstream")
HARNESS = ROOT / "walstream" / "testing"


def _product_modules() -> list[Path]:
    found: list[Path] = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            if top == "walstream" and (path.is_relative_to(HARNESS)
                                       or path.parts[len(ROOT.parts) + 1:][:1]
                                       in (("wal",), ("receiver",), ("driver",),
                                           ("checkpoint",))):
                continue  # the harness, and the linked folders listed once
            found.append(path)
    return found


def _is_error_base(base: ast.expr) -> bool:
    name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
    return name.endswith(("Error", "Exception")) or name in ("Exception", "BaseException")


def test_every_public_error_class_lives_in_its_packages_errors_module() -> None:
    outside = []
    for path in _product_modules():
        if path.name == "errors.py":
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") \
                    and any(_is_error_base(b) for b in node.bases):
                outside.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert outside == [], "error classes outside errors.py: " + ", ".join(outside)


def _probes(tree: ast.AST) -> list[tuple[int, str]]:
    """``getattr(x, "name", None)`` of a method name, and ``inspect.signature(...)``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "signature" \
                and isinstance(func.value, ast.Name) and func.value.id == "inspect":
            found.append((node.lineno, "inspect.signature"))
        if isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) == 3 \
                and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str) \
                and not node.args[1].value.startswith("__"):
            found.append((node.lineno, f"getattr(..., {node.args[1].value!r}, ...)"))
    return found


# Probes of objects the product does not define: a user's function, PySpark's RDDs
# and SparkContext, a user's receiver subclass (which may shadow a method).
ALLOWED = {
    ("driver/dstream/dstream.py", "inspect.signature"),  # a user's function's arity
    ("driver/dstream/graph.py", "getattr(..., '_walstream_state_path', ...)"),  # an RDD
    ("driver/dstream/block_rdd.py", "getattr(..., '_walstream_block_source', ...)"),
    ("driver/python_sockets.py", "getattr(..., '_jsc', ...)"),  # a SparkContext
    ("receiver/source_topics.py", "getattr(..., 'source_topics', ...)"),  # a user's receiver
    # a user's receiver subclass whose __init__ never called Receiver.__init__
    ("receiver/receiver.py", "getattr(..., '_kafka_settings', ...)"),
    ("driver/warm_up.py", "getattr(..., 'master', ...)"),  # a SparkContext
}


def test_no_protocol_of_ours_is_probed() -> None:
    probes = []
    for path in _product_modules():
        rel = str(path.relative_to(ROOT))
        for line, what in _probes(ast.parse(path.read_text())):
            if (rel, what) not in ALLOWED:
                probes.append(f"{rel}:{line}: {what}")
    assert probes == [], "capabilities probed instead of declared: " + "; ".join(probes)
