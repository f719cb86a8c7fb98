"""The ingest benchmark's profiled pass: a diagnostic of where one receiver's time goes.

The receiver of case (1) runs in a spawned subprocess instead of a Spark worker (the
same KafkaReceiver, supervisor, receiver WAL, gRPC driver and driver WAL), with
timers around the source poll, item encoding, ``add_data``, the block encode, the
WAL write and the AddBlock call. Not part of the benchmark's table.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.common import Stat, delete_topics, topics_with_prefix
from bench.ingest_config import (
    CLEAN_ALL_MS,
    MB,
    POLL_S,
    WAL_TOPIC_PREFIX,
    IngestConfig,
    warm_driver_wal,
)


def _profiled_receiver(driver: str, credentials: Any, bootstrap: str, app: str, topic: str,
                       cfg: IngestConfig, out: Any) -> None:
    """Subprocess: the KafkaReceiver + supervisor of a receiver task, with timers,
    registering with the driver endpoint's ``credentials``.

    Puts ``(events, sums, blocks)`` on ``out``: wall-clock event times, summed
    receiving-thread timers and one ``(start, end, wal_s, add_block_s, records, bytes)``
    per pushed block.
    """
    import walstream.receiver.kafka_receiver as kafka_receiver_module
    from walstream.receiver import KafkaReceiver
    from walstream.receiver.driver_client import DriverClient
    from walstream.receiver.supervisor import ReceiverSupervisor
    from walstream.receiver.text_run import TextRun
    from walstream.wal import KafkaWriteAheadLog

    ev: dict[str, float] = {}
    sums: dict[str, float] = {"poll": 0.0, "encode": 0.0, "store": 0.0, "records": 0.0}
    blocks: list[tuple[float, float, float, float, int, int, float, float]] = []
    cur: dict[str, float] = {}
    begun: dict[str, tuple[float, float]] = {}
    pc, now = time.perf_counter, time.time

    # The receiver's default UTF-8 path encodes a poll batch's items in its
    # receiving loop and hands the batch over pre-encoded: time the encoding there
    # (it counts as part of storing) and the hand-over below. Keyless records are
    # encoded a batch at a time (``_keyless_records``), keyed ones one at a time
    # (the per-record wrapper adds ~0.2 us per record).
    untimed_pair = kafka_receiver_module.encode_utf8_pair

    def timed_pair(key: bytes | None, value: bytes | None) -> bytes:
        t1 = pc()
        data = untimed_pair(key, value)
        spent = pc() - t1
        sums["encode"] += spent
        sums["store"] += spent
        return data

    kafka_receiver_module.encode_utf8_pair = timed_pair

    class TimedConsumer:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def poll(self, timeout: float) -> Any:
            t1 = pc()
            msg = self.inner.poll(timeout)
            if "first_msg" in ev:
                sums["poll"] += pc() - t1
            elif msg is not None and msg.error() is None:
                ev["first_msg"] = now()
            if msg is not None and msg.error() is None:
                ev["last_msg"] = now()
            return msg

        def consume(self, num_messages: int, timeout: float) -> Any:
            t1 = pc()
            msgs = self.inner.consume(num_messages, timeout)
            good = [m for m in msgs if m.error() is None]
            if "first_msg" in ev:
                sums["poll"] += pc() - t1
            elif good:
                ev["first_msg"] = now()
            if good:
                ev["last_msg"] = now()
            return msgs

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    class TimedReceiver(KafkaReceiver):
        def onStart(self) -> None:
            ev["onstart_begin"] = now()
            super().onStart()
            ev["onstart_end"] = now()

        def _receive(self) -> None:  # the receiving thread; onStart created the consumer
            self._consumer = TimedConsumer(self._consumer)  # type: ignore[assignment]
            super()._receive()

        @staticmethod
        def _keyless_records(values: list[bytes | None]) -> TextRun | list[bytes] | None:
            t1 = pc()
            records = KafkaReceiver._keyless_records(values)
            spent = pc() - t1
            sums["encode"] += spent
            sums["store"] += spent
            return records

        def store(self, data: Any, metadata: Any = None) -> None:
            t1 = pc()
            super().store(data, metadata)
            sums["store"] += pc() - t1
            sums["records"] += 1

        def storeMany(self, items: Any, metadata: Any = None) -> None:
            t1 = pc()
            batch = list(items)
            super().storeMany(batch, metadata)
            sums["store"] += pc() - t1
            sums["records"] += len(batch)

    class TimedClient(DriverClient):
        def add_block(self, info: Any, figures: Any = None) -> bool:
            t1 = pc()
            ok = super().add_block(info, figures)
            cur["add"] = pc() - t1
            return ok

    class TimedSupervisor(ReceiverSupervisor):
        def _encode(self, item: Any) -> bytes | None:
            t1 = pc()
            data = super()._encode(item)
            sums["encode"] += pc() - t1
            return data

        def push_many_encoded(self, records: Sequence[bytes], metadata: Any = None) -> None:
            t1 = pc()
            super().push_many_encoded(records, metadata)
            sums["store"] += pc() - t1
            sums["records"] += len(records)

        # The pusher is pipelined (begin N+1, then finish N): a block's row runs from
        # its begin to the end of its finish; encode and finish times are its own.
        def begin_push_block(self, block_id: str, records: Sequence[Any]) -> Any:
            start, t1 = now(), pc()
            pending = super().begin_push_block(block_id, records)
            begun[block_id] = (start, pc() - t1)
            return pending

        def finish_push_block(self, pending: Any) -> None:
            if pending is None:
                return
            cur.clear()
            t1 = pc()
            super().finish_push_block(pending)
            start, encode_s = begun.pop(pending.block_id)
            blocks.append((start, now(), cur.get("wal", 0.0), cur.get("add", 0.0),
                           pending.count, len(pending.payload), encode_s, pc() - t1))

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            store = self.blocks.store

            def timed_store(pending: Any) -> Any:  # step 1: the block handler's WAL write
                t1 = pc()
                handle = store(pending)
                cur["wal"] = pc() - t1
                return handle

            self.blocks.store = timed_store  # type: ignore[method-assign]

    receiver = TimedReceiver(bootstrap, f"{app}-group-0", {topic: 1})
    client = TimedClient(driver, credentials=credentials)
    wal = KafkaWriteAheadLog(bootstrap, f"{app}-receiver-0", **cfg.wal_options())
    sup = TimedSupervisor(receiver, 0, wal, client, cfg.generator(), executor_id="profile")
    try:
        sup.start()
        for cmd in client.control(0):
            if cmd["kind"] == "STOP":
                break
    finally:
        sup.stop("profile done", None)
        wal.close()
        client.close()
    out.put((ev, sums, blocks))


@dataclass
class Profile:
    """One profiled 1-receiver pass; times in seconds, wall clock across processes."""

    records: int
    registered: float
    done: float
    events: dict[str, float]
    sums: dict[str, float]
    blocks: list[tuple[float, float, float, float, int, int, float, float]]
    driver_log_s: list[float]  # the driver's BlockAddition writes (batched WAL)

    def rows(self) -> dict[str, str]:
        ev, su, bl = self.events, self.sums, self.blocks
        reg = self.registered
        total = self.done - reg
        read = max(ev["last_msg"] - ev["first_msg"], 1e-9)
        n = max(su["records"], 1.0)
        steady = bl[1:] or bl
        med = lambda xs: Stat.of(xs).median if xs else 0.0  # noqa: E731
        span = max(self.done - bl[0][0], 1e-9)
        busy = sum(b[6] + b[7] for b in bl) / span
        rest = [b[7] - b[2] - b[3] for b in steady]
        other = max(0.0, read - su["poll"] - su["store"])
        return {
            "records/s (registration -> all reported)": f"{self.records / total:.0f} "
                                                        f"({total:.2f} s)",
            "startup: registration -> consumer assigned": f"{ev['onstart_end'] - reg:.2f} s",
            "startup: -> first record polled": f"{ev['first_msg'] - reg:.2f} s",
            "startup: -> first block reported": f"{bl[0][1] - reg:.2f} s",
            "reading: first -> last record polled": f"{read:.2f} s = "
                                                    f"{n / read:.0f} records/s",
            "reading: us per record, poll / item encode / rest of store / other":
                f"{1e6 * su['poll'] / n:.1f} / {1e6 * su['encode'] / n:.1f} / "
                f"{1e6 * (su['store'] - su['encode']) / n:.1f} / {1e6 * other / n:.1f}",
            "draining: last record polled -> all reported": f"{self.done - ev['last_msg']:.2f} s",
            "blocks: count x median records (KiB)":
                f"{len(bl)} x {med([float(b[4]) for b in bl]):.0f} "
                f"({med([b[5] / 1024 for b in bl]):.0f} KiB)",
            "first block: encode / WAL ack wait / AddBlock ms (cold producer)":
                f"{1000 * bl[0][6]:.0f} / {1000 * bl[0][2]:.0f} / {1000 * bl[0][3]:.0f}",
            "later blocks, median ms: encode + write start / WAL ack wait / AddBlock / "
            "rest (commit)":
                f"{1000 * med([b[6] for b in steady]):.1f} / "
                f"{1000 * med([b[2] for b in steady]):.1f} / "
                f"{1000 * med([b[3] for b in steady]):.1f} / {1000 * med(rest):.1f}",
            "blocks: MB/s through the pusher (first begun -> all reported)":
                f"{sum(b[5] for b in bl) / span / MB:.1f}",
            "driver: BlockAddition log ms (median; first)":
                f"{1000 * med(self.driver_log_s[1:] or self.driver_log_s):.1f}; "
                f"{1000 * self.driver_log_s[0]:.0f}" if self.driver_log_s else "-",
            "pusher busy (first block pushed -> done)": f"{busy:.0%}",
        }


def profile_run(bootstrap: str, admin: Any, topic: str, n: int, cfg: IngestConfig,
                timeout_s: float) -> Profile:
    from walstream.driver.receiver_tracker.tracker import ReceiverTracker
    from walstream.driver.scheduler.listener import StreamingListenerReceiverStarted
    from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
    from walstream.wal import BatchedWriteAheadLog, KafkaWriteAheadLog, RecordHandle

    app = f"bench-ingest-prof-{uuid.uuid4().hex[:8]}"
    registered: list[float] = []
    driver_log: list[float] = []

    class TimedBatched(BatchedWriteAheadLog):
        def write(self, record: bytes, time_ms: int) -> RecordHandle:
            t1 = time.perf_counter()
            h = super().write(record, time_ms)
            driver_log.append(time.perf_counter() - t1)
            return h

    def listener(event: type[Any], stream_id: int, detail: str) -> None:
        if event is StreamingListenerReceiverStarted and not registered:
            registered.append(time.time())

    blocks = ReceivedBlockTracker([0], TimedBatched(KafkaWriteAheadLog(bootstrap, f"{app}-driver")))
    warm_driver_wal(blocks)
    driver_log.clear()  # the warm-up write
    tracker = ReceiverTracker(blocks, [0], listener=listener)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_profiled_receiver,
                       args=(tracker.address, tracker.credentials, bootstrap, app, topic, cfg, out))
    try:
        proc.start()
        deadline = time.monotonic() + timeout_s
        while sum(r.until_offset for r in blocks.positions(0)) < n:
            if time.monotonic() > deadline or not proc.is_alive():
                raise RuntimeError(f"profile run: positions {blocks.positions(0)} of {n}")
            time.sleep(POLL_S)
        done = time.time()
        tracker.stop_all_receivers()  # sends STOP on the control stream
        ev, sums, pushed = out.get(timeout=60)
    finally:
        if proc.pid is not None:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        tracker.stop()
        with contextlib.suppress(Exception):
            blocks.cleanup_old_batches(CLEAN_ALL_MS, wait_for_completion=True)
        blocks.stop()
        delete_topics(admin, topics_with_prefix(admin, f"{WAL_TOPIC_PREFIX}{app}"))
    return Profile(n, registered[0], done, ev, sums, pushed, driver_log)
