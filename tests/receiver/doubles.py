"""Broker-free doubles of the receiver tests: a fake driver and a scripted receiver.

``FakeReporter`` is the driver side of :class:`~walstream.receiver.supervisor.BlockReporter`:
it records every call, can refuse registration or blocks, and checks *inside*
``add_block`` that the reported block is already readable from the WAL at its
handle (store before report). A violation is recorded, not raised: the supervisor
would swallow and retry an exception raised there. The WAL is the test kit's
:class:`~walstream.testing.MemoryWAL`; the waits are :func:`~walstream.testing.wait_until`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from walstream.receiver.block import Block, SourceRange
from walstream.receiver.block_generator import BlockGenerator
from walstream.receiver.block_info import BlockFigures, ReceivedBlockInfo
from walstream.receiver.items import decode_item
from walstream.receiver.receiver import Receiver
from walstream.testing import WAIT_S, MemoryWAL

STREAM = 7  # the stream id of the ReceiverSupervisor tests


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

    def add_block(self, info: ReceivedBlockInfo, figures: BlockFigures | None = None) -> bool:
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

    ``onStop`` joins that thread like :class:`~walstream.receiver.kafka_receiver.KafkaReceiver`
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


Script = Callable[[ScriptReceiver], None]


def record_generator_batches(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What every block generator is handed by ``add_multiple_data`` from now on,
    in order, as handed (a list of items or a run), for the rest of the test."""
    batches: list[Any] = []
    add = BlockGenerator.add_multiple_data

    def recording(self: BlockGenerator, items: Any, *args: Any, **kwargs: Any) -> None:
        batches.append(items)
        add(self, items, *args, **kwargs)

    monkeypatch.setattr(BlockGenerator, "add_multiple_data", recording)
    return batches
