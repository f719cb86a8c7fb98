"""ReceiverSupervisor: runs a receiver and turns its data into durable, reported blocks.

Per block, in this order (store before report, report before source ack:
docs/ARCHITECTURE.md, invariants 1 and 2); step 1 is the block handler's
(receiver/block_handler.py), steps 2 and 3 are here:

1. Write the encoded block to the receiver's Kafka WAL and wait for ``acks=all``,
   retrying a bounded number of times. If every try fails, raise
   :class:`BlockStoreError`: the block is **not** reported and the receiver
   stops with the error reported to the driver.
2. Report ``AddBlock(stream id, block id, record count, WAL handle, source
   ranges)`` to the driver and wait for its answer, which it gives only after
   logging the block in its own WAL. No answer or a refusal raises
   :class:`BlockReportError`; the receiver stops. The report carries the
   receiver's figures since its last report (:class:`~walstream.receiver.block_info.BlockFigures`:
   the block's WAL write time and bytes, the source ends the receiver learnt), for
   the driver's metrics, when the reporter's ``add_block`` takes ``figures``.
3. Only then call ``receiver.on_block_reported``, where a receiver acknowledges
   its source (e.g. commits Kafka offsets). A crash before this step leaves the
   source unacknowledged: the data is read again, and the tracker keeps a
   re-reported block once.

Pipelining (``SupervisorConfig.pipelined_store``, on by default with a WAL whose
``pipelines_writes`` is true): the block generator's pusher begins step 1 of block
N+1 (encode, start the WAL write) before it waits for block N's acknowledgement and
reports N, so encoding and the driver round trip overlap the next write. This
is safe because only step 1 is moved: reports still go one at a time, in block
order, each after its own block's acknowledgement; and when N fails, N+1 may
be stored but is never reported, and a stored, unreported block is exactly the
state a crash between steps 1 and 2 leaves (its source is not acknowledged, the
data is read again, the WAL record is cleaned with its segment).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from walstream.killpoints import kill_point
from walstream.receiver.block import SourceRange
from walstream.receiver.block_generator import (
    BlockGenerator,
    BlockGeneratorConfig,
    encoded_bytes,
    new_block_id,
    split_by_bytes,
)
from walstream.receiver.block_handler import PendingBlock, StoreBounds, WalBlockHandler
from walstream.receiver.block_info import BlockFigures, ReceivedBlockInfo, SourceEnd
from walstream.receiver.errors import (
    BadRecordError,
    BlockGeneratorStoppedError,
    BlockReportError,
    BlockTooLargeError,
    EndpointSecurityError,
    ReceiverRefusedError,
)
from walstream.receiver.items import encode_item
from walstream.receiver.receiver import Receiver
from walstream.receiver.registration import Registration
from walstream.receiver.source_metadata import SourceTracker, check_source_metadata
from walstream.receiver.states import ReceiverState
from walstream.receiver.supervisor_config import BlockReporter, SupervisorConfig
from walstream.receiver.text_run import TextRun
from walstream.rpc.messages import MAX_SOURCE_ENDS
from walstream.wal.base import WriteAheadLog
from walstream.wal.handle import RecordHandle

log = logging.getLogger(__name__)


class ReceiverSupervisor:
    def __init__(
        self,
        receiver: Receiver,
        stream_id: int,
        wal: WriteAheadLog,
        reporter: BlockReporter,
        generator_config: BlockGeneratorConfig | None = None,
        config: SupervisorConfig | None = None,
        executor_id: str = "driver",
    ) -> None:
        self.receiver = receiver
        self.stream_id = stream_id
        self.wal = wal
        self.reporter = reporter
        self.config = config or SupervisorConfig()
        self.executor_id = executor_id
        self.generator = BlockGenerator(self, stream_id, generator_config)
        # Step 1 of the protocol (Spark's ReceivedBlockHandler): stores, never reports.
        self.blocks = WalBlockHandler(wal, stream_id, StoreBounds(
            self.config.store_retries, self.config.store_backoff_s,
            self.config.store_timeout_s, self.config.pipelined_store))
        self._sources = SourceTracker()
        self._block_sources: dict[str, tuple[SourceRange, ...]] = {}
        self._receiver_state = ReceiverState.INACTIVE
        self._state_lock = threading.RLock()
        self.receiver_stopped = threading.Event()
        self.stopped = threading.Event()  # set when stopping begins
        self.terminated = threading.Event()  # set when stop() has finished its work
        self.error: BaseException | None = None
        self.bad_records = 0
        self.start_positions: tuple[SourceRange, ...] = ()
        self.blocks_reported = 0
        self.records_reported = 0
        # Source ends the driver has from this registration: only changes are sent.
        self._ends_sent: dict[tuple[str, int], int] = {}
        receiver._attach(self, stream_id)

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        """Register with the driver (which may refuse), then start generator and receiver."""
        self.generator.start()
        self._start_receiver()

    def _start_receiver(self) -> None:
        reply = self.reporter.register_receiver(
            self.stream_id, socket.gethostname(), self.executor_id
        )
        ok, message = bool(reply[0]), str(reply[1])
        if isinstance(reply, Registration) and ok:
            # Resume where the driver's WAL says this stream's data ends.
            self.start_positions = reply.positions
            if reply.rate_limit > 0:
                self.generator.update_rate(reply.rate_limit)
        if not ok:
            exc = ReceiverRefusedError(
                f"receiver of stream {self.stream_id} was refused by the driver: {message}"
            )
            self.stop(str(exc), exc)
            raise exc
        with self._state_lock:
            self._receiver_state = ReceiverState.ACTIVE
            self.receiver_stopped.clear()
            self._ends_sent = {}
        self.receiver.onStart()

    def _stop_receiver(self, message: str, error: BaseException | None) -> None:
        with self._state_lock:
            self.receiver_stopped.set()
            if self._receiver_state is not ReceiverState.ACTIVE:
                return
            self._receiver_state = ReceiverState.DEREGISTERED
        try:
            self.receiver.onStop()
        except Exception as exc:
            log.error("stream %d: onStop failed: %s", self.stream_id, exc)
        if self.generator.is_active():
            # A restart (stop() has already pushed everything): report what the
            # receiver stored while the driver still accepts this receiver's blocks.
            self.generator.flush()
        self.reporter.deregister_receiver(self.stream_id, message, repr(error) if error else "")

    def stop(self, message: str, error: BaseException | None) -> None:
        """Stop the receiver, push every block already generated, deregister."""
        if error is not None and self.error is None:
            self.error = error
        with self._state_lock:
            if self.stopped.is_set():
                return
            self.stopped.set()
        # Order: (1) tell the receiver's threads to stop storing, (2) push every
        # generated block (stored, reported, source acknowledged), (3) onStop and
        # deregister. Closing the source before (2) would leave reported blocks
        # unacknowledged at the source, to be read again after a restart.
        try:
            self.receiver_stopped.set()
            self.generator.stop()
            self._stop_receiver(message, error)
        finally:
            self.terminated.set()

    def restart_receiver(self, message: str, error: BaseException | None = None,
                         delay_s: float | None = None) -> None:
        """Stop the receiver (onStop, push what it stored, deregister), wait, start it
        again (on a thread, as Spark does)."""
        delay = self.config.restart_delay_s if delay_s is None else delay_s

        def run() -> None:
            self._stop_receiver(f"Restarting receiver with delay {delay}s: {message}", error)
            time.sleep(delay)
            if not self.stopped.is_set():
                try:
                    self._start_receiver()
                except Exception as exc:
                    log.error("stream %d: restart failed: %s", self.stream_id, exc)

        threading.Thread(target=run, name=f"restart-{self.stream_id}", daemon=True).start()

    def is_receiver_started(self) -> bool:
        return self._receiver_state is ReceiverState.ACTIVE

    def is_receiver_stopped(self) -> bool:
        return self._receiver_state is not ReceiverState.ACTIVE

    def await_termination(self, timeout_s: float | None = None) -> bool:
        """Wait until stop() finished: every block pushed, receiver deregistered."""
        return self.terminated.wait(timeout_s)

    def report_error(self, message: str, error: BaseException | None) -> None:
        log.warning("stream %d: %s: %s", self.stream_id, message, error)
        with contextlib.suppress(Exception):
            self.reporter.report_error(self.stream_id, message, repr(error) if error else "")

    # -- data in -----------------------------------------------------------------

    def _encode(self, item: Any) -> bytes | None:
        try:
            data = encode_item(item)
        except BadRecordError as exc:
            self._bad_record(exc)
            return None
        return self._checked(data)

    def _checked(self, data: bytes) -> bytes | None:
        if len(data) > self.config.max_record_bytes:
            self._bad_record(BadRecordError(
                f"record of {len(data)} bytes exceeds max_record_bytes="
                f"{self.config.max_record_bytes}"))
            return None
        return data

    def encode_for_store(self, item: Any) -> bytes | None:
        """``item`` in its stored encoding, for :meth:`push_many_encoded`; None when it
        cannot be stored (not encodable, or over ``max_record_bytes``): then it was
        reported as a bad record, and under the ``fail`` policy this stops the
        receiver and raises :class:`~walstream.receiver.errors.BadRecordError`."""
        return self._encode(item)

    def report_bad_record(self, exc: BadRecordError) -> None:
        """A receiver met a record it cannot store (e.g. a socket line over its
        limit): count and report it; under the ``fail`` policy stop and raise."""
        self._bad_record(exc)

    def _bad_record(self, exc: BadRecordError) -> None:
        """Report and count a record that cannot be stored; under the ``fail``
        policy stop the receiver and raise, else the caller skips it."""
        self.bad_records += 1
        self.report_error("bad record skipped", exc)
        if self.config.bad_record_policy == "fail":
            self.stop(str(exc), exc)
            raise exc

    def push_single(self, item: Any, metadata: Any = None) -> None:
        """Store one item through the block generator. ``metadata``: its source
        position, in a shape :func:`~walstream.receiver.source_metadata.check_source_metadata`
        accepts (else :class:`~walstream.receiver.errors.SourceMetadataError`, nothing stored)."""
        check_source_metadata(metadata)
        data = self._encode(item)
        if data is None:
            # Still advance the source position: a skipped record counts as handled.
            self.generator.add_metadata_only(metadata)
            return
        self.generator.add_data(data, metadata)

    def _parts(self, records: Sequence[bytes], metadata: Any) -> list[Sequence[bytes]]:
        """``records`` cut into runs of at most ``max_block_bytes`` (a record over
        it alone). Source positions cannot be divided among several runs: the
        supervisor cannot tell which records a range or an offset belongs to (a
        range may span skipped records, partitions interleave), so a store that
        carries them and needs more than one run raises :class:`BlockTooLargeError`
        before anything is stored, rather than make a block the WAL may refuse."""
        cap = self.generator.config.max_block_bytes
        if encoded_bytes(records) <= cap:  # the usual case, counted without a loop
            return [records]
        parts: list[Sequence[bytes]] = list(split_by_bytes(list(records), cap))
        if len(parts) > 1 and metadata is not None:
            size = encoded_bytes(records)
            raise BlockTooLargeError(
                f"stream {self.stream_id}: {len(records)} records of {size} bytes stored "
                f"together with source positions exceed max_block_bytes={cap}, and the "
                "positions cannot be divided among blocks; store smaller lists or each "
                "record with its own position")
        return parts

    def push_many(self, items: list[Any], metadata: Any = None) -> None:
        """Items that go through the block generator together, into one block.

        ``metadata`` (for example the source ranges the items came from, skipped bad
        records included) is attached to that block, so the positions are
        acknowledged only when every item of the batch is stored and reported.
        Items over ``max_block_bytes`` in all go into several blocks, in order, when
        there is no ``metadata``; with it they are refused with
        :class:`~walstream.receiver.errors.BlockTooLargeError` before anything is stored
        (a single item over the cap goes into a block alone).
        """
        check_source_metadata(metadata)
        encoded = [d for d in (self._encode(i) for i in items) if d is not None]
        for part in self._parts(encoded, metadata):
            self.generator.add_multiple_data(part, metadata)

    def push_many_encoded(self, records: Sequence[bytes], metadata: Any = None) -> None:
        """:meth:`push_many` for items already in their stored encoding
        (:mod:`walstream.receiver.items`), as the Kafka and socket receivers build them (the
        Kafka receiver cuts its batches by bytes itself, with each part's own
        ranges), a :class:`~walstream.receiver.text_run.TextRun` included; only the size
        limit is checked."""
        check_source_metadata(metadata)
        limit = self.config.max_record_bytes
        if not (records.fits(limit) if isinstance(records, TextRun)
                else max(map(len, records), default=0) <= limit):
            records = [d for d in (self._checked(r) for r in records) if d is not None]
        for part in self._parts(records, metadata):
            self.generator.add_multiple_data(part, metadata, encoded_bytes(part))

    def push_array_buffer(self, items: list[Any], metadata: Any = None) -> None:
        """Store ``items`` as a block of their own, stored and reported before this
        returns (Spark's pushArrayBuffer). Over ``max_block_bytes`` in all they are
        stored as several blocks, in order, each reported before the next is
        stored (if one fails, those before it stay stored and reported, and the
        error is raised) when there is no ``metadata``; with it they are refused
        with :class:`~walstream.receiver.errors.BlockTooLargeError` before anything is
        stored (a single item over the cap is a block alone)."""
        check_source_metadata(metadata)
        failed = self.error or self.generator.failed
        if self.stopped.is_set() or failed is not None:
            # After a lost block, acknowledging a later one would skip the lost
            # records at the source; after stop, nobody is registered to report to.
            raise BlockGeneratorStoppedError(
                f"receiver of stream {self.stream_id} is stopped"
                + (f" after an error: {failed}" if failed is not None else "")
                + "; data not stored"
            )
        encoded = [d for d in (self._encode(i) for i in items) if d is not None]
        parts = self._parts(encoded, metadata)
        tracker = SourceTracker()
        tracker.add(metadata)  # None unless there is a single part
        source = tracker.take()
        for part in parts:
            block_id = new_block_id(self.stream_id)
            try:
                self._push_block(block_id, part, source)
            except Exception as exc:
                # Same as a failed push from the generator: record it at once (so no
                # later block gets through), report, stop the supervisor; the caller
                # gets the error too.
                if self.error is None:
                    self.error = exc
                self.on_error(f"pushing block {block_id} failed", exc)
                raise

    def push_iterator(self, items: Iterator[Any], metadata: Any = None) -> None:
        self.push_array_buffer(list(items), metadata)

    def push_bytes(self, data: bytes, metadata: Any = None) -> None:
        self.push_array_buffer([data], metadata)

    # -- BlockGeneratorListener ----------------------------------------------------

    def on_add_data(self, data: Any, metadata: Any) -> None:
        self._sources.add(metadata)

    def on_generate_block(self, block_id: str) -> None:
        self._block_sources[block_id] = self._sources.take()

    def on_push_block(self, block_id: str, records: Sequence[Any]) -> None:
        self.finish_push_block(self.begin_push_block(block_id, records))

    def begin_push_block(self, block_id: str, records: Sequence[Any]) -> PendingBlock | None:
        """Step 1 begun (the generator's pipelined pusher): encode, start the write."""
        return self.blocks.begin(block_id, records, self._block_sources.pop(block_id, ()))

    def finish_push_block(self, pending: PendingBlock | None) -> None:
        """Steps 1 (wait, retry) to 3 of a block :meth:`begin_push_block` began."""
        if pending is None:
            return
        handle = self.blocks.store(pending)
        kill_point("receiver.after_store_before_report")
        self._report(pending, handle)

    def on_error(self, message: str, error: BaseException) -> None:
        # The generator calls this only when it can no longer push or cut blocks
        # (any exception, not only BlockStoreError/BlockReportError): it already
        # refuses new data, so the supervisor must stop too, never hang half-dead.
        self.report_error(message, error)
        # Stop on another thread: stop() waits for the pushing thread we may be on.
        threading.Thread(target=self.stop, args=(message, error), daemon=True).start()

    # -- the durability protocol -----------------------------------------------------

    def _push_block(self, block_id: str, records: Sequence[bytes],
                    source: tuple[SourceRange, ...]) -> None:
        self.finish_push_block(self.blocks.begin(block_id, records, source))

    def _report(self, pending: PendingBlock, handle: RecordHandle) -> None:
        """Steps 2 and 3: report, wait for the driver's answer (given after its WAL
        write), and only then let the source learn that the data is safe."""
        block_id = pending.block_id
        info = ReceivedBlockInfo(self.stream_id, block_id, pending.count, handle,
                                 pending.source)
        figures = self._figures(pending) if self.config.send_figures else None
        for attempt in range(1, self.config.report_retries + 1):
            try:
                if self.reporter.add_block(info, figures=figures):
                    break
                raise BlockReportError(f"the driver refused block {block_id}")
            except Exception as exc:
                # A refused secret or session, or an answer without the driver's proof,
                # is refused again on every try: fail now, the source unacknowledged.
                if attempt == self.config.report_retries or isinstance(
                        exc, EndpointSecurityError):
                    raise BlockReportError(
                        f"block {block_id} of stream {self.stream_id} was stored but not "
                        f"acknowledged by the driver: {exc}") from exc
                time.sleep(self.config.report_backoff_s * attempt)
        self.blocks_reported += 1
        self.records_reported += pending.count
        if figures is not None:
            with self._state_lock:
                self._ends_sent.update(
                    {(e.topic, e.partition): e.end_offset for e in figures.source_ends})
        self.receiver.on_block_reported(block_id, pending.source)

    def _figures(self, pending: PendingBlock) -> BlockFigures:
        """The figures sent with ``pending``'s report: its WAL write, and the source
        ends the receiver knows that the driver has not been sent yet (at most
        ``MAX_SOURCE_ENDS``, the rest in later reports)."""
        try:
            known = self.receiver.source_ends()
        except Exception as exc:  # figures are never worth a lost block
            log.debug("stream %d: source_ends failed: %s", self.stream_id, exc)
            known = {}
        with self._state_lock:
            sent = dict(self._ends_sent)
        ends = [SourceEnd(t, p, end) for (t, p), end in sorted(known.items())
                if sent.get((t, p)) != end][:MAX_SOURCE_ENDS]
        seconds = pending.write_seconds
        return BlockFigures(max(0.0, seconds if seconds is not None else 0.0),
                            len(pending.payload), tuple(ends))

