"""Starting PySpark the way this project needs it on every machine."""

from __future__ import annotations

import os
import sys
from typing import Any

from walstream import worker_daemon
from walstream.driver.python_sockets import unix_sockets_default
from walstream.driver.receiver_tracker.endpoint_conf import LOOPBACK, is_local_master
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


#: ``false`` keeps Spark's web UI off in the contexts walstream creates (an explicit
#: opt-out; ``true`` turns it on); unset, the app's conf or Spark's default decides.
SPARK_UI_ENV = "WALSTREAM_SPARK_UI"


def spark_settings(app_name: str, master: str,
                   conf: dict[str, str] | None = None) -> dict[str, str]:
    """The SparkConf settings of :func:`create_spark_context`, the app's ``conf`` last.

    Spark's web UI is the app's choice: ``spark.ui.enabled`` is set only by
    ``$WALSTREAM_SPARK_UI`` or ``conf``; otherwise Spark's default (on, port 4040,
    the next free one when that is taken) stands.
    """
    out = {"spark.app.name": app_name, "spark.master": master,
           "spark.ui.showConsoleProgress": "false"}
    ui = os.environ.get(SPARK_UI_ENV, "").strip()
    if ui:
        out["spark.ui.enabled"] = ui.lower()
    if os.environ.get("SPARK_LOCAL_IP"):
        # The driver's address for executors; on a cluster unset unless the host
        # chose one, and then Spark picks the host's address.
        out["spark.driver.host"] = os.environ["SPARK_LOCAL_IP"]
    # Workers fork from a daemon that has already imported their modules
    # (walstream/worker_daemon.py says why); an application's own choice stands.
    out[worker_daemon.CONF_KEY] = worker_daemon.MODULE
    out.update(conf or {})
    # Python tasks without a delayed-ACK wait (driver/python_sockets.py says why).
    unix_sockets_default(out)
    return out


def create_spark_context(
    app_name: str, master: str | None = None, conf: dict[str, str] | None = None
) -> Any:
    """A SparkContext on ``master`` (default ``$WALSTREAM_SPARK_MASTER`` or local[3]),
    with :func:`spark_settings`."""
    master = spark_master(master)
    spark_environment(master)
    use_archive()
    from pyspark import SparkConf, SparkContext

    sconf = SparkConf()
    for k, v in spark_settings(app_name, master, conf).items():
        sconf.set(k, v)
    sc = SparkContext.getOrCreate(sconf)
    sc.setLogLevel(os.environ.get("WALSTREAM_SPARK_LOG_LEVEL", "ERROR"))
    return sc
