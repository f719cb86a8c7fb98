"""The DStream graph in a checkpoint: pickled with PySpark's cloudpickle, as PySpark does.

What is pickled: every DStream of the graph with its parameters and the user's
functions (by value, like PySpark's TransformFunction serializer), the output
operations in order, the batch and remember durations and the zero time. What
is not: the StreamingContext and SparkContext (the restoring process makes new
ones), generated RDDs (state RDDs come back from their reliable checkpoint
files, named in the data part), and per-process clients (Kafka consumers, WAL
producers), which every stream recreates on first use.

A graph that cannot be pickled (a function closing over a lock, a socket or an
RDD, or a ``queueStream``, which Spark also refuses to checkpoint) is not an
error at checkpoint time here: the checkpoint is written without it, with a
warning naming the cause, and a restart rebuilds the graph with ``setupFunc``
and checks it against the data part's fingerprint.
"""

from __future__ import annotations

import logging
import pickle
from typing import TYPE_CHECKING

from checkpoint.errors import GraphLoadError

if TYPE_CHECKING:
    from driver.graph import DStreamGraph

log = logging.getLogger(__name__)


def dumps_graph(graph: DStreamGraph) -> bytes | None:
    """The pickled graph, or None (with a warning) when it cannot be pickled."""
    from pyspark import cloudpickle

    try:
        return bytes(cloudpickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception as exc:
        log.warning(
            "the DStream graph cannot be pickled into the checkpoint (%s: %s); a restart "
            "will rebuild it by calling setupFunc and check it against the checkpoint",
            type(exc).__name__, exc)
        return None


def loads_graph(data: bytes) -> DStreamGraph:
    """The graph a checkpoint holds; :class:`GraphLoadError` says why it cannot load."""
    from driver.graph import DStreamGraph

    try:
        graph = pickle.loads(data)
    except Exception as exc:
        raise GraphLoadError(
            f"the checkpoint's DStream graph cannot be loaded ({type(exc).__name__}: {exc}): "
            "the code it was written with has changed or is missing. To start with the "
            "current code, either set spark.walstream.recovery.upgrade=true (or the "
            "environment variable WALSTREAM_RECOVERY_UPGRADE=true), which builds the graph "
            "with setupFunc and restores the checkpoint's data into it when its inputs and "
            "stateful operators are unchanged, or delete the checkpoint directory (losing "
            "its state)") from exc
    if not isinstance(graph, DStreamGraph):
        raise GraphLoadError(f"the checkpoint's graph part holds a {type(graph).__name__}, "
                             "not a DStream graph")
    return graph
