"""Where one ``KafkaWriteAheadLog.write`` spends its time (a diagnostic, not a benchmark).

Usage: ``python -m bench.wal_phases [--linger-ms 0 2] [--mib 64]``

Wraps ``encode_record``, ``DeliveryAck`` and ``KafkaWriteAheadLog.write`` as
``walstream.wal.kafka_log`` names them, *in this process only* (no file is
changed) and prints, per case, the median of: framing (``encode_record``), entry
until the produce starts (checks, segment, lock), produce until the last delivery
callback (librdkafka linger + broker round trip), and callback until the writer
resumes (thread hand-off). ``write`` is ``write_async(...).result()``, which creates
the ``DeliveryAck`` on the writer's thread. Relies on those names; if they change,
update the wrappers here.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import bench.wal_cases as wb
import walstream.wal.kafka_log as kl
from bench.common import bench_broker, log

_local = threading.local()
_samples: list[tuple[float, float, float, float, float]] = []


def _install() -> None:
    orig_ack: Any = kl.DeliveryAck
    orig_encode = kl.encode_record
    orig_write = kl.KafkaWriteAheadLog.write

    class TimedAck(orig_ack):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.t_created = time.perf_counter()
            self.t_last_cb = 0.0
            _local.ack = self

        def callback(self, index: int) -> Any:
            inner = super().callback(index)

            def on_delivery(err: Any, msg: Any) -> None:
                # Before inner(): the last callback resolves the Future, which may
                # resume the writer at once.
                self.t_last_cb = time.perf_counter()
                inner(err, msg)

            return on_delivery

    def encode(record: bytes, chunk_bytes: int) -> list[bytes]:
        t = time.perf_counter()
        frames = orig_encode(record, chunk_bytes)
        _local.encode_s = time.perf_counter() - t
        return frames

    def write(self: kl.KafkaWriteAheadLog, record: bytes, time_ms: int) -> Any:
        t0 = time.perf_counter()
        handle = orig_write(self, record, time_ms)
        t_end = time.perf_counter()
        ack = _local.ack
        _samples.append((t_end - t0, _local.encode_s, ack.t_created - t0,
                         ack.t_last_cb - ack.t_created, t_end - ack.t_last_cb))
        return handle

    kl.DeliveryAck = TimedAck  # type: ignore[misc]
    kl.encode_record = encode
    kl.KafkaWriteAheadLog.write = write  # type: ignore[method-assign]


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.wal_phases")
    p.add_argument("--linger-ms", type=float, nargs="+", default=[0, 2])
    p.add_argument("--mib", type=int, default=64, help="payload MiB per case")
    args = p.parse_args()
    _install()
    with bench_broker() as broker:
        log(f"broker: {broker.description}")
        for linger in args.linger_ms:
            wb.WAL_OPTIONS.clear()
            wb.WAL_OPTIONS.update(wb.DEFAULT_WAL_OPTIONS, linger_ms=linger)
            for size in wb.RECORD_SIZES:
                for writers in wb.WRITER_COUNTS:
                    _samples.clear()
                    mbs = wb.wal_throughput(broker.bootstrap, size, writers, args.mib * wb.MIB)
                    med = [statistics.median(s[i] for s in _samples) * 1000 for i in range(5)]
                    print(f"linger_ms={linger:g} {size // 1024:>5} KiB x{writers}: {mbs:6.1f} MB/s;"
                          f" write {med[0]:.2f} ms = encode {med[1]:.2f} + to produce "
                          f"{med[2] - med[1]:.2f} + produce->last ack {med[3]:.2f} + "
                          f"ack->writer resumes {med[4]:.2f} (medians)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
