"""The test session keeps Spark's scratch space out of /tmp (the spark_local_dirs fixture):
a JVM killed with SIGKILL cannot delete its ``spark-*`` and ``blockmgr-*`` directories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark


def test_the_jvm_writes_its_scratch_space_under_the_sessions_temp_dir(
        sc: Any, spark_local_dirs: Path) -> None:
    conf = sc._jsc.sc().conf()
    local_dir = Path(sc._jvm.org.apache.spark.util.Utils.getLocalDir(conf))
    assert local_dir.resolve().is_relative_to(spark_local_dirs.resolve())
    # A shuffle puts block manager files there too, not in /tmp.
    assert sc.parallelize(range(100), 4).map(lambda x: (x % 3, 1)).reduceByKey(
        lambda a, b: a + b).collectAsMap() == {0: 34, 1: 33, 2: 33}
    assert any(p.name.startswith("blockmgr-") for p in spark_local_dirs.iterdir())
