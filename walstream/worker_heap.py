"""A Python worker's heap, frozen out of the cyclic garbage collector once.

Why: PySpark's daemon runs ``gc.collect()`` in a reused worker after every task,
and a full collection walks every object the collector tracks. A worker that read
blocks holds PySpark, gRPC, confluent-kafka, fastavro and this project's modules,
so at one-second batches of a few small tasks each, those collections cost more
CPU than reading the blocks. ``gc.freeze()`` moves every object that exists to a
permanent generation that collections skip; each later collection then walks only
what was allocated since.

The first task of this project that a worker runs (a block read, a direct-stream
range read) calls :func:`freeze_once` after its imports: it collects once, so no
garbage is frozen, and freezes. Outside a PySpark task (a driver or a test calling
the same function directly) it does nothing, so only workers are frozen.
Reference counting still frees frozen objects; an object frozen here that later
becomes garbage inside a reference cycle stays. That is bounded by what exists at
that one moment in each worker: modules and the first task's own closure.

Durability: none involved; no data is read or written.
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_once() -> None:
    """Collect and freeze this process's heap, the first time only, and only in a
    process running a PySpark task."""
    global _frozen
    if _frozen:
        return
    from pyspark import TaskContext  # loaded already in a worker

    if TaskContext.get() is None:
        return
    _frozen = True
    gc.collect()
    gc.freeze()
