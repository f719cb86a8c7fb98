"""Broker-free doubles for the receiver tests: an in-memory WAL and a fake driver.

``MemoryWAL`` is a real :class:`~wal.base.WriteAheadLog` (five methods, the same
durability contract) that can fail writes on demand. ``FakeReporter`` is the
driver side of :class:`~receiver.supervisor.BlockReporter`: it records every
call, can refuse registration or blocks, and checks *inside* ``add_block`` that
the reported block is already readable from the WAL at its handle (store before
report). A violation is recorded, not raised: the supervisor would swallow and
retry an exception raised there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from receiver.block import Block, SourceRange
from receiver.block_generator import BlockGenerator, BlockGeneratorConfig
from receiver.block_info import ReceivedBlockInfo
from receiver.items import decode_item
from receiver.receiver import Receiver
from receiver.supervisor import ReceiverSupervisor, SupervisorConfig
from wal.base import WriteAheadLog
from wal.errors import RecordNotFoundError, WalClosedError, WalWriteError
from wal.handle import RecordHandle

WAIT_S = 5.0  # bound of every wait in this suite: a bug fails a test, never hangs it


def wait_until(cond: Callable[[], bool], timeout_s: float = WAIT_S, what: str = "") -> None:
    """Poll ``cond`` until it holds; fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what or cond}")
        time.sleep(0.005)


class MemoryWAL(WriteAheadLog):
    """A thread-safe in-memory WAL. ``fail_writes`` makes the next N writes fail
    (``-1``: every write) with ``fail_with`` (default :class:`WalWriteError`)."""

    topic = "mem-wal"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[tuple[int, bytes] | None] = []
        self.closed = False
        self.fail_writes = 0
        self.fail_with: Callable[[], BaseException] = lambda: WalWriteError("injected failure")
        self.write_attempts = 0
        self.failed_writes = 0

    def write(self, record: bytes, time_ms: int) -> RecordHandle:
        with self._lock:
            if self.closed:
                raise WalClosedError("closed")
            self.write_attempts += 1
            if self.fail_writes != 0:
                if self.fail_writes > 0:
                    self.fail_writes -= 1
                self.failed_writes += 1
                raise self.fail_with()
            self._records.append((time_ms, bytes(record)))
            return RecordHandle(self.topic, 0, len(self._records) - 1)

    def read(self, handle: RecordHandle) -> bytes:
        with self._lock:
            if self.closed:
                raise WalClosedError("closed")
            if handle.topic != self.topic or not 0 <= handle.offset < len(self._records):
                raise RecordNotFoundError(f"no record at {handle}")
            rec = self._records[handle.offset]
            if rec is None:
                raise RecordNotFoundError(f"record at {handle} was cleaned")
            return rec[1]

    def read_all(self) -> Iterator[bytes]:
        with self._lock:
            if self.closed:
                raise WalClosedError("closed")
            out = [r[1] for r in self._records if r is not None]
        yield from out

    def clean(self, thresh_time_ms: int, wait_for_completion: bool) -> None:
        with self._lock:
            if self.closed:
                raise WalClosedError("closed")
            self._records = [
                None if r is None or r[0] < thresh_time_ms else r for r in self._records
            ]

    def close(self) -> None:
        with self._lock:
            self.closed = True

    def __len__(self) -> int:
        with self._lock:
            return sum(r is not None for r in self._records)


class FakeReporter:
    """Records every BlockReporter call; ``register_answer`` / ``add_block_answer``
    decide the driver's answers (``add_block_answer`` may be an exception)."""

    def __init__(self, wal: MemoryWAL) -> None:
        self.wal = wal
        self.lock = threading.Lock()
        self.calls: list[tuple[str, Any]] = []
        self.register_answer: tuple[bool, str] = (True, "registered")
        self.add_block_answer: bool | BaseException = True
        self.add_block_attempts = 0
        self.blocks: list[ReceivedBlockInfo] = []  # accepted blocks, in report order
        self.errors: list[tuple[str, str]] = []
        self.violations: list[str] = []

    def register_receiver(self, stream_id: int, host: str, executor_id: str) -> tuple[bool, str]:
        with self.lock:
            self.calls.append(("register", stream_id))
        return self.register_answer

    def add_block(self, info: ReceivedBlockInfo) -> bool:
        # Store before report: the block must be readable at its handle right now.
        try:
            block = Block.decode(self.wal.read(info.handle))
            if block.block_id != info.block_id or len(block.records) != info.num_records:
                self.violations.append(f"{info.block_id}: WAL holds {block.block_id} "
                                       f"with {len(block.records)} records")
            if block.source != info.source or block.stream_id != info.stream_id:
                self.violations.append(f"{info.block_id}: source/stream differ from the WAL")
        except Exception as exc:
            self.violations.append(f"{info.block_id} reported but not readable: {exc!r}")
        with self.lock:
            self.add_block_attempts += 1
            self.calls.append(("add_block", info.block_id))
            answer = self.add_block_answer
            if answer is True:
                self.blocks.append(info)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def report_error(self, stream_id: int, message: str, error: str) -> None:
        with self.lock:
            self.calls.append(("report_error", message))
            self.errors.append((message, error))

    def deregister_receiver(self, stream_id: int, message: str, error: str) -> None:
        with self.lock:
            self.calls.append(("deregister", message))

    def call_names(self) -> list[str]:
        with self.lock:
            return [c[0] for c in self.calls]

    def reported_items(self) -> list[Any]:
        """Every item of every accepted block, decoded from the WAL, in report order."""
        return [item for info in list(self.blocks) for item in self.items_of(info)]

    def items_of(self, info: ReceivedBlockInfo) -> list[Any]:
        return [decode_item(r) for r in Block.decode(self.wal.read(info.handle)).records]


