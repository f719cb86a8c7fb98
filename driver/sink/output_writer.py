"""Who writes an output operation's records: the writer identity exactly-once sinks
key their output by.

A re-run of a batch must replace what the same writer wrote for that batch, and
never what someone else wrote: two applications into one topic, two output
operations of one application, a query restarted on a fresh checkpoint (whose
micro-batch ids start at 0 again). So a sink's output is keyed by
``(writer, batch, partition)``, where the writer is

1. the name the user gave the sink (``KafkaSink(..., writer="billing-v2")``), else
2. inside a StreamingContext's output operation: ``<app id>/output-<n>``. The app id
   is stable across restarts from one checkpoint directory (it names the
   application's WALs too) and distinct between checkpoint directories; ``n`` is
   the output operation's place in the graph, which a restart checks against the
   checkpoint's fingerprint. The engine runs each output job inside
   :func:`writing_as`.
3. inside a Structured Streaming ``foreachBatch``: ``query-<id>``, the query's id,
   which Spark keeps in the checkpointLocation (the same after a restart from it,
   new for a fresh one) and sets on the micro-batch thread.

Anything else has no identity and an exactly-once sink refuses to write.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from walstream.errors import ConfigError

#: The longest writer identity, in UTF-8 bytes; it goes into every record's headers.
MAX_WRITER_BYTES = 200
#: The local property Structured Streaming sets to the query's id on its thread.
QUERY_ID_PROPERTY = "sql.streaming.queryId"

_CURRENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "walstream_output_writer", default=None)


def check_writer(writer: str) -> str:
    """``writer`` if it can name a writer: a non-empty str of printable characters,
    at most :data:`MAX_WRITER_BYTES` bytes; else :class:`ConfigError`."""
    if not isinstance(writer, str) or not writer:
        raise ConfigError(f"a writer identity is a non-empty str, not {writer!r}")
    if not writer.isprintable() or len(writer.encode("utf-8")) > MAX_WRITER_BYTES:
        raise ConfigError(f"a writer identity is printable and at most {MAX_WRITER_BYTES} "
                          f"bytes: {writer[:60]!r}")
    return writer


def output_writer(app_id: str, output_id: int) -> str:
    """The derived identity of output operation ``output_id`` of application ``app_id``."""
    return check_writer(f"{app_id}/output-{output_id}")


@contextmanager
def writing_as(writer: str) -> Iterator[None]:
    """Run the block as ``writer``: :func:`current_writer` returns it there, in this
    thread (or task) only."""
    token = _CURRENT.set(check_writer(writer))
    try:
        yield
    finally:
        _CURRENT.reset(token)


def current_writer(sc: Any = None) -> str | None:
    """The writer of the output operation running in this thread: the one set by
    :func:`writing_as`, else the Structured Streaming query whose micro-batch runs
    here (read from ``sc``'s local properties), else None."""
    writer = _CURRENT.get()
    if writer is not None:
        return writer
    if sc is not None:
        try:
            query_id = sc.getLocalProperty(QUERY_ID_PROPERTY)
        except Exception:  # a SparkContext double, or one already stopped
            query_id = None
        if query_id:
            return check_writer(f"query-{query_id}")
    return None
