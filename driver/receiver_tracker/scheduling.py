"""Where receivers run: Spark's ReceiverSchedulingPolicy, and placing a task there.

``schedule_receivers`` spreads receivers evenly over executors: a receiver with
a ``preferredLocation`` host goes to the least loaded executor on that host (or
to that host by name when none runs there), the others to the least loaded
executors overall. ``reschedule_receiver`` picks one place for a relaunch from
the executors alive now, so a receiver whose executor died moves to a survivor.

A receiver job's single partition carries the chosen locations as Spark
preferred locations (``executor_<host>_<id>`` is an executor, a bare name is a
host), built through the JVM's ``makeRDD(seq, locations)`` because PySpark's
``parallelize`` cannot carry them; Spark then starts the task there within
``spark.locality.wait``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class ExecutorLocation:
    host: str
    executor_id: str

    def spark_location(self) -> str:
        """Spark's ExecutorCacheTaskLocation string, or the host when no id is known."""
        return f"executor_{self.host}_{self.executor_id}" if self.executor_id else self.host


def schedule_receivers(
    preferred: Mapping[int, str | None], executors: Sequence[ExecutorLocation]
) -> dict[int, list[str]]:
    """Assign each stream a location (Spark location strings), evenly."""
    out: dict[int, list[str]] = {s: [] for s in preferred}
    if not executors:
        return {s: ([h] if h else []) for s, h in preferred.items()}
    load: Counter[ExecutorLocation] = Counter({e: 0 for e in executors})
    for stream_id, host in sorted(preferred.items()):
        if not host:
            continue
        on_host = [e for e in executors if e.host == host]
        if on_host:
            best = min(on_host, key=lambda e: (load[e], e))
            load[best] += 1
            out[stream_id] = [best.spark_location()]
        else:
            out[stream_id] = [host]  # a host with no executor yet: let Spark wait for it
    for stream_id, host in sorted(preferred.items()):
        if host:
            continue
        best = min(executors, key=lambda e: (load[e], e))
        load[best] += 1
        out[stream_id] = [best.spark_location()]
    return out


def reschedule_receiver(
    preferred_host: str | None,
    executors: Sequence[ExecutorLocation],
    running: Mapping[int, ExecutorLocation | None],
) -> list[str]:
    """One location for a (re)launch, given where the other receivers run now."""
    if not executors:
        return [preferred_host] if preferred_host else []
    load: Counter[ExecutorLocation] = Counter({e: 0 for e in executors})
    for where in running.values():
        if where is not None and where in load:
            load[where] += 1
    pool = [e for e in executors if e.host == preferred_host] if preferred_host else []
    best = min(pool or list(executors), key=lambda e: (load[e], e))
    return [best.spark_location()]


def executors_of(sc: Any) -> list[ExecutorLocation]:
    """The live executors (the driver itself in local mode).

    Executor ids come from ``getExecutorIds``; hosts from the block managers'
    addresses (reaching the BlockManager objects through py4j crashes the
    gateway on missing protobuf classes). When every executor is on one host,
    as on one machine, ids and host pair up; on several hosts the ids cannot be
    paired with hosts from Python, so the policy spreads over hosts instead.
    """
    jsc = sc._jsc.sc()
    ids = [str(x) for x in _scala_iter(jsc.getExecutorIds())]
    hosts = sorted({str(k).rsplit(":", 1)[0]
                    for k in _scala_iter(jsc.getExecutorMemoryStatus().keys())})
    driver_host = str(sc.getConf().get("spark.driver.host", "localhost"))
    if not ids:
        return [ExecutorLocation(driver_host, "driver")]
    remote_hosts = [h for h in hosts if h != driver_host] or hosts
    if len(remote_hosts) == 1:
        return sorted(ExecutorLocation(remote_hosts[0], i) for i in ids)
    return [ExecutorLocation(h, "") for h in remote_hosts]


def _scala_iter(coll: Any) -> list[Any]:
    out = []
    it = coll.iterator()
    while it.hasNext():
        out.append(it.next())
    return out


def located_single_partition_rdd(sc: Any, locations: Sequence[str]) -> Any:
    """A one-element PySpark RDD whose partition prefers ``locations``."""
    from pyspark.rdd import RDD
    from pyspark.serializers import UTF8Deserializer

    jvm = sc._jvm
    conv = jvm.scala.jdk.javaapi.CollectionConverters
    locs = jvm.java.util.ArrayList()
    for loc in locations:
        locs.add(loc)
    items = jvm.java.util.ArrayList()
    items.add(jvm.scala.Tuple2("receiver", conv.asScala(locs).toSeq()))
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("java.lang.String"))
    jrdd = sc._jsc.sc().makeRDD(conv.asScala(items).toSeq(), tag)
    return RDD(jvm.org.apache.spark.api.java.JavaRDD.fromRDD(jrdd, tag), sc, UTF8Deserializer())
