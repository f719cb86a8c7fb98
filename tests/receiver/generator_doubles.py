"""Doubles for the BlockGenerator tests: a listener that logs every hook call in order,
and helpers that make generators (stopped by conftest's ``generators`` fixture), hold pushes
and run calls that may block on a thread of their own."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from walstream.receiver.block_generator import BlockGenerator, BlockGeneratorConfig
from walstream.testing import WAIT_S


class RecordingListener:
    """Records every hook call in one ordered log; ``push_hook`` may block or raise."""

    def __init__(self, push_hook: Callable[[str, Sequence[Any]], None] | None = None) -> None:
        self.lock = threading.Lock()
        self.log: list[tuple[str, Any, Any]] = []
        self.added: list[tuple[Any, Any]] = []
        self.generated: list[str] = []
        self.push_attempts: list[str] = []
        self.pushed: list[tuple[str, list[Any]]] = []
        self.errors: list[tuple[str, BaseException]] = []
        self.push_hook = push_hook

    def on_add_data(self, data: Any, metadata: Any) -> None:
        with self.lock:
            self.log.append(("add", data, metadata))
            self.added.append((data, metadata))

    def on_generate_block(self, block_id: str) -> None:
        with self.lock:
            self.log.append(("generate", block_id, None))
            self.generated.append(block_id)

    def on_push_block(self, block_id: str, records: Sequence[Any]) -> None:
        with self.lock:
            self.log.append(("push", block_id, None))
            self.push_attempts.append(block_id)
        if self.push_hook is not None:
            self.push_hook(block_id, records)
        with self.lock:
            self.pushed.append((block_id, list(records)))

    def on_error(self, message: str, error: BaseException) -> None:
        with self.lock:
            self.log.append(("error", message, error))
            self.errors.append((message, error))

    def pushed_records(self) -> list[Any]:
        with self.lock:
            return [r for _, recs in self.pushed for r in recs]


def make(generators: list[BlockGenerator], listener: RecordingListener,
         **config: Any) -> BlockGenerator:
    g = BlockGenerator(listener, 3, BlockGeneratorConfig(**config))
    generators.append(g)
    g.start()
    return g


def held_until(release: threading.Event) -> Callable[[str, list[Any]], None]:
    """A push hook that blocks the pushing thread until ``release`` is set."""

    def hold(block_id: str, records: list[Any]) -> None:
        release.wait(WAIT_S * 2)

    return hold


def run_in_thread(target: Callable[[], None]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            target()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, errors
