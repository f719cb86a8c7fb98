"""The application's driver WAL, opened the one way every reader and writer of it
must: the engine, the Structured Streaming source engine, ``walstream inspect`` and
the test harnesses.

It is an epoch chain (wal/epoch_chain.py): one log per lease epoch, each new
leader's log linked to the cut it drew in the one before. An app that never ran
with high availability has only epoch 0's log, the plain ``<app id>-driver``, which
the chain reads, writes and cleans exactly as a plain log. Opening it any other
way (a plain log of the same name) would read an HA app's epoch 0 only, and show
or replay the wrong state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from walstream.wal import BatchedWriteAheadLog, WriteAheadLog
from walstream.wal.epoch_chain import EpochChainLog

if TYPE_CHECKING:
    from walstream.driver.ui.metrics import EngineMetrics


def driver_wal_name(app_id: str) -> str:
    """The name of ``app_id``'s driver WAL (its epoch 0 log)."""
    return f"{app_id}-driver"


def open_driver_wal(bootstrap_servers: str, app_id: str,
                    wal_options: Mapping[str, Any] | None = None,
                    metrics: EngineMetrics | None = None,
                    delete_guard: Callable[[], None] | None = None) -> WriteAheadLog:
    """``app_id``'s driver WAL: the epoch chain, its writes batched (one record a
    group of events), metered into ``metrics`` when given; ``delete_guard`` runs
    right before each destructive step of a clean (KafkaWriteAheadLog). Creates no
    topic."""
    name = driver_wal_name(app_id)
    chain = EpochChainLog(bootstrap_servers, name, epoch=0, delete_guard=delete_guard,
                          **dict(wal_options or {}))
    wal: WriteAheadLog = BatchedWriteAheadLog(chain)
    if metrics is not None:
        from walstream.driver.ui.metrics import MeteredWriteAheadLog

        wal = MeteredWriteAheadLog(wal, name, metrics)
    return wal
