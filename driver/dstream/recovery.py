"""getOrCreate and restarts: rebuild the graph, restore its data, reschedule batches.

The driver side of checkpoints, beside StreamingContext as Spark keeps its
``Checkpoint`` beside its context: the ``checkpoint`` package holds the format
and the atomic files and knows no DStream. A context hands recovery what it
needs through :class:`RecoverableContext` (a :class:`ContextView` of itself and
``resume_from``), never through its attributes.

Recovery protocol for ``get_or_create(dir, setup)`` when ``dir`` has a valid
checkpoint (newest that reads; corrupt ones are skipped with a warning):

1. The graph is unpickled from the checkpoint (PySpark's semantics: ``setup``
   is not called) into a context on the running SparkContext, or on a new one
   made from the checkpoint's conf with the new environment's master, driver
   host and ports. Code that changed so that the graph no longer loads gives a
   :class:`GraphLoadError` saying how to proceed. In upgrade mode
   (``spark.walstream.recovery.upgrade=true``, else the environment variable
   ``WALSTREAM_RECOVERY_UPGRADE=true``; one rule, :func:`upgrade_enabled`, on
   every path), and when the checkpoint holds no graph (it could not be
   pickled), ``setup()`` builds the graph instead and
   its fingerprint must equal the checkpoint's, else
   :class:`IncompatibleGraphError` names the difference; upgrade mode accepts a
   graph with the same input and stateful streams.
2. On ``start()``: the engine replays the driver WAL (block queues, allocations);
   state RDDs are reloaded from their reliable checkpoint files; the zero time
   is the original one, so windows land on the same times.
3. Batches pending at the checkpoint and batches missed while down are
   resubmitted once each, in time order (SPARK-12122), under
   ``spark.walstream.recovery.downtimePolicy``: ``all`` (default), ``coalesce``
   (only the latest missed one, which takes every waiting block) or ``skip``
   (none; the next batch takes the waiting blocks), with the count logged
   (against the down-time flood, SPARK-13586).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from walstream import worker_daemon
from walstream.checkpoint.data import CheckpointData, StateRdd
from walstream.checkpoint.errors import CheckpointError, IncompatibleGraphError
from walstream.checkpoint.files import read_latest
from walstream.driver.dstream.graph import DStreamGraph
from walstream.driver.dstream.graph_pickle import loads_graph
from walstream.driver.python_sockets import unix_sockets_default
from walstream.jvm_archive import use_archive
from walstream.kafka_settings import is_secret, without_secrets

log = logging.getLogger(__name__)

POLICY_KEY = "spark.walstream.recovery.downtimePolicy"
UPGRADE_KEY = "spark.walstream.recovery.upgrade"
UPGRADE_ENV = "WALSTREAM_RECOVERY_UPGRADE"


@dataclass(frozen=True)
class ContextView:
    """What recovery reads of a StreamingContext, handed over by the context."""

    graph: DStreamGraph
    batch_ms: int
    conf: Mapping[str, str]
    checkpoint_dir: str | None


@runtime_checkable
class RecoverableContext(Protocol):
    """The context as recovery sees it: a view of itself, PySpark's ``checkpoint``,
    and ``resume_from``, which makes its next ``start()`` a restart from ``data``."""

    def recovery_view(self) -> ContextView: ...

    def checkpoint(self, directory: str) -> None: ...

    def resume_from(self, data: CheckpointData) -> None: ...


def get_or_create(checkpoint_path: str, setup: Callable[[], Any],
                  restore: Callable[[Any, int, DStreamGraph], Any]) -> Any:
    """Protocol step 1: the context from the newest valid checkpoint at
    ``checkpoint_path``, else ``setup()``. ``restore(spark_context, batch_ms, graph)``
    makes a context around a graph restored from a checkpoint."""
    # Before anything can start the driver JVM: a restart maps Spark's classes from
    # the class archive instead of loading them (walstream/jvm_archive.py).
    use_archive()
    data = read_latest(checkpoint_path)
    if data is None:
        return _from_setup(checkpoint_path, setup)
    if data.graph is not None and not upgrade_requested(data):
        ssc = _restore(checkpoint_path, data, restore)
    else:
        if data.graph is None:
            log.warning("checkpoint %d holds no graph (it could not be pickled when written): "
                        "rebuilding it with setupFunc", data.checkpoint_time_ms)
        ssc = _from_setup(checkpoint_path, setup)
        check_compatible(ssc.recovery_view(), data)
    ssc.resume_from(data)
    log.info("recovering from checkpoint %d (%d pending batches)",
             data.checkpoint_time_ms,
             len(data.pending_times_ms))
    return ssc


def _from_setup(checkpoint_path: str, setup: Callable[[], Any]) -> RecoverableContext:
    ssc = setup()
    if not isinstance(ssc, RecoverableContext):
        raise CheckpointError("setupFunc must return a StreamingContext")
    where = ssc.recovery_view().checkpoint_dir
    if where is None:
        ssc.checkpoint(checkpoint_path)
    elif os.path.abspath(where) != os.path.abspath(checkpoint_path):
        raise CheckpointError(
            f"setupFunc set checkpoint directory {where!r}, but getOrCreate "
            f"was given {checkpoint_path!r}: they must be the same")
    return ssc


def upgrade_enabled(conf: Mapping[str, str]) -> bool:
    """Upgrade mode as every path decides it: ``spark.walstream.recovery.upgrade`` in
    ``conf`` when set (either way), else ``WALSTREAM_RECOVERY_UPGRADE``; ``true`` in
    any case means on. The same rule for choosing the setup path and for accepting
    a changed graph, so the one never admits what the other then refuses."""
    value = conf.get(UPGRADE_KEY)
    if value is None:
        value = os.environ.get(UPGRADE_ENV)
    return str(value).strip().lower() == "true"


def upgrade_requested(data: CheckpointData) -> bool:
    """Upgrade mode before any context exists: the running SparkContext's conf, else
    a new SparkConf's (a ``--conf`` of spark-submit), by :func:`upgrade_enabled`."""
    from pyspark import SparkConf, SparkContext

    conf: dict[str, str] = {}
    sc = SparkContext._active_spark_context
    if sc is not None:
        conf = dict(sc.getConf().getAll())
    elif SparkContext._jvm is not None:
        conf = dict(SparkConf().getAll())
    return upgrade_enabled(conf)


