"""The docs as a path: a README a user reads in one go, and links that lead somewhere.

README.md stays at most 300 lines (what it is, the two commands, and each topic in a
few lines with a link); every relative link in README.md and docs/ names a file of
the repository, and every ``#anchor`` into a Markdown file names one of its headings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_the_readme_is_a_path_not_a_reference() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    bad = []
    for target in _LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve()
        if not file.exists():
            bad.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md":
            headings = re.findall(r"(?m)^#+ (.+)$", file.read_text(encoding="utf-8"))
            if anchor not in {_anchor(h) for h in headings}:
                bad.append(f"{target}: no heading with that anchor")
    assert not bad, "\n".join(bad)
