"""BlockGenerator with a pipelined listener (begin_push_block / finish_push_block): the
next block is begun before the one before it is finished, a lone block is finished
without waiting for another, nothing is reported after a failed block, stop finishes
every block, and a failed begin still finishes the block before it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.receiver.generator_doubles import RecordingListener, make
from walstream.receiver.block_generator import BlockGenerator
from walstream.testing import WAIT_S, wait_until

pytestmark = pytest.mark.timeout(30)


class PipelinedListener(RecordingListener):
    """A listener with begin/finish hooks; ``finish_gate`` holds finishes."""

    def __init__(self, fail_finish: str | None = None) -> None:
        super().__init__()
        self.finish_gate = threading.Event()
        self.finish_gate.set()
        self.fail_finish = fail_finish
        self.fail_begin: str | None = None
        self.begun: list[str] = []
        self.finished: list[str] = []

    def begin_push_block(self, block_id: str, records: list[Any]) -> Any:
        if block_id == self.fail_begin:
            raise RuntimeError(f"cannot encode {block_id}")
        with self.lock:
            self.log.append(("begin", block_id, None))
            self.begun.append(block_id)
        return (block_id, list(records))

    def finish_push_block(self, token: Any) -> None:
        block_id, records = token
        self.finish_gate.wait(WAIT_S)
        if block_id == self.fail_finish:
            raise RuntimeError(f"store of {block_id} failed")
        with self.lock:
            self.log.append(("finish", block_id, None))
            self.finished.append(block_id)
            self.pushed.append((block_id, records))


def held_pipeline(generators: list[BlockGenerator], blocks: int,
                  ) -> tuple[PipelinedListener, BlockGenerator]:
    """A pipelined generator with ``blocks`` one-record blocks (records 0, 1, ...)
    cut: the first begun and its finish held by the closed ``finish_gate``, the
    rest queued behind it."""
    listener = PipelinedListener()
    listener.finish_gate.clear()
    g = make(generators, listener, block_interval_ms=5, queue_size=10, max_block_records=1)
    g.add_data(0)
    wait_until(lambda: listener.begun != [], what="first block begun")
    for i in range(1, blocks):
        g.add_data(i)
    wait_until(lambda: len(listener.generated) == blocks, what=f"{blocks} blocks cut")
    return listener, g


def test_pipelined_push_begins_the_next_block_before_finishing_one(
    generators: list[BlockGenerator],
) -> None:
    # Block 1 is alone when the pusher takes it, so it is finished at once (held
    # here); blocks 2-4 queue up behind it and are then pipelined one deep.
    listener, g = held_pipeline(generators, 4)
    listener.finish_gate.set()
    wait_until(lambda: len(listener.finished) == 4, what="all blocks finished")
    b = listener.generated
    with listener.lock:
        steps = [(kind, b.index(block)) for kind, block, _ in listener.log
                 if kind in ("begin", "finish")]
    assert steps == [("begin", 0), ("finish", 0), ("begin", 1), ("begin", 2), ("finish", 1),
                     ("begin", 3), ("finish", 2), ("finish", 3)]
    assert listener.finished == listener.generated  # finishes in block order
    assert listener.pushed_records() == [0, 1, 2, 3]
    assert g.blocks_pushed == 4
    assert listener.push_attempts == []  # on_push_block is not used


def test_pipelined_push_finishes_a_lone_block_without_waiting_for_the_next(
    generators: list[BlockGenerator],
) -> None:
    listener = PipelinedListener()
    g = make(generators, listener, block_interval_ms=5)
    g.add_data("only")
    # No later block will come: the begun block must finish on its own, at once.
    wait_until(lambda: listener.finished != [], timeout_s=1.0, what="the lone block finished")
    assert g.flush(timeout_s=WAIT_S)
    assert listener.pushed_records() == ["only"]


def test_pipelined_failure_reports_nothing_after_the_failed_block(
    generators: list[BlockGenerator],
) -> None:
    listener = PipelinedListener()
    listener.finish_gate.clear()
    g = make(generators, listener, block_interval_ms=5, queue_size=10, max_block_records=1)
    for i in range(5):
        g.add_data(i)
    wait_until(lambda: len(listener.generated) == 5, what="five blocks cut")
    listener.fail_finish = listener.generated[1]
    listener.finish_gate.set()
    wait_until(lambda: listener.errors != [], what="on_error")
    g.stop(timeout_s=WAIT_S)
    assert listener.finished == listener.generated[:1]
    assert listener.pushed_records() == [0]
    assert listener.generated[1] in listener.errors[0][0]
    # Block 3 may have been begun (in flight) but is never finished; 4 and 5 never begun.
    assert listener.begun == listener.generated[:3]
    assert not g.flush(timeout_s=0.1)


def test_pipelined_stop_finishes_every_block(generators: list[BlockGenerator]) -> None:
    listener = PipelinedListener()
    g = make(generators, listener, block_interval_ms=50, max_block_records=10)
    for i in range(95):
        g.add_data(i)
    g.stop(timeout_s=WAIT_S)
    assert listener.pushed_records() == list(range(95))
    assert listener.finished == listener.generated == listener.begun


def test_pipelined_begin_failure_still_finishes_the_block_before_it(
    generators: list[BlockGenerator],
) -> None:
    # Block N+1 cannot begin (say its records cannot be encoded): block N, already
    # stored, must still be finished (reported) before the pusher stops.
    listener, g = held_pipeline(generators, 3)
    listener.fail_begin = listener.generated[2]
    listener.finish_gate.set()
    wait_until(lambda: listener.errors != [], what="on_error")
    g.stop(timeout_s=WAIT_S)
    assert listener.finished == listener.generated[:2]  # block 2 finished despite 3
    assert listener.pushed_records() == [0, 1]
    assert listener.generated[2] in listener.errors[0][0]  # the error names block 3
