"""Product code's comments state contracts, not history.

A comment or docstring in product code (``wal``, ``receiver``, ``driver``,
``checkpoint``, ``walstream``, ``examples``, ``scripts``) says what is guaranteed
and why; dates and measurements of earlier runs belong in ``bench/`` results or
``docs/decisions/``. The rule is narrow on purpose, so a configured limit or
default ("default 200 ms", "256 MiB record limit") never trips it: no ISO date and
no "measured".
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_DIRS = ("wal", "receiver", "driver", "checkpoint", "walstream", "examples",
                "scripts")
FORBIDDEN = {
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "'measured'": re.compile(r"\bmeasured\b", re.IGNORECASE),
}
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _product_files() -> list[Path]:
    return sorted(p for d in PRODUCT_DIRS for p in (ROOT / d).rglob("*.py"))


def _comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment line and docstring line of ``path``."""
    source = path.read_text(encoding="utf-8")
    found = [(tok.start[0], tok.string)
             for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source, str(path))):
        if not isinstance(node, _DOCUMENTED):
            continue
        doc = ast.get_docstring(node, clean=False)
        if doc is not None:
            first = node.body[0].lineno
            found.extend((first + i, line) for i, line in enumerate(doc.splitlines()))
    return found


def test_product_files_are_found() -> None:
    files = _product_files()
    assert len(files) > 50, files
    # scripts/ may hold no Python; every package and the examples must be scanned.
    assert {f.relative_to(ROOT).parts[0] for f in files} >= set(PRODUCT_DIRS) - {"scripts"}


def test_no_product_comment_or_docstring_carries_a_date_or_a_measurement() -> None:
    bad = [f"{path.relative_to(ROOT)}:{line}: {what}: {text.strip()}"
           for path in _product_files()
           for line, text in _comments_and_docstrings(path)
           for what, pattern in FORBIDDEN.items() if pattern.search(text)]
    assert not bad, ("move dates and measurements to docs/decisions/ or bench/:\n"
                     + "\n".join(bad))


def test_the_rule_catches_what_it_names(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""Module.\n\nMeasured on 2 cores."""\n\n'
                      "def f() -> None:\n"
                      '    """Fine."""\n'
                      "    x = '2026-11-23'  # run of 2026-11-23\n")
    hits = [(line, what) for line, text in _comments_and_docstrings(sample)
            for what, pattern in FORBIDDEN.items() if pattern.search(text)]
    assert hits == [(7, "a date"), (3, "'measured'")]