# Taken from the restarting environment, not the checkpoint (Spark's
# Checkpoint.createSparkConf reloads the same properties).
RELOADED_CONF = ("spark.master", "spark.driver.host", "spark.driver.bindAddress",
                 "spark.driver.port", "spark.ui.port", "spark.yarn.app.id",
                 "spark.yarn.app.attemptId", "spark.kerberos.keytab",
                 "spark.kerberos.principal")
DROPPED_CONF = ("spark.app.id", "spark.app.startTime", "spark.app.submitTime")


def recovered_conf(saved: dict[str, str], new: dict[str, str]) -> dict[str, str]:
    """The SparkConf of a restored context: the checkpoint's, with the new
    environment's master, driver host and ports (conf recovery picks up a new master)
    and its secrets (Kafka passwords, the endpoint secret), which no checkpoint holds."""
    out = {k: v for k, v in saved.items() if k not in DROPPED_CONF}
    out.update({k: new[k] for k in RELOADED_CONF if k in new})
    out.update({k: v for k, v in new.items() if is_secret(k)})
    # The restarted executor's workers fork from a daemon that has already imported
    # their modules (walstream/worker_daemon.py): they all start at once on the way
    # to the first batch. An application's own choice stands.
    out.setdefault(worker_daemon.CONF_KEY, worker_daemon.MODULE)
    # Python tasks without a delayed-ACK wait (driver/python_sockets.py says why).
    unix_sockets_default(out)
    return out


