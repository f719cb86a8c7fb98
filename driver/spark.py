"""Starting PySpark the way this project needs it on every machine."""

from __future__ import annotations

import os
import sys
from typing import Any

from driver.endpoint_conf import LOOPBACK, is_local_master
from walstream import worker_daemon
from walstream.jvm_archive import use_archive

DEFAULT_MASTER = "local[3]"


def spark_master(master: str | None = None) -> str:
    """``master``, else ``$WALSTREAM_SPARK_MASTER``, else local[3]."""
    return master or os.environ.get("WALSTREAM_SPARK_MASTER") or DEFAULT_MASTER


def spark_environment(master: str | None = None) -> None:
    """The venv's Python for workers and, for a ``local[...]`` master only, loopback
    networking, unless set already. A cluster's driver keeps Spark's own choice of
    address (``SPARK_LOCAL_IP``, else the host's), which its executors can reach."""
    if is_local_master(spark_master(master)):
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def create_spark_context(
    app_name: str, master: str | None = None, conf: dict[str, str] | None = None
) -> Any:
    """A SparkContext on ``master`` (default ``$WALSTREAM_SPARK_MASTER`` or local[3])."""
    master = spark_master(master)
    spark_environment(master)
    use_archive()
    from pyspark import SparkConf, SparkContext

    sconf = SparkConf().setAppName(app_name)
    sconf.setMaster(master)
    sconf.set("spark.ui.showConsoleProgress", "false")
    sconf.set("spark.ui.enabled", os.environ.get("WALSTREAM_SPARK_UI", "false"))
    if os.environ.get("SPARK_LOCAL_IP"):
        # The driver's address for executors; on a cluster unset unless the host
        # chose one, and then Spark picks the host's address.
        sconf.set("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
    # Workers fork from a daemon that has already imported their modules
    # (walstream/worker_daemon.py says why); an application's own choice stands.
    sconf.set(worker_daemon.CONF_KEY, worker_daemon.MODULE)
    for k, v in (conf or {}).items():
        sconf.set(k, v)
    sc = SparkContext.getOrCreate(sconf)
    sc.setLogLevel(os.environ.get("WALSTREAM_SPARK_LOG_LEVEL", "ERROR"))
    return sc
