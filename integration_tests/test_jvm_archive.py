"""The driver JVM's class archive on a real JVM: written, tried, and mapped by a
driver whose user set JVM options of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from walstream import jvm_archive

pytestmark = pytest.mark.spark

_DRIVER = """
import json, sys
from walstream.jvm_archive import use_archive
used = use_archive()
from pyspark import SparkConf, SparkContext
sc = SparkContext(conf=SparkConf().setMaster("local[2]").setAppName("t")
                  .set("spark.ui.enabled", "false")
                  .set("spark.driver.extraJavaOptions", "-Dwalstream.test=user"))
sc.setLogLevel("ERROR")
n = sc.parallelize(range(100), 2).map(lambda x: x * 2).sum()
args = list(sc._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
            .getInputArguments())
print(json.dumps({"used": str(used) if used else None, "sum": n, "args": args}))
sc.stop()
"""


def _run_driver(env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", _DRIVER], env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_written_tried_and_mapped_with_the_users_options(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != jvm_archive.SUBMIT_ARGS}
    env[jvm_archive.ENV_DIR] = str(tmp_path / "jvm")
    env.pop(jvm_archive.ENV_SWITCH, None)
    done = subprocess.run([sys.executable, "-m", "walstream.cli", "jvm-archive"], env=env,
                          capture_output=True, text=True, timeout=600)
    # create() has already started a JVM with -Xshare:on (one that cannot map the
    # archive exits): a written archive is a mapped one.
    assert done.returncode == 0, done.stderr[-2000:]
    archives = list((tmp_path / "jvm").glob("*.jsa"))
    assert len(archives) == 1, list((tmp_path / "jvm").iterdir())
    archive = archives[0]
    meta = json.loads(archive.with_suffix(".json").read_text())
    assert meta["size"] == archive.stat().st_size > 1_000_000
    assert not list((tmp_path / "jvm").glob(".*")), "temp files left behind"

    out = _run_driver(env)
    assert out["used"] == str(archive) and out["sum"] == 9900
    args = [str(a) for a in out["args"]]  # type: ignore[union-attr]
    assert f"-XX:SharedArchiveFile={archive}" in args
    # Ours are the defaults; the user's extraJavaOptions come after them and apply.
    assert args.index(f"-XX:SharedArchiveFile={archive}") < args.index("-Dwalstream.test=user")

    # Switched off: the same driver starts without the archive.
    out = _run_driver({**env, jvm_archive.ENV_SWITCH: "off"})
    assert out["used"] is None and out["sum"] == 9900
    assert not any("SharedArchiveFile" in str(a) for a in out["args"])  # type: ignore[union-attr]
