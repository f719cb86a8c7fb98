"""The DStream graph in a checkpoint: pickled with PySpark's cloudpickle, as PySpark does.

What is pickled: every DStream of the graph with its parameters and the user's
functions (by value, like PySpark's TransformFunction serializer), the output
operations in order, the batch and remember durations and the zero time. What
is not: the StreamingContext and SparkContext (the restoring process makes new
ones), generated RDDs (state RDDs come back from their reliable checkpoint
files, named in the data part), and per-process clients (Kafka consumers, WAL
producers), which every stream recreates on first use.

With checkpointing on, ``StreamingContext.start()`` pickles the graph once with
:func:`pickle_graph`, before anything starts, as Spark's ``start()`` serializes
its checkpoint: a graph that cannot be pickled (a function closing over the
SparkContext, a lock, a socket or an RDD) raises
:class:`GraphNotCheckpointableError` naming the function, because running on
would leave an app that cannot recover. A ``queueStream`` is the exception, as in
Spark (which only warns when writing it): its RDDs live only in this driver, so
the checkpoint is written without the graph, with a warning, and a restart
rebuilds the graph with ``setupFunc`` and checks it against the data part's
fingerprint.
"""

from __future__ import annotations

import functools
import logging
import pickle
from collections.abc import Iterator
from typing import Any

from walstream.checkpoint.errors import GraphLoadError, GraphNotCheckpointableError
from walstream.driver.dstream.dstream import DStream
from walstream.driver.dstream.graph import DStreamGraph
from walstream.driver.dstream.receiver_input_stream import QueueInputDStream

log = logging.getLogger(__name__)


#: How deep :func:`_innermost` follows closures looking for the function to name.
_MAX_DEPTH = 20


def _pickle_error(obj: Any) -> Exception | None:
    from pyspark import cloudpickle

    try:
        cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        return exc
    return None


def _children(func: Any) -> Iterator[Any]:
    """What pickling ``func`` by value takes along: a partial's function and
    arguments, a bound method's object, closure cells, the globals its code uses."""
    if isinstance(func, functools.partial):
        yield func.func
        yield from func.args
        yield from func.keywords.values()
        return
    owner = getattr(func, "__self__", None)
    if owner is not None:
        yield owner
    for cell in getattr(func, "__closure__", None) or ():
        try:
            yield cell.cell_contents
        except ValueError:  # an empty cell
            continue
    code, scope = getattr(func, "__code__", None), getattr(func, "__globals__", None)
    if code is not None and isinstance(scope, dict):
        yield from (scope[n] for n in code.co_names if n in scope)


def _innermost(func: Any, depth: int = 0) -> Any:
    """The innermost function inside ``func`` that still fails to pickle: the user's
    function rather than the wrappers the DStream API put around it."""
    if depth < _MAX_DEPTH:
        for child in _children(func):
            if callable(child) and not isinstance(child, type) \
                    and _pickle_error(child) is not None:
                return _innermost(child, depth + 1)
    return func


def _describe(func: Any) -> str:
    target = func.func if isinstance(func, functools.partial) else func
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) \
        or type(target).__name__
    module = getattr(target, "__module__", None)
    code = getattr(target, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"{module}.{name}{where}" if module else f"{name}{where}"


def _is_graph_part(value: Any) -> bool:
    """A DStream, or a list of them (parents): checked as streams of their own."""
    return isinstance(value, DStream) or (
        isinstance(value, list | tuple) and bool(value)
        and all(isinstance(v, DStream) for v in value))


def _check_stream(stream: DStream) -> None:
    """Raise :class:`GraphNotCheckpointableError` naming what of ``stream`` cannot be
    pickled: each part of its checkpointed state is tried on its own."""
    for attr, value in stream.__getstate__().items():
        if _is_graph_part(value):
            continue
        exc = _pickle_error(value)
        if exc is None:
            continue
        where = f"{stream._kind} DStream #{stream._id}"
        cause = f"{type(exc).__name__}: {exc}"
        if callable(value) and not isinstance(value, type):
            culprit = _describe(_innermost(value))
            raise GraphNotCheckpointableError(
                f"checkpointing is on, but the function {culprit} of {where} cannot be "
                f"pickled into checkpoints ({cause}). Functions of a checkpointed DStream "
                "graph must not capture the SparkContext, the StreamingContext, RDDs, "
                "locks or clients (create those inside the function), or turn "
                "checkpointing off", culprit) from exc
        raise GraphNotCheckpointableError(
            f"checkpointing is on, but {attr!r} of {where} cannot be pickled into "
            f"checkpoints ({cause})") from exc


def pickle_graph(graph: DStreamGraph) -> bytes | None:
    """The graph pickled for checkpoints; None (with a warning) when it holds a
    ``queueStream``, which cannot be checkpointed. Raises
    :class:`GraphNotCheckpointableError`, naming the function, when any other
    part cannot be pickled."""
    from pyspark import cloudpickle

    queues = [s for s in graph.streams if isinstance(s, QueueInputDStream)]
    for stream in graph.streams:
        if not isinstance(stream, QueueInputDStream):
            _check_stream(stream)
    if queues:
        log.warning("queueStream doesn't support checkpointing: its RDDs live only in this "
                    "driver. Checkpoints are written without the DStream graph, and a "
                    "restart rebuilds it by calling setupFunc (with a new queue)")
        return None
    try:
        return bytes(cloudpickle.dumps(graph, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception as exc:
        raise GraphNotCheckpointableError(
            f"checkpointing is on, but the DStream graph cannot be pickled into "
            f"checkpoints ({type(exc).__name__}: {exc})") from exc


def dumps_graph(graph: DStreamGraph) -> bytes | None:
    """The pickled graph, or None (with a warning) when it cannot be pickled; for a
    graph :func:`pickle_graph` did not check at start."""
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
