"""Starting PySpark the way this project needs it on every machine."""

from __future__ import annotations

import os
import sys
from typing import Any

from walstream import worker_daemon
from walstream.jvm_archive import use_archive


def spark_environment() -> None:
    """Loopback networking and the venv's Python for workers, unless set already."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def create_spark_context(
    app_name: str, master: str | None = None, conf: dict[str, str] | None = None
) -> Any:
    """A SparkContext on ``master`` (default ``$WALSTREAM_SPARK_MASTER`` or local[3])."""
    spark_environment()
    use_archive()
    from pyspark import SparkConf, SparkContext

    sconf = SparkConf().setAppName(app_name)
    sconf.setMaster(master or os.environ.get("WALSTREAM_SPARK_MASTER", "local[3]"))
    sconf.set("spark.ui.showConsoleProgress", "false")
    sconf.set("spark.ui.enabled", os.environ.get("WALSTREAM_SPARK_UI", "false"))
    sconf.set("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
    # Workers fork from a daemon that has already imported their modules
    # (walstream/worker_daemon.py says why); an application's own choice stands.
    sconf.set(worker_daemon.CONF_KEY, worker_daemon.MODULE)
    for k, v in (conf or {}).items():
        sconf.set(k, v)
    sc = SparkContext.getOrCreate(sconf)
    sc.setLogLevel(os.environ.get("WALSTREAM_SPARK_LOG_LEVEL", "ERROR"))
    return sc
