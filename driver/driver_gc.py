"""A full GC of the driver JVM every few minutes, for a driver that runs for weeks.

Why: Spark removes a finished batch's shuffle files, broadcasts and cached blocks
only once the driver JVM has garbage-collected the objects that named them
(ContextCleaner's weak references), and G1 gives heap it has committed back to the
OS only after a full collection. A streaming driver makes a shuffle every batch but
holds little live data, so its old generation is rarely collected; Spark's own
safety net is a ``System.gc()`` every ``spark.cleaner.periodicGC.interval`` (30
minutes by default), long enough for the driver JVM's memory to grow by a large
fraction between two collections (docs/decisions/driver-periodic-gc.md).

So a started StreamingContext asks its driver JVM for a full GC (``System.gc()``
through Py4J) every ``spark.walstream.driver.periodicGC.interval`` (default
``5min``; ``0`` turns it off). When the application set
``spark.cleaner.periodicGC.interval`` itself, that choice stands and nothing is
started here. A JVM started with ``-XX:+DisableExplicitGC`` ignores the request.

Durability: none involved; the GC reads and writes no data. A failed request (the
context stopping) is logged at debug level and ends the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from walstream.driver.durations import conf_time_ms

log = logging.getLogger(__name__)

CONF_INTERVAL = "spark.walstream.driver.periodicGC.interval"
DEFAULT_INTERVAL = "5min"
SPARK_CONF_INTERVAL = "spark.cleaner.periodicGC.interval"


def gc_interval_s(conf: dict[str, str]) -> float | None:
    """Seconds between the driver's full GCs by ``conf``, or None: none to run."""
    if SPARK_CONF_INTERVAL in conf:
        return None
    ms = conf_time_ms(conf.get(CONF_INTERVAL, DEFAULT_INTERVAL), CONF_INTERVAL,
                      bare_unit_ms=1000)
    return ms / 1000 if ms > 0 else None


class PeriodicDriverGC:
    """A daemon thread asking the JVM behind ``sc`` for a full GC every ``interval_s``."""

    def __init__(self, sc: Any, interval_s: float) -> None:
        self._sc = sc
        self.interval_s = interval_s
        self.collections = 0
        self.last_pause_s: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="walstream-driver-gc",
                                        daemon=True)

    @classmethod
    def start_for(cls, sc: Any, conf: dict[str, str]) -> PeriodicDriverGC | None:
        interval = gc_interval_s(conf)
        if interval is None:
            return None
        gc = cls(sc, interval)
        gc._thread.start()
        return gc

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            t0 = time.monotonic()
            try:
                self._sc._jvm.java.lang.System.gc()
            except Exception as exc:  # the context is stopping: nothing depends on this
                log.debug("driver GC request failed, no more will be made: %s", exc)
                return
            self.last_pause_s = time.monotonic() - t0
            self.collections += 1
            log.debug("driver JVM full GC took %.0f ms", self.last_pause_s * 1000)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
