"""``walstream.register(spark)``: the ``walstream`` format, and the service that runs
its sources' engines in this driver process (one per source ``name``).

The handlers below are the service's operations. Each reader call carries the
source's options, so the first call of a query (``initial`` for a new query,
``latest`` or ``partitions`` for a restarted one) starts that source's engine:
replay, endpoint, receivers (:mod:`walstream.structured.source_engine`). ``stop`` (the
query stopped) stops it; so does the end of this process.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from typing import Any

from walstream.driver.python_sockets import prefer_unix_sockets
from walstream.structured import offsets
from walstream.structured.datasource import data_source_class
from walstream.structured.errors import ServiceError, SourceOptionError
from walstream.structured.query_floors import QueryFloors
from walstream.structured.service import SourceService, options_of
from walstream.structured.source_engine import SourceEngine

log = logging.getLogger(__name__)

#: How long stopping a source's receivers may take (s).
STOP_TIMEOUT_S = 60.0


class SourceRegistry:
    """The engines of one driver process, by source name, behind one service."""

    def __init__(self, sc: Any) -> None:
        self.sc = sc
        self._lock = threading.Lock()
        self._engines: dict[str, SourceEngine] = {}
        # Engines being stopped: a new one for the same name (a restarted query)
        # waits for it, so two engines never share one source's logs.
        self._stopping: dict[str, threading.Event] = {}
        # Live reader sessions (queries) per source name, with the floor below which
        # each lets the logs be cleaned. A stopped query's session may end after
        # the next query's began, which must not stop that one's engine.
        self._floors = QueryFloors()
        self.service = SourceService({
            "initial": self._initial, "latest": self._latest,
            "partitions": self._partitions, "commit": self._commit, "stop": self._stop,
        }, on_session=self._session)

    def engine(self, body: dict[str, Any]) -> SourceEngine:
        options = options_of(body)
        with self._lock:
            stopping = self._stopping.get(options.name)
        if stopping is not None and not stopping.wait(STOP_TIMEOUT_S + 10):
            raise ServiceError(f"source {options.name!r}: the engine of an earlier query "
                               "is still stopping")
        with self._lock:
            engine = self._engines.get(options.name)
            if engine is not None:
                if engine.options.identity() != options.identity():
                    raise SourceOptionError(
                        f"source name {options.name!r} is already read in this driver with "
                        "other receivers or logs: give each source its own name")
                return engine
            # Under the lock: two readers of one name never start two engines.
            engine = self._engines[options.name] = SourceEngine.start(self.sc, options)
            return engine

    def _initial(self, body: dict[str, Any]) -> dict[str, int]:
        self.engine(body)  # the receivers start with the query
        return offsets.make_offset(offsets.BEFORE_FIRST)

    def _latest(self, body: dict[str, Any]) -> dict[str, int]:
        engine = self.engine(body)
        start = offsets.batch_of(body.get("start"))
        self._floors.started_at(engine.options.name, str(body.get("session")), start)
        end = engine.latest(start, body.get("max_blocks"), body.get("max_records"))
        return offsets.make_offset(end)

    def _partitions(self, body: dict[str, Any]) -> dict[str, Any]:
        engine = self.engine(body)
        start = offsets.batch_of(body.get("start"))
        self._floors.started_at(engine.options.name, str(body.get("session")), start)
        blocks = engine.blocks(start, offsets.batch_of(body.get("end")))
        limit = engine.options.max_partitions
        if limit is None:
            from walstream.driver.dstream.block_rdd import auto_max_partitions

            limit = auto_max_partitions(self.sc, len(engine.receivers))
        bootstrap, settings = engine.read_settings
        return {
            "partitions": [[[b.stream_id, b.block_id, b.handle.to_dict()] for b in run]
                           for run in offsets.plan_partitions(blocks, limit)],
            "bootstrap_servers": bootstrap,
            "kafka_settings": settings,
        }

    def _commit(self, body: dict[str, Any]) -> None:
        engine = self.engine(body)
        end = offsets.batch_of(body.get("end"))
        # Cleaned only up to what every live query of this source has committed.
        engine.commit(self._floors.committed(engine.options.name, str(body.get("session")),
                                             end))

    def _stop(self, body: dict[str, Any]) -> None:
        name = options_of(body).name
        if self._floors.ended(name, str(body.get("session"))) == 0:
            self._stop_engine(name)

    def _session(self, name: str, session: str, opened: bool) -> None:
        """A reader process of source ``name`` opened or ended its session. When the
        last one ends, its query stopped (or died), so the receivers stop too."""
        if opened:
            self._floors.opened(name, session)
            return
        if self._floors.ended(name, session) == 0:
            log.info("walstream source %r: its query's reader process ended", name)
            self._stop_engine(name)

    def _stop_engine(self, name: str) -> None:
        with self._lock:
            engine = self._engines.pop(name, None)
            if engine is None:
                return
            done = self._stopping[name] = threading.Event()
        try:
            engine.stop(STOP_TIMEOUT_S)
        finally:
            with self._lock:
                self._stopping.pop(name, None)
            done.set()

    def close(self) -> None:
        """Stop every engine, then the service."""
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            try:
                engine.stop()
            except Exception:
                log.exception("stopping the walstream source %r failed", engine.options.name)
        self.service.close()


_lock = threading.Lock()
_registry: SourceRegistry | None = None


def check_planner_python(python_exec: str, cwd: str | None = None) -> None:
    """Raise :class:`SourceOptionError` when the driver cannot start ``python_exec``.

    Spark plans a Python data source's micro-batches in a Python worker that the
    driver's JVM starts with the same interpreter path the executors use
    (``spark.pyspark.python``). A path relative to the working directory, such as
    ``./environment/bin/python`` for an ``--archives`` environment, then has to
    resolve on the driver too; in client mode Spark unpacks the archive only on the
    executors, and the query would fail later with a bare ``Cannot run program``.
    A bare name (``python3``) is looked up on ``PATH`` and is left to Spark."""
    if os.sep not in python_exec or os.path.isabs(python_exec):
        return
    path = os.path.join(cwd or os.getcwd(), python_exec)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise SourceOptionError(
            f"spark.pyspark.python is {python_exec!r}, which the driver cannot run from "
            f"its working directory {cwd or os.getcwd()!r}: Spark starts the walstream "
            "source's planning worker on the driver with that path. In client mode, "
            "submit from a directory where it resolves (unpack the archive there, or "
            "link it to the driver's environment: ln -s \"$VIRTUAL_ENV\" environment), or "
            "submit in cluster mode")


def register(spark: Any) -> None:
    """Register ``format("walstream")`` with ``spark`` and start this process's source
    service (once; later calls register again with the same service).

    Raises :class:`SourceOptionError` when the interpreter Spark would start the
    source's driver-side worker with cannot run here (:func:`check_planner_python`)."""
    global _registry
    check_planner_python(spark.sparkContext.pythonExec)
    # Before the source's first Python tasks (driver/python_sockets.py says why).
    prefer_unix_sockets(spark.sparkContext)
    with _lock:
        if _registry is None or _registry.sc is not spark.sparkContext:
            if _registry is not None:
                _registry.close()
            _registry = SourceRegistry(spark.sparkContext)
        registry = _registry
    spark.dataSource.register(data_source_class(registry.service.info_file))


def unregister() -> None:
    """Stop every source engine of this process and its service (also at exit)."""
    global _registry
    with _lock:
        registry, _registry = _registry, None
    if registry is not None:
        registry.close()


atexit.register(unregister)
