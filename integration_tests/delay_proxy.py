"""A TCP proxy that delays what it forwards, for a slow, lossy link where the kernel
has no ``sch_netem`` (the network-fault lab puts it in front of the broker).

Run as ``python -m integration_tests.delay_proxy LISTEN UPSTREAM CONTROL``
(``HOST:PORT`` each). While the file ``CONTROL`` holds
``{"delay_ms": D, "jitter_ms": J, "loss_pct": L}``, every chunk read from either
side is held ``D`` ms plus or minus up to ``J`` ms before it is written on, and
a chunk with probability ``L`` % is held once more for ``LOSS_HOLD_MS`` more (what a
TCP segment lost on the wire costs: a retransmission timeout). Chunks leave each
direction in the order they came (TCP delivers in order whatever the jitter), so
a chunk waits for its predecessor when its own draw is shorter. Without the file
(or with a malformed one) chunks pass at once. The file is read again every
``CONTROL_POLL_S``.

What differs from netem: the delay is per chunk the proxy reads, not per packet,
and a loss is a hold, never a retransmission the peers see. Each direction's queue
is bounded (``MAX_QUEUED``): a full one stops reading that side, which TCP turns
into backpressure for the sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CONTROL_POLL_S = 0.5
LOSS_HOLD_MS = 300.0
MAX_QUEUED = 256
CHUNK = 65536


@dataclass(frozen=True)
class Impairment:
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0

    def hold_s(self, rng: random.Random) -> float:
        ms = self.delay_ms + rng.uniform(-self.jitter_ms, self.jitter_ms)
        if rng.random() * 100 < self.loss_pct:
            ms += LOSS_HOLD_MS
        return max(0.0, ms) / 1000


def read_control(path: Path) -> Impairment:
    """The impairment ``path`` asks for; none when it is missing or malformed."""
    try:
        raw = json.loads(path.read_text())
        return Impairment(float(raw.get("delay_ms", 0)), float(raw.get("jitter_ms", 0)),
                          float(raw.get("loss_pct", 0)))
    except (OSError, ValueError, TypeError, AttributeError):
        return Impairment()


class Proxy:
    def __init__(self, upstream: tuple[str, int], control: Path, seed: int = 1) -> None:
        self.upstream = upstream
        self.control = control
        self.impairment = Impairment()
        self.rng = random.Random(seed)

    async def watch_control(self) -> None:
        while True:
            self.impairment = read_control(self.control)
            await asyncio.sleep(CONTROL_POLL_S)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._direction(reader, up_writer),
                             self._direction(up_reader, writer), return_exceptions=True)
        for w in (writer, up_writer):
            with contextlib.suppress(Exception):
                w.close()

    async def _direction(self, reader: asyncio.StreamReader,
                         writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(MAX_QUEUED)

        async def pump_in() -> None:
            last = 0.0
            try:
                while data := await reader.read(CHUNK):
                    # In order: never before the chunk ahead of it.
                    last = max(last, time.monotonic() + self.impairment.hold_s(self.rng))
                    await queue.put((last, data))
            finally:
                await queue.put((0.0, b""))

        async def pump_out() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            with contextlib.suppress(Exception):
                writer.write_eof()

        await asyncio.gather(pump_in(), pump_out())


async def run(listen: tuple[str, int], upstream: tuple[str, int], control: Path) -> None:
    proxy = Proxy(upstream, control)
    server = await asyncio.start_server(proxy.serve, *listen)
    async with server:
        await asyncio.gather(server.serve_forever(), proxy.watch_control())


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m integration_tests.delay_proxy LISTEN UPSTREAM CONTROL",
              file=sys.stderr)
        return 2
    asyncio.run(run(_address(args[0]), _address(args[1]), Path(args[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
