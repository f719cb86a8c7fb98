"""The status page in a real browser while a pipeline runs.

Debian's chromium, headless, loads ``/`` of a running app twice, a few batches
apart: the page fetches ``/api/status`` itself and renders it, so the batch rows
in its DOM (``--dump-dom`` after the page's scripts ran) must appear and grow,
and a receiver row must name the running receiver. The page must load nothing
from elsewhere. A screenshot is saved as the test's artefact
(``build/test-artifacts/status-page.png``; with ``WALSTREAM_UPDATE_SCREENSHOT=1``
also ``docs/img/status-page.png``, the README's picture).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from walstream.driver import StreamingContext
from walstream.driver.app_conf import CONF_BOOTSTRAP
from walstream.driver.spark import create_spark_context
from walstream.receiver.rate_receiver import RateGeneratorReceiver
from walstream.testing import wait_until
from walstream.testing.fixtures import KafkaBroker

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[1]
ARTEFACT = ROOT / "build" / "test-artifacts" / "status-page.png"
README_PICTURE = ROOT / "docs" / "img" / "status-page.png"
# What the machine's closed network needs (no background fetches, no sandbox as root).
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars")


def _chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        reason = ("Debian's chromium is not installed (make test installs it when run "
                  "as root with apt)")
        print(f"status page browser test skipped: {reason}")
        pytest.skip(reason)
    return found


def _browse(chromium: str, profile: Path, *args: str) -> str:
    done = subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                           "--virtual-time-budget=4000", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _table(dom: str, table_id: str) -> list[str]:
    """The data rows of the page's table ``table_id`` (the header and the one-cell
    row an empty table shows left out)."""
    found = re.search(rf'<table id="{table_id}">(.*?)</table>', dom, re.S)
    assert found, f"no table {table_id} in the page:\n{dom[:3000]}"
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", found.group(1), re.S)
    return [r for r in rows if "<th" not in r and "colspan" not in r]


@pytest.fixture
def running_app(broker: KafkaBroker, tmp_path: Path) -> Iterator[Any]:
    sc = create_spark_context("status-page", "local[3]", {CONF_BOOTSTRAP: broker.bootstrap})
    ssc = StreamingContext(sc, 0.5)
    try:
        lines = ssc.receiverStream(RateGeneratorReceiver(400.0, seed=7))
        lines.flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b) \
            .foreachRDD(lambda rdd: rdd.count())
        ssc.start()
        yield ssc
    finally:
        ssc.stop(stopSparkContext=False)
        sc.stop()


def test_the_status_page_shows_batches_growing_and_the_receiver(running_app: Any,
                                                                tmp_path: Path) -> None:
    chromium = _chromium()
    server = running_app._engine.status_server
    assert server is not None and server.url, "the app serves no status page"
    completed: list[Any] = []

    def batches() -> int:
        completed[:] = server.snapshot().get("batches", [])
        return len(completed)

    wait_until(lambda: batches() >= 2, 60, "two completed batches", poll_s=0.2,
               ssc=running_app)
    first = _table(_browse(chromium, tmp_path / "p1", "--dump-dom", server.url), "batches")
    assert first, "no batch row on the page"
    seen = len(first)
    wait_until(lambda: batches() >= seen + 3, 60, "three more batches", poll_s=0.2,
               ssc=running_app)
    dom = _browse(chromium, tmp_path / "p2", "--dump-dom", server.url)
    later = _table(dom, "batches")
    assert len(later) > len(first), (first, later)
    receivers = _table(dom, "receivers")
    assert len(receivers) == 1 and "RateGeneratorReceiver" in receivers[0], receivers
    assert "active" in receivers[0], receivers
    assert not re.search(r'(src|href)="(https?:)?//', dom), "the page loads from elsewhere"

    ARTEFACT.parent.mkdir(parents=True, exist_ok=True)
    _browse(chromium, tmp_path / "p3", f"--screenshot={ARTEFACT}", "--window-size=1280,1500",
            server.url)
    assert ARTEFACT.stat().st_size > 10_000, "the screenshot is empty"
    if os.environ.get("WALSTREAM_UPDATE_SCREENSHOT") == "1":
        README_PICTURE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ARTEFACT, README_PICTURE)