def _master_given() -> bool:
    submit = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    return "--master" in submit or "spark.master" in submit or bool(os.environ.get("MASTER"))


def _restore(checkpoint_path: str, data: CheckpointData,
             restore: Callable[[Any, int, DStreamGraph], Any]) -> RecoverableContext:
    """PySpark's getOrCreate with a checkpoint: no setupFunc; the SparkContext is the
    running one, else a new one from the checkpoint's conf (new master, host, ports)."""
    from pyspark import SparkConf, SparkContext

    from walstream.driver.spark import spark_environment

    assert data.graph is not None
    graph = loads_graph(data.graph)  # before any SparkContext: fail fast, say why
    sc = SparkContext._active_spark_context
    if sc is None:
        spark_environment(os.environ.get("WALSTREAM_SPARK_MASTER")
                          or data.conf.get("spark.master"))
        SparkContext._ensure_initialized()  # the gateway, so SparkConf() reads the new env
        new = dict(SparkConf().getAll())
        if not _master_given():
            # spark-submit (behind PySpark's gateway) always sets spark.master, to
            # local[*] by default: only a master given explicitly replaces the saved one.
            new.pop("spark.master", None)
        if os.environ.get("WALSTREAM_SPARK_MASTER"):
            new["spark.master"] = os.environ["WALSTREAM_SPARK_MASTER"]
        conf = SparkConf(loadDefaults=False).setAll(
            list(recovered_conf(data.conf, new).items()))
        sc = SparkContext(conf=conf)
    ssc: RecoverableContext = restore(sc, data.batch_ms, graph)
    ssc.checkpoint(checkpoint_path)
    return ssc


def _stateful(shape: list[str] | tuple[str, ...]) -> list[str]:
    return [s for s in shape if s.startswith(("receiver:", "kafkaDirect", "queue", "textFile",
                                              "binaryRecords", "updateStateByKey",
                                              "reduceByKeyAndWindow"))]


def check_compatible(view: ContextView, data: CheckpointData) -> None:
    """Protocol step 1 on the setup path: the graph ``setupFunc`` built must be the
    checkpoint's, or (upgrade mode) have the same inputs and stateful operators."""
    shape = list(view.graph.shape())
    if data.batch_ms != view.batch_ms:
        raise IncompatibleGraphError(
            f"the checkpoint's batch duration is {data.batch_ms} ms, the code's "
            f"{view.batch_ms} ms; delete the checkpoint directory to start afresh")
    if view.graph.fingerprint() == data.fingerprint:
        return
    upgrade = upgrade_enabled(view.conf)
    old_state, new_state = _stateful(data.graph_shape), _stateful(shape)
    if upgrade and old_state == new_state:
        log.warning("upgrade mode: restoring the checkpoint into a changed graph "
                    "(same inputs and stateful operators)")
        return
    removed = [s for s in data.graph_shape if s not in shape]
    added = [s for s in shape if s not in data.graph_shape]
    hint = (f"set {UPGRADE_KEY}=true (or the environment variable {UPGRADE_ENV}=true) "
            "to restore into the new graph"
            if old_state == new_state else
            "inputs or stateful operators changed: the checkpoint cannot be restored into "
            "this graph; delete the checkpoint directory (losing state) or revert the code")
    raise IncompatibleGraphError(
        f"the code builds a different graph than the checkpoint's: removed {removed}, "
        f"added {added}; {hint}")