class ScriptReceiver(Receiver):
    """A receiver whose thread (started in ``onStart``) runs ``script(self)``.

    ``onStop`` joins that thread like :class:`~receiver.kafka_receiver.KafkaReceiver`
    (unless it runs on it). Threading objects are created in ``onStart`` only, so an
    unstarted receiver pickles.
    """

    def __init__(self, script: Callable[[ScriptReceiver], None] | None = None) -> None:
        super().__init__()
        self.script = script
        self.starts = 0
        self.stops = 0
        self.events: list[str] = []
        self.reported: list[tuple[str, Any]] = []
        self.store_errors: list[BaseException] = []
        self._thread: threading.Thread | None = None

    def onStart(self) -> None:
        # The new thread is in place before ``starts`` counts this start, so a test
        # that waits for ``starts == n`` and then ``script_done`` sees this run's thread.
        finished = threading.Event()
        self._finished = finished
        if self.script is not None:
            self._thread = threading.Thread(target=self._run, args=(finished,), daemon=True)
        else:
            finished.set()
        self.starts += 1
        self.events.append("start")
        if self._thread is not None and self.script is not None:
            self._thread.start()

    def _run(self, finished: threading.Event) -> None:
        assert self.script is not None
        try:
            self.script(self)
        except Exception as exc:
            self.store_errors.append(exc)
        finally:
            finished.set()

    def onStop(self) -> None:
        self.stops += 1
        self.events.append("stop")
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(WAIT_S)
        self._thread = None

    def on_block_reported(self, block_id: str, metadata: Any) -> None:
        self.reported.append((block_id, metadata))

    def script_done(self) -> bool:
        """The script of the latest start has run to its end."""
        finished = getattr(self, "_finished", None)
        return finished is None or finished.is_set()


def src(offset: int, topic: str = "src", partition: int = 0) -> tuple[str, int, int]:
    return (topic, partition, offset)


def store_each(n: int) -> Callable[[ScriptReceiver], None]:
    """A script storing the items ``0 .. n-1`` one by one at positions ``src(i)``."""

    def script(r: ScriptReceiver) -> None:
        for i in range(n):
            r.store(i, src(i))

    return script


def ranges_of(infos: list[ReceivedBlockInfo]) -> list[SourceRange]:
    return [r for info in infos for r in info.source]


class AsyncMemoryWAL(MemoryWAL):
    """A :class:`MemoryWAL` with ``write_async`` (as ``KafkaWriteAheadLog`` has): each
    write runs on one worker thread after ``delay_s``, in order, and its Future
    resolves only then, so a record is readable only once its Future is done.
    ``async_calls`` counts ``write_async`` calls."""

    def __init__(self, delay_s: float = 0.002) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.async_calls = 0
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mem-wal")

    def write_async(self, record: bytes, time_ms: int) -> Future[RecordHandle]:
        with self._lock:
            if self.closed:
                raise WalClosedError("closed")
            self.async_calls += 1

        def delayed() -> RecordHandle:
            time.sleep(self.delay_s)
            return self.write(record, time_ms)

        return self._worker.submit(delayed)

    def close(self) -> None:
        super().close()
        self._worker.shutdown(wait=False, cancel_futures=True)


@pytest.fixture(params=["sync", "async"])
def wal(request: pytest.FixtureRequest) -> Iterator[MemoryWAL]:
    """Every supervisor test runs against a WAL with ``write`` only and against one
    with ``write_async`` too (the supervisor's pipelined store)."""
    log = MemoryWAL() if request.param == "sync" else AsyncMemoryWAL()
    yield log
    log.close()


@pytest.fixture
def reporter(wal: MemoryWAL) -> FakeReporter:
    return FakeReporter(wal)


@pytest.fixture
def generators() -> Iterator[list[BlockGenerator]]:
    """Stop every generator a test made, even when the test failed half way."""
    made: list[BlockGenerator] = []
    yield made
    for g in made:
        g.stop(timeout_s=2.0)


# -- ReceiverSupervisor tests -------------------------------------------------------------

STREAM = 7
Script = Callable[[ScriptReceiver], None]


@pytest.fixture
def supervisors() -> Iterator[list[ReceiverSupervisor]]:
    made: list[ReceiverSupervisor] = []
    yield made
    for sup in made:
        sup.stop("test teardown", None)


@pytest.fixture
def make_sup(
    supervisors: list[ReceiverSupervisor], wal: MemoryWAL, reporter: FakeReporter
) -> Callable[..., tuple[ReceiverSupervisor, ScriptReceiver]]:
    def make(script: Script | None = None, gen: dict[str, Any] | None = None,
             **cfg: Any) -> tuple[ReceiverSupervisor, ScriptReceiver]:
        cfg.setdefault("store_backoff_s", 0.01)
        cfg.setdefault("report_backoff_s", 0.01)
        cfg.setdefault("restart_delay_s", 0.05)
        receiver = ScriptReceiver(script)
        sup = ReceiverSupervisor(
            receiver, STREAM, wal, reporter,
            generator_config=BlockGeneratorConfig(**{"block_interval_ms": 20, **(gen or {})}),
            config=SupervisorConfig(**cfg),
        )
        supervisors.append(sup)
        return sup, receiver

    return make
