"""High availability, shown: SIGKILL the leading driver, the hot standby takes over, lose nothing.

Starts ``walstream.testing.ha_app`` (a deterministic receiver -> word count with
``updateStateByKey`` running totals and a KafkaSink output, with
``spark.walstream.ha.enabled=true``) twice on one checkpoint directory: the first
to claim the lease leads, the other stands by with its SparkContext warm. Once
the leader ran a few batches its whole process group (Python, JVM, workers) is
killed with SIGKILL; the standby sees the lease expire, takes over and runs the
rest of the input. Ends with the takeover time (from the SIGKILL to the first
batch the new leader completed, and the takeover the new leader logged) and one
line comparing the final totals with the input: ``lost N, doubled M``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

from walstream import broker, procs
from walstream.kafka_logging import with_logger
from walstream.testing import wait_until
from walstream.testing.chaos_config import lost_and_doubled
from walstream.testing.chaos_process import HA_WAIT_S, HAPair, sink_counts
from walstream.testing.recovery_app import expected_counts

SEED = 11


def create_topic(bootstrap: str, topic: str) -> None:
    """The sink topic must exist before the app starts (a fence never creates one)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(with_logger({"bootstrap.servers": bootstrap}))
    admin.create_topics([NewTopic(topic, 1, -1)])[topic].result(timeout=60)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--total", type=int, default=6000, help="lines the generator produces")
    ap.add_argument("--rate", type=float, default=150.0, help="lines per second")
    ap.add_argument("--batch", type=float, default=2.0, help="batch interval in seconds")
    args = ap.parse_args(argv)
    expected = expected_counts(SEED, args.total)
    want = sum(expected.values())
    work = Path(tempfile.mkdtemp(prefix="walstream-failover-demo-"))
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    home = work / "broker"
    pair: HAPair | None = None
    try:
        bootstrap = external or broker.start(home, port=procs.free_port()).bootstrap
        sink = f"demo-failover-{uuid.uuid4().hex[:8]}"
        create_topic(bootstrap, sink)
        pair = HAPair(work, bootstrap, sink, total=args.total, rate=args.rate, seed=SEED,
                      batch_s=args.batch)
        current = pair  # for the lambdas: not None
        print(f"failover demo: {args.total} lines -> word count with running totals, run "
              f"twice on one checkpoint ({pair.ckpt}); logs in {pair.logs}", flush=True)
        first, second = pair.launch(), pair.launch()  # both warm up at once
        wait_until(lambda: {current.role(first), current.role(second)} == {"leader", "standby"},
                   HA_WAIT_S, "one process to lead and the other to stand by", poll_s=0.2,
                   details=pair.details)
        leader, standby = (first, second) if pair.role(first) == "leader" else (second, first)
        print(f"failover demo: pid {leader.pid} leads, pid {standby.pid} stands by", flush=True)
        started = time.time()
        wait_until(lambda: len(current.batches(leader, started)) >= 3
                   and sum(current.totals().values()) > want // 4,
                   HA_WAIT_S, "the leader's first batches", poll_s=0.1, details=pair.details)
        print(f"failover demo: SIGKILL of the leader's process group (Python, JVM, workers) "
              f"with {sum(pair.totals().values())} of {want} words counted", flush=True)
        first_batch_s, took_s, _ = pair.fail_over(leader, standby)
        logged = f"in {took_s:.2f} s" if took_s is not None else "(no takeover line logged)"
        print(f"failover demo: pid {standby.pid} took over {logged} (its log: from seeing the "
              f"lease expired to leading); its first batch completed {first_batch_s:.1f} s "
              f"after the SIGKILL", flush=True)
        wait_until(lambda: sum(current.totals().values()) >= want, HA_WAIT_S,
                   "the new leader to count the whole input", poll_s=0.2,
                   details=pair.details)
        done_at = time.time()
        wait_until(lambda: len(current.batches(standby, done_at)) >= 2, HA_WAIT_S,
                   "two more batches", poll_s=0.2, details=pair.details)
        pair.close()
        got = pair.totals()
        sink_lost, sink_doubled = lost_and_doubled(expected, sink_counts(bootstrap, sink))
    finally:
        if pair is not None:
            pair.close()
        if not external:
            broker.stop(home)
    lost, doubled = lost_and_doubled(expected, got)
    print(f"failover demo: KafkaSink output read exactly once: lost {sink_lost}, "
          f"doubled {sink_doubled}", flush=True)
    print(f"failover demo: words in {want}, counted {sum(got.values())}; lost {lost}, "
          f"doubled {doubled}; takeover {first_batch_s:.1f} s (SIGKILL to the new leader's "
          f"first batch)", flush=True)
    ok = (lost, doubled, sink_lost, sink_doubled) == (0, 0, 0, 0) and got == expected
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