def times_to_resubmit(data: CheckpointData, first_new_ms: int, policy: str,
                      allocated: Iterable[int] = ()) -> list[int]:
    """Pending batches plus the ones missed while down, by the down-time policy.

    ``allocated`` are the batch times the replayed tracker holds blocks for. One
    after the checkpoint's time was allocated (logged) before the crash but its
    checkpoint never became durable: it is pending in fact, whatever the policy
    (skipping it would leave its blocks allocated to a batch that never runs).
    """
    missed = list(range(data.checkpoint_time_ms + data.batch_ms, first_new_ms, data.batch_ms))
    logged = {t for t in allocated if data.checkpoint_time_ms < t < first_new_ms}
    if policy == "skip":
        chosen: list[int] = []
    elif policy == "coalesce":
        chosen = missed[-1:]
    elif policy == "all":
        chosen = missed
    else:
        raise CheckpointError(f"{POLICY_KEY} must be all, coalesce or skip, not {policy!r}")
    chosen = sorted(set(chosen) | logged)
    if len(missed) != len(chosen):
        log.warning("down-time policy %s: %d missed batches, %d resubmitted", policy,
                    len(missed), len(chosen))
    pending = set(data.pending_times_ms)
    done_before = completed_before(data)
    if done_before is not None:
        # Completed batches are not re-run: their state is gone (the checkpoint names
        # only newer state), so re-running one would recompute its state from the
        # stream's start, over inputs cleanup already dropped.
        chosen = [t for t in chosen if t >= done_before or t in pending]
    return sorted(pending | set(chosen))


def completed_before(data: CheckpointData) -> int | None:
    """A batch time before which every batch that ``data`` does not list as pending
    had completed when ``data`` was written; None without stateful streams.

    It is the oldest of the stateful streams' newest state times. Why: a state of
    batch S is durable only after a job of S computed it, batches are generated in
    time order, and a generated batch stays pending until all its jobs completed.
    The checkpoint reads the pending batches before the durable state, on the
    thread that generates batches, so a batch that completes in between is still
    listed as pending. A checkpoint's own time can lag far behind its state (it is
    built when the job generator gets to it, in a backlog seconds later), so the
    batches after that time are not all missed: some completed, and their state is
    not in the checkpoint."""
    newest: dict[str, int] = {}
    for entry in data.state_rdds:
        newest[entry.stream] = max(newest.get(entry.stream, entry.time_ms), entry.time_ms)
    return min(newest.values()) if newest else None


def restore_state(sc: Any, graph: DStreamGraph, data: CheckpointData) -> None:
    """Protocol step 2: reload state RDDs from their reliable checkpoint files."""
    for entry in data.state_rdds:
        rdd = sc._checkpointFile(entry.path, sc.serializer)
        if not graph.restore_state(entry.stream, entry.time_ms, rdd, entry.path):
            log.warning("checkpointed state of %s has no stream in the new graph", entry.stream)


def build_checkpoint(graph: DStreamGraph, t: int, pending: list[int], *, app_id: str,
                     conf: Mapping[str, str], graph_bytes: bytes | None) -> CheckpointData:
    """The checkpoint of batch ``t``: ``pending`` batches, the newest durable state of
    each stateful stream, the conf (without the driver's own host and ports, which a
    restart takes from its environment), without secrets, and the pickled graph."""
    return CheckpointData(
        checkpoint_time_ms=t, written_wall_ms=int(time.time() * 1000),
        app_id=app_id, batch_ms=graph.batch_ms, zero_time_ms=graph.zero_ms or 0,
        fingerprint=graph.fingerprint(), graph_shape=graph.shape(),
        pending_times_ms=tuple(sorted(pending)),
        state_rdds=tuple(StateRdd(fp, ts, path) for fp, ts, path in graph.durable_state()),
        conf={k: v for k, v in without_secrets(conf).items()
              if not k.startswith("spark.driver.")},
        graph=graph_bytes)


def state_floor(graph: DStreamGraph, data: CheckpointData) -> int | None:
    """The oldest batch time whose state a restart from ``data`` restores; the
    batches after it are recomputed from their inputs. None: no stateful stream.
    A stateful stream with no checkpointed RDD yet is recomputed from the start."""
    oldest: dict[str, int] = {}
    for e in data.state_rdds:
        oldest[e.stream] = min(oldest.get(e.stream, e.time_ms), e.time_ms)
    return graph.state_floor(oldest, data.zero_time_ms)
