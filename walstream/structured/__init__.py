"""Receivers as a Structured Streaming source: ``spark.readStream.format("walstream")``.

::

    import walstream
    walstream.register(spark)
    df = (spark.readStream.format("walstream")
          .option("name", "clicks")
          .option("receiver", "myapp.receivers:ClickReceiver")
          .load())

Receivers store each block in a Kafka log before they report it, and every
offset a query is given names an allocation logged before it was returned, so a
restarted query with the same ``checkpointLocation`` and source ``name`` reads the
same blocks in each micro-batch (:mod:`walstream.structured.source_engine`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the ``walstream`` format with ``spark``
    (see :mod:`walstream.structured.registry`)."""
    from walstream.structured.registry import register as _register

    _register(spark)
