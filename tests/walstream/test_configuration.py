"""docs/CONFIGURATION.md is generated from walstream/configuration.py, and that list
names every setting the code reads: it cannot drift either way."""

from __future__ import annotations

import re
from pathlib import Path

from walstream.configuration import SETTINGS, markdown

ROOT = Path(__file__).resolve().parents[2]
# Where settings are read: the product (walstream/ and the folders linked under it),
# not its test kit, whose apps set keys rather than define them.
_KEY = re.compile(r"""["'](spark\.(?:walstream|streaming)\.[A-Za-z.]+"""
                  r"""|spark\.python\.daemon\.module|WALSTREAM_[A-Z_]+)["']""")


def _keys_in_code() -> dict[str, str]:
    found: dict[str, str] = {}
    folders = ("walstream", "wal", "receiver", "driver", "checkpoint")
    paths = {p.resolve() for top in folders for p in (ROOT / top).rglob("*.py")}
    for path in sorted(paths):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("walstream/testing/") or rel == "walstream/configuration.py":
            continue
        for m in _KEY.finditer(path.read_text(encoding="utf-8")):
            found.setdefault(m.group(1), rel)
    return found


def _listed(key: str) -> bool:
    names = [s.name for s in SETTINGS]
    if key in names:
        return True
    # A prefix the code builds keys under (spark.walstream.kafka.<librdkafka key>).
    return key.endswith(".") and any(n.startswith(key) and "<" in n for n in names)


def test_the_page_is_generated_from_the_list() -> None:
    page = (ROOT / "docs" / "CONFIGURATION.md").read_text(encoding="utf-8")
    assert page == markdown(), (
        "docs/CONFIGURATION.md differs from walstream/configuration.py: run "
        "`python -m walstream.configuration > docs/CONFIGURATION.md`")


def test_every_setting_the_code_reads_is_listed() -> None:
    found = _keys_in_code()
    assert "spark.walstream.ha.enabled" in found and "WALSTREAM_HOME" in found, found
    missing = {k: where for k, where in found.items() if not _listed(k)}
    assert not missing, f"settings read in the code but not in walstream/configuration.py: " \
        f"{missing}"


def test_every_listed_setting_is_read_somewhere() -> None:
    found = _keys_in_code()
    env = {"KAFKA_BOOTSTRAP_SERVERS"}  # read through os.environ by its own name
    stale = [s.name for s in SETTINGS
             if s.name not in found and s.name not in env
             and not any(s.name.startswith(k) for k in found if k.endswith("."))]
    assert not stale, f"listed settings no code reads: {stale}"
