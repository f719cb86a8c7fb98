"""AddBlock throughput and latency through the driver's gRPC ReceiverTracker.

N reporter threads (each its own gRPC client and receiver stream, as N receivers
would be) send AddBlock as fast as the driver answers; every answer comes only
after the BlockAddition is durable in the driver's Kafka WAL. Measured batched
(BatchedWriteAheadLog, what the driver uses) and unbatched.

Run: ``python -m bench.addblock_bench [--reporters 8 32 128] [--seconds 5] [--runs 3]``
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import Stat, bench_broker, machine_info, md_facts, md_table, percentile
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.driver_client import DriverClient
from walstream.wal import BatchedWriteAheadLog, KafkaWriteAheadLog, RecordHandle


def _reporter_process(address: str, streams: list[int], start_at: float, seconds: float,
                      out: Any) -> None:
    """One receiver process: a thread (own gRPC client) per stream, as executors host them."""
    lat: list[float] = []
    lock = threading.Lock()

    def reporter(s: int) -> None:
        client = DriverClient(address)
        assert client.register_receiver(s, "bench", f"e{s}").accepted
        mine = []
        time.sleep(max(0.0, start_at - time.time()))
        stop_at = start_at + seconds
        i = 0
        while time.time() < stop_at:
            info = ReceivedBlockInfo(s, f"b-{s}-{i}", 100, RecordHandle("w", 0, i),
                                     (SourceRange("src", s, i * 100, i * 100 + 100),))
            t0 = time.perf_counter()
            assert client.add_block(info)
            mine.append((time.perf_counter() - t0) * 1000)
            i += 1
        client.close()
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=reporter, args=(s,)) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(lat)


def run_once(bootstrap: str, reporters: int, seconds: float, batched: bool,
             processes: int) -> tuple[float, list[float]]:
    name = f"bench-addblock-{uuid.uuid4().hex[:8]}"
    kafka = KafkaWriteAheadLog(bootstrap, name)
    wal = BatchedWriteAheadLog(kafka) if batched else kafka
    streams = list(range(reporters))
    blocks = ReceivedBlockTracker(streams, wal)
    tracker = ReceiverTracker(blocks, streams, max_workers=max(32, reporters + 4))
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    start_at = time.time() + 8.0  # after every process started and registered
    procs = [ctx.Process(target=_reporter_process,
                         args=(tracker.address, streams[i::processes], start_at, seconds, out))
             for i in range(processes)]
    try:
        for p in procs:
            p.start()
        flat = [x for _ in procs for x in out.get(timeout=seconds + 120)]
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
        tracker.stop()
        blocks.cleanup_old_batches(2**42, wait_for_completion=True)
        blocks.stop()
    return len(flat) / seconds, flat


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.addblock_bench")
    ap.add_argument("--reporters", type=int, nargs="+", default=[8, 32, 128])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--processes", type=int, default=4,
                    help="reporter processes (receivers live in executors, not the driver)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/RESULTS-addblock.md"))
    args = ap.parse_args(argv)
    rows = []
    with bench_broker() as broker:
        for n in args.reporters:
            for batched in (True, False):
                rates, p50s, p99s = [], [], []
                for _ in range(args.runs):
                    rate, lat = run_once(broker.bootstrap, n, args.seconds, batched,
                                         min(args.processes, n))
                    rates.append(rate)
                    p50s.append(percentile(lat, 50))
                    p99s.append(percentile(lat, 99))
                rows.append([str(n), "batched" if batched else "unbatched",
                             Stat.of(rates).fmt(0), Stat.of(p50s).fmt(2), Stat.of(p99s).fmt(2)])
                print(rows[-1], flush=True)
        facts = machine_info(broker.description)
    text = ["# AddBlock through the driver (gRPC -> tracker -> driver Kafka WAL)", "",
            md_facts(facts), "",
            f"Each cell: median [min, max] of {args.runs} runs of {args.seconds:g} s; reporters "
            f"spread over {args.processes} processes (threads with their own gRPC clients), "
            "the driver in this one; every answer comes only after the BlockAddition is "
            "durable (acks=all).", "",
            md_table(["reporters", "driver WAL", "AddBlock/s", "p50 ms", "p99 ms"], rows), ""]
    args.out.write_text("\n".join(text))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
