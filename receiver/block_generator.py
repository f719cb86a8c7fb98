"""BlockGenerator: cut received items into blocks every block interval.

Protocol (as Spark's BlockGenerator, with a real bound on memory):

1. ``add_data`` waits for the rate limiter, then for room: when the queue of
   blocks waiting to be pushed is full *and* the current buffer reached its
   block size cap, the caller blocks. This is the receiver's backpressure: a
   slow WAL or driver slows ``store``, it never grows memory without bound.
2. Every ``block_interval_ms`` (or earlier when the buffer reaches
   ``max_block_records`` or ``max_block_bytes``, or the next item would not fit)
   the timer swaps the buffer for a new one and puts a block on the bounded
   queue (``on_generate_block`` runs inside the swap, so a listener can snapshot
   per-block source positions exactly).
3. The pushing thread takes blocks in order and calls ``on_push_block``; the
   supervisor stores the block in the WAL and reports it there. A listener with
   ``begin_push_block`` / ``finish_push_block`` gets them pipelined one deep:
   block N+1 is begun before N is finished, finishes stay in order, and a block
   in flight is finished as soon as no next block is waiting (so pipelining
   never delays a block); ``blocks_pushed`` counts finished blocks.
4. ``stop()``: stop accepting data, cut a last block, push every queued block,
   then return. Nothing added before ``stop`` is lost. ``flush()`` does the same
   without stopping (a receiver restart, before it deregisters).
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
import time
import uuid
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Protocol, cast, runtime_checkable

from walstream.errors import ConfigError
from walstream.receiver.errors import BlockGeneratorStoppedError, BlockGeneratorTimeoutError
from walstream.receiver.rate_limiter import RateLimiter
from walstream.receiver.text_run import TextRun
from walstream.wal.config import KafkaWalConfig

log = logging.getLogger(__name__)

#: Room a block keeps under the WAL's record limit for what is not record bytes:
#: the envelope, the block id and up to thousands of source ranges.
BLOCK_OVERHEAD_BYTES = 8 * 1024 * 1024
#: The largest ``max_block_bytes``: a block at the cap still fits the WAL's default
#: ``max_record_bytes``, so a burst never makes a block the WAL refuses (the store
#: would fail, the receiver stop and be relaunched into the same burst).
MAX_BLOCK_BYTES = KafkaWalConfig.max_record_bytes - BLOCK_OVERHEAD_BYTES
#: Avro bytes of one record's length prefix, at most.
_RECORD_OVERHEAD = 10


def item_bytes(data: Any) -> int:
    """What an item adds to a block's bytes: its length and its length prefix for
    bytes and str (the supervisor adds encoded bytes), 0 for anything else."""
    if isinstance(data, bytes | bytearray | memoryview | str):
        return len(data) + _RECORD_OVERHEAD
    return 0


def encoded_bytes(records: Sequence[bytes]) -> int:
    """``sum(item_bytes(r) for r in records)`` for records that are all bytes, summed
    in C (the supervisor's stored encodings are); for a :class:`TextRun`, from
    its lengths without building its items."""
    if isinstance(records, TextRun):
        return records.body_bytes + (len(records.tag) + _RECORD_OVERHEAD) * records.length
    return sum(map(len, records)) + _RECORD_OVERHEAD * len(records)


def byte_runs(sizes: list[int], cap: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` runs of items of these sizes (each >= 0), in order, each totalling
    at most ``cap`` (an item over ``cap`` on its own is a run alone), cut greedily:
    a run takes items until the next would pass ``cap``. Running sums and a bisect
    per run, not a Python step per item."""
    sums = list(accumulate(sizes))
    runs = []
    lo, base = 0, 0
    while lo < len(sums):
        hi = max(lo + 1, bisect_right(sums, base + cap, lo))
        runs.append((lo, hi))
        lo, base = hi, sums[hi - 1]
    return runs


def split_by_bytes(records: list[Any], cap: int) -> list[list[Any]]:
    """``records`` in order, cut into runs whose :func:`item_bytes` total at most
    ``cap`` (a record over ``cap`` on its own is a run alone); ``[records]`` when
    they fit together, an empty list included."""
    runs = byte_runs(list(map(item_bytes, records)), cap)
    return [records[lo:hi] for lo, hi in runs] if len(runs) > 1 else [records]


@dataclass(frozen=True)
class BlockGeneratorConfig:
    """``block_interval_ms`` (Spark's spark.streaming.blockInterval, 200 ms),
    ``queue_size`` (spark.streaming.blockQueueSize, 10 blocks),
    ``rate_limit`` records/s (spark.streaming.receiver.maxRate; 0 = unlimited),
    ``max_block_records`` and ``max_block_bytes`` caps of one block (an item or a
    batch larger than ``max_block_bytes`` on its own goes into a block alone),
    ``put_timeout_s`` bound on how long ``add_data`` may block before raising
    (0 = wait for ever, as Spark does)."""

    block_interval_ms: int = 200
    queue_size: int = 10
    rate_limit: float = 0.0
    max_block_records: int = 100_000
    put_timeout_s: float = 0.0
    max_block_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.block_interval_ms < 1:
            raise ConfigError("block_interval_ms must be >= 1")
        if self.queue_size < 1:
            raise ConfigError("queue_size must be >= 1")
        if self.rate_limit < 0:
            raise ConfigError("rate_limit must be >= 0")
        if self.max_block_records < 1:
            raise ConfigError("max_block_records must be >= 1")
        if self.put_timeout_s < 0:
            raise ConfigError("put_timeout_s must be >= 0")
        if not 1 <= self.max_block_bytes <= MAX_BLOCK_BYTES:
            raise ConfigError(f"max_block_bytes must be 1..{MAX_BLOCK_BYTES} (below the "
                              "WAL's max_record_bytes)")


class BlockGeneratorListener(Protocol):
    """Spark's BlockGeneratorListener hooks (PEP 8 names).

    ``on_add_data`` and ``on_generate_block`` run under the generator's lock, so
    together they see every item exactly once and in order: the place to track
    source positions per block. ``on_push_block`` runs on the pushing thread.
    """

    def on_add_data(self, data: Any, metadata: Any) -> None: ...

    def on_generate_block(self, block_id: str) -> None: ...

    def on_push_block(self, block_id: str, records: Sequence[Any]) -> None: ...

    def on_error(self, message: str, error: BaseException) -> None: ...


@runtime_checkable
class PipelinedPushListener(Protocol):
    """Hooks a listener may add: ``begin_push_block`` starts a block's push and
    returns a token; ``finish_push_block(token)`` completes it (the pusher calls it
    in block order). A listener that has both (the ReceiverSupervisor) gets them
    instead of ``on_push_block``."""

    def begin_push_block(self, block_id: str, records: Sequence[Any]) -> Any: ...

    def finish_push_block(self, token: Any) -> None: ...


class _State(enum.Enum):
    INITIALIZED = 0
    ACTIVE = 1
    STOPPED_ADDING_DATA = 2
    STOPPED_GENERATING_BLOCKS = 3
    STOPPED_ALL = 4


def new_block_id(stream_id: int) -> str:
    return f"input-{stream_id}-{uuid.uuid4().hex}"


def _block_records(pieces: list[list[Any] | TextRun]) -> Sequence[Any]:
    """A block's records from the pieces added since the last cut: runs of one tag
    stay one run (their text is never split), anything else becomes one list."""
    if len(pieces) == 1:
        return pieces[0]
    if all(isinstance(p, TextRun) for p in pieces):
        runs = cast(list[TextRun], pieces)
        if len({r.tag for r in runs}) == 1:
            return TextRun.concat(runs)
    return [item for piece in pieces for item in piece]


class BlockGenerator:
    def __init__(
        self,
        listener: BlockGeneratorListener,
        stream_id: int,
        config: BlockGeneratorConfig | None = None,
    ) -> None:
        self.listener = listener
        self.stream_id = stream_id
        self.config = config or BlockGeneratorConfig()
        self._limiter = RateLimiter(self.config.rate_limit)
        self._cond = threading.Condition()
        # What was added since the last cut, in order: lists of items and runs.
        self._buffer: list[list[Any] | TextRun] = []
        self._buffer_count = 0
        self._buffer_bytes = 0
        self._cut_wanted = False  # an adder waits for a block to be cut to fit its item
        self._queue: queue.Queue[tuple[str, Sequence[Any]] | None] = queue.Queue(
            self.config.queue_size)
        self._state = _State.INITIALIZED
        self._timer = threading.Thread(target=self._timer_loop, name="block-timer", daemon=True)
        self._pusher = threading.Thread(target=self._push_loop, name="block-pusher", daemon=True)
        self.blocks_generated = 0
        self.blocks_pushed = 0
        self._flush_requested = False
        self.records_added = 0
        self.failed: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        with self._cond:
            if self._state is not _State.INITIALIZED:
                raise BlockGeneratorStoppedError(f"cannot start a generator in {self._state.name}")
            self._state = _State.ACTIVE
        self._timer.start()
        self._pusher.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop accepting data, cut the last block, push every queued block."""
        with self._cond:
            if self._state is not _State.ACTIVE:
                return
            self._state = _State.STOPPED_ADDING_DATA
            self._cond.notify_all()
        self._timer.join(timeout_s)  # it cuts the last block and exits
        self._pusher.join(timeout_s)  # it drains the queue and exits
        if self._pusher.is_alive():
            # A store is still retrying: its block is not reported yet, and once the
            # WAL is closed under it the store fails and the block is never reported
            # (its source positions stay unacknowledged, so they are read again).
            log.error("stream %d: blocks still being pushed after %.0f s; stopping anyway",
                      self.stream_id, timeout_s)
        with self._cond:
            self._state = _State.STOPPED_ALL

    def flush(self, timeout_s: float = 60.0) -> bool:
        """Cut the current buffer now and wait until every block generated so far
        was pushed; the generator keeps running. False when pushing failed or the
        wait timed out (a restarting supervisor uses this before deregistering)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            target = self.blocks_generated + (1 if self._buffer else 0)
            self._flush_requested = True
            self._cond.notify_all()
            while self.blocks_pushed < target:
                remaining = deadline - time.monotonic()
                if self.failed is not None or remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.05))
            return True

    def is_active(self) -> bool:
        return self._state is _State.ACTIVE

    def is_stopped(self) -> bool:
        return self._state is _State.STOPPED_ALL

    def update_rate(self, rate: float) -> None:
        self._limiter.update_rate(rate)

    @property
    def rate_limit(self) -> float:
        return self._limiter.rate

    # -- adding data -------------------------------------------------------------

    def add_data(self, data: Any, metadata: Any = None) -> None:
        """Add one item (Spark's addData / addDataWithCallback)."""
        self._limiter.acquire(1)
        size = item_bytes(data)
        with self._cond:
            self._wait_for_room(1, size)
            self._append([data])
            self._buffer_bytes += size
            self.records_added += 1
            self.listener.on_add_data(data, metadata)

    def add_multiple_data(self, items: Iterable[Any], metadata: Any = None,
                          size: int | None = None) -> None:
        """Add items that must land in one block together (addMultipleDataWithCallback).
        ``size``: their :func:`item_bytes` in all, when the caller counted it. A
        :class:`TextRun` is kept as it is (never built into its items while the
        block holds nothing else)."""
        batch = items if isinstance(items, TextRun) else list(items)
        self._limiter.acquire(len(batch))
        if size is None:
            size = (encoded_bytes(batch) if isinstance(batch, TextRun)
                    else sum(item_bytes(d) for d in batch))
        with self._cond:
            self._wait_for_room(len(batch), size)
            self._append(batch)
            self._buffer_bytes += size
            self.records_added += len(batch)
            self.listener.on_add_data(batch, metadata)

    def _append(self, batch: list[Any] | TextRun) -> None:
        """Buffer ``batch`` (caller holds the lock): items join the list of items at
        the buffer's end, a run stays whole."""
        if not batch:
            return
        last = self._buffer[-1] if self._buffer else None
        if isinstance(batch, list) and isinstance(last, list):
            last.extend(batch)
        else:
            self._buffer.append(batch)
        self._buffer_count += len(batch)

    def add_metadata_only(self, metadata: Any) -> None:
        """Record a source position with no data (a skipped bad record), in order."""
        with self._cond:
            if self._state is not _State.ACTIVE:
                raise BlockGeneratorStoppedError(
                    f"block generator of stream {self.stream_id} no longer accepts data"
                )
            self.listener.on_add_data(None, metadata)

    def _wait_for_room(self, n: int, size: int) -> None:
        deadline = (
            time.monotonic() + self.config.put_timeout_s if self.config.put_timeout_s else None
        )
        while True:
            if self._state is not _State.ACTIVE:
                raise BlockGeneratorStoppedError(
                    f"block generator of stream {self.stream_id} no longer accepts data "
                    f"({self._state.name})"
                )
            if not self._buffer or (
                self._buffer_count + n <= self.config.max_block_records
                and self._buffer_bytes + size <= self.config.max_block_bytes
            ):
                return
            self._cut_wanted = True
            self._cond.notify_all()  # ask the timer to cut a block early
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise BlockGeneratorTimeoutError(
                    f"stream {self.stream_id}: blocked on a full block queue for "
                    f"{self.config.put_timeout_s}s (the WAL or driver is not keeping up)"
                )
            self._cond.wait(0.05 if remaining is None else min(remaining, 0.05))

    # -- threads -----------------------------------------------------------------

    def _cut(self) -> tuple[str, Sequence[Any]] | None:
        """Swap the buffer for a new one (caller holds the lock)."""
        if not self._buffer:
            return None
        block_id = new_block_id(self.stream_id)
        records, self._buffer = _block_records(self._buffer), []
        self._buffer_count, self._buffer_bytes, self._cut_wanted = 0, 0, False
        self.listener.on_generate_block(block_id)
        self.blocks_generated += 1
        self._cond.notify_all()
        return block_id, records

    def _timer_loop(self) -> None:
        interval = self.config.block_interval_ms / 1000.0
        next_cut = time.monotonic() + interval
        try:
            while True:
                with self._cond:
                    while (
                        self._state is _State.ACTIVE
                        and time.monotonic() < next_cut
                        and self._buffer_count < self.config.max_block_records
                        and self._buffer_bytes < self.config.max_block_bytes
                        and not self._cut_wanted
                        and not self._flush_requested
                    ):
                        self._cond.wait(max(0.0, next_cut - time.monotonic()))
                    stopping = self._state is not _State.ACTIVE
                    block = self._cut()
                    self._flush_requested = False
                if time.monotonic() >= next_cut:
                    next_cut += interval * max(1, int((time.monotonic() - next_cut) / interval) + 1)
                if block is not None:
                    # Blocking put: a full queue holds the timer, the buffer then fills
                    # up to max_block_records and add_data blocks (backpressure).
                    self._queue.put(block)
                if stopping:
                    with self._cond:
                        self._state = _State.STOPPED_GENERATING_BLOCKS
                    self._queue.put(None)
                    return
        except BaseException as exc:  # report, never die silently
            # No block will be cut any more: refuse new data (add_data raises)
            # instead of buffering it where nothing would ever push it.
            with self._cond:
                if self.failed is None:
                    self.failed = exc
                if self._state is _State.ACTIVE:
                    self._state = _State.STOPPED_ADDING_DATA
                self._cond.notify_all()
            self.listener.on_error("block generator timer failed", exc)
            self._queue.put(None)

    def _push_loop(self) -> None:
        pipe = self.listener if isinstance(self.listener, PipelinedPushListener) else None
        finish = pipe.finish_push_block if pipe is not None else None
        pending: tuple[str, Any] | None = None  # (block id, token) begun, not finished
        block_id = ""
        ended = False  # the end marker was taken: nothing more will come to drain
        try:
            while True:
                if pending is None:
                    item = self._queue.get()
                else:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        # Nothing to overlap with: finish the block in flight now.
                        block_id = pending[0]
                        self._finished(finish, pending[1])
                        pending = None
                        continue
                if item is None:
                    ended = True
                    if pending is not None:
                        block_id = pending[0]
                        self._finished(finish, pending[1])
                    return
                block_id, records = item
                if pipe is None:
                    self.listener.on_push_block(block_id, records)
                    self._finished(None, None)
                    continue
                begun = block_id
                prev, pending = pending, None
                try:
                    pending = (begun, pipe.begin_push_block(begun, records))
                finally:
                    # Block N is finished whether or not N+1 could begin: a bad block
                    # N+1 must not cost N its report. block_id names the block whose
                    # step raised, for the error below.
                    if prev is not None:
                        block_id = prev[0]
                        self._finished(finish, prev[1])
                        block_id = begun
        except BaseException as exc:
            # Stop pushing: a later block must never be reported (and its source
            # acknowledged) after an earlier one was lost, or the source would
            # skip the lost records. The unpushed blocks were never reported, so
            # their source positions were never acknowledged: a restarted
            # receiver reads them again (a block begun but not finished may be in
            # the WAL: stored and unreported, as after a crash between the steps).
            with self._cond:
                self.failed = exc
                if self._state is _State.ACTIVE:
                    self._state = _State.STOPPED_ADDING_DATA
                self._cond.notify_all()
            self.listener.on_error(f"pushing block {block_id} failed", exc)
            if pending is not None and pending[0] != block_id:
                log.warning("stream %d: block %s begun (maybe stored), left unreported "
                            "after a push failure", self.stream_id, pending[0])
            if not ended:
                self._drain_after_failure()

    def _finished(self, finish: Any, token: Any) -> None:
        if finish is not None:
            finish(token)
        with self._cond:
            self.blocks_pushed += 1
            self._cond.notify_all()

    def _drain_after_failure(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            log.warning("stream %d: block %s dropped unreported after a push failure",
                        self.stream_id, item[0])
