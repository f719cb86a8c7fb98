"""Receiver: the class users subclass to bring data in (Spark's names).

A receiver runs ``onStart`` (which must return quickly and start its own
threads), calls ``store`` with what it receives, and stops in ``onStop``. Its
supervisor turns stored data into blocks, writes each block to the Kafka WAL
and reports it to the driver; ``store`` blocks when that does not keep up.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from walstream.receiver.errors import ReceiverError

if TYPE_CHECKING:
    from walstream.receiver.supervisor import ReceiverSupervisor


class Receiver:
    """Base class of every receiver (``pyspark``-style camelCase API, as in Spark).

    Picklable: the supervisor and the application's Kafka settings are given to it
    on the executor, never pickled (so the driver's graph and its checkpoints hold
    no secret of them).
    """

    def __init__(self, preferred_location: str | None = None) -> None:
        self._preferred_location = preferred_location
        self._supervisor: ReceiverSupervisor | None = None
        self._stream_id = -1

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_supervisor"] = None
        state.pop("_kafka_settings", None)
        return state

    # -- to override -------------------------------------------------------------

    def onStart(self) -> None:
        raise NotImplementedError

    def onStop(self) -> None:
        raise NotImplementedError

    def on_block_reported(self, block_id: str, metadata: Any) -> None:
        """Called after the driver acknowledged a block: acknowledge the source here."""

    def source_ends(self) -> dict[tuple[str, int], int]:
        """The source partition ends this receiver knows now: ``(topic, partition) ->``
        the next offset the source will write, as last learnt from the source (no
        extra request). Sent to the driver with the block reports, for the Kafka lag
        of its metrics; the driver keeps only declared source topics
        (:meth:`source_topics`). Called from the supervisor's pushing thread. The
        default: none."""
        return {}

    def source_topics(self) -> Iterable[str] | None:
        """The source topics this receiver's blocks name in their source ranges
        (``store(..., metadata)`` positions). The driver refuses a range naming any
        other topic, so no one holding this stream's session can move another
        source's positions. None (the default): this receiver reports no ranges."""
        return None

    # -- Spark's API -------------------------------------------------------------

    @property
    def streamId(self) -> int:
        return self._stream_id

    @property
    def preferredLocation(self) -> str | None:
        return self._preferred_location

    @property
    def kafka_settings(self) -> dict[str, str]:
        """The application's Kafka client settings (``spark.walstream.kafka.*``:
        security protocol, SASL, TLS, ...), given by the receiver's task before
        ``onStart``. A receiver that creates Kafka clients applies them under its
        own parameters; empty outside a receiver task."""
        return dict(getattr(self, "_kafka_settings", {}))

    def _use_kafka_settings(self, settings: dict[str, str]) -> None:
        self._kafka_settings = dict(settings)

    def _attach(self, supervisor: ReceiverSupervisor, stream_id: int) -> None:
        self._supervisor = supervisor
        self._stream_id = stream_id

    @property
    def supervisor(self) -> ReceiverSupervisor:
        if self._supervisor is None:
            raise ReceiverError("this receiver is not started by a supervisor")
        return self._supervisor

    def store(self, data: Any, metadata: Any = None) -> None:
        """Store one item (``bytes`` included), a list, or an iterator.

        Single items go through the block generator (rate limit, block interval).
        A list or an iterator becomes one block of its own, stored and reported
        before ``store`` returns (Spark's pushArrayBuffer / pushIterator): when it
        returns, that data is durable and known to the driver. One over the
        generator's ``max_block_bytes`` becomes several blocks, in order, each
        within the cap; if it carries ``metadata`` (source positions, which cannot
        be divided among blocks) it is refused with
        :class:`~walstream.receiver.errors.BlockTooLargeError` before anything is stored.

        Spark's ``store(ByteBuffer)`` (a pre-serialized block) is
        :meth:`storeBytes` here, because in Python ``bytes`` is the ordinary type of
        a single record (a Kafka value, a socket line) and must not change meaning.
        """
        sup = self.supervisor
        if isinstance(data, list):
            sup.push_array_buffer(data, metadata)
        elif isinstance(data, Iterator):
            sup.push_iterator(data, metadata)
        else:
            sup.push_single(data, metadata)

    def storeBytes(self, data: bytes, metadata: Any = None) -> None:
        """Store ``data`` as a block of its own, synchronously (Spark's pushBytes)."""
        self.supervisor.push_bytes(bytes(data), metadata)

    def storeMany(self, items: Iterable[Any], metadata: Any = None) -> None:
        """Store several single items through the block generator, in one block.

        Cheaper per item than :meth:`store` of each (one rate-limiter and lock
        round per call), and ``metadata`` (for example the source ranges of the
        items) is acknowledged only together with all of them. Items over
        ``max_block_bytes`` in all go into several blocks without ``metadata``,
        and are refused with :class:`~walstream.receiver.errors.BlockTooLargeError` with it.
        """
        self.supervisor.push_many(list(items), metadata)

    def restart(self, message: str, error: BaseException | None = None) -> None:
        self.supervisor.restart_receiver(message, error)

    def stop(self, message: str) -> None:
        self.supervisor.stop(message, None)

    def reportError(self, message: str, error: BaseException | None) -> None:
        self.supervisor.report_error(message, error)

    def isStarted(self) -> bool:
        return self._supervisor is not None and self._supervisor.is_receiver_started()

    def isStopped(self) -> bool:
        return self._supervisor is None or self._supervisor.is_receiver_stopped()

    def stopped_event(self) -> threading.Event:
        """An event set when the receiver stops (for ``onStart`` threads to wait on)."""
        return self.supervisor.receiver_stopped
