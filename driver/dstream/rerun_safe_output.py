"""Output helpers whose re-runs replace rather than add: a re-run batch never doubles output."""

from __future__ import annotations

from typing import Any


def overwrite_text_file(rdd: Any, path: str) -> None:
    """``rdd.saveAsTextFile(path)``, deleting what a previous run of the batch left.

    Spark fails when the directory exists (SPARK-4835), so a batch re-run after
    a crash could never save; deleting first through Hadoop's FileSystem (local,
    HDFS, S3...) makes the save idempotent per batch.
    """
    sc = rdd.context
    jvm = sc._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(sc._jsc.hadoopConfiguration())
    if fs.exists(hpath):
        fs.delete(hpath, True)
    rdd.saveAsTextFile(path)
