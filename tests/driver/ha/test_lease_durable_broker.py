"""The lease on the durable embedded broker (Tansu's ``s3://`` engine over its S3
store) while another topic takes writes as fast as the broker acknowledges them: the
holder's renewals are confirmed and the standby sees them, so a lease renewed on time
is neither lost by its holder nor claimed by the standby; once the holder releases
it, the standby claims the next epoch."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Producer

from walstream import broker, procs
from walstream.driver.ha.lease import Lease
from walstream.driver.ha.lease_log import LeaseConfig, ensure_lease_topic

pytestmark = pytest.mark.timeout(120)
HELD_S = 6.0


@pytest.fixture
def durable_bootstrap(tmp_path: Path) -> Iterator[str]:
    home = tmp_path / "broker"
    state = broker.start(home, procs.free_port(), durable=True, attached=True)
    try:
        yield state.bootstrap
    finally:
        broker.stop(home)


@pytest.fixture
def foreign_writes(durable_bootstrap: str) -> Iterator[Callable[[str], None]]:
    """Start a writer of records into a topic as fast as the broker takes them: the
    load an application's WAL puts on the broker beside its lease log."""
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def write(topic: str) -> None:
        producer = Producer({"bootstrap.servers": durable_bootstrap, "linger.ms": 5})
        while not stop.is_set():
            producer.produce(topic, b"a block of records" * 50, partition=0)
            producer.poll(0.002)
        producer.flush(10)

    def start(topic: str) -> None:
        threads.append(threading.Thread(target=write, args=(topic,), daemon=True))
        threads[-1].start()

    yield start
    stop.set()
    for t in threads:
        t.join(15)


def test_a_lease_renewed_on_time_stays_held_and_is_not_claimed(
        durable_bootstrap: str, foreign_writes: Callable[[str], None]) -> None:
    config = LeaseConfig(durable_bootstrap, "walstream.lease.durable", timeout_s=2.0,
                         renew_period_s=0.2)
    ensure_lease_topic(config)
    ensure_lease_topic(replace(config, topic="busy"))
    foreign_writes("busy")
    holder, standby = Lease(config, "holder"), Lease(config, "standby")
    try:
        assert holder.try_acquire() and holder.epoch == 1
        assert not standby.try_acquire()
        watched_until = time.monotonic() + HELD_S
        while time.monotonic() < watched_until:
            view = standby.watch(watched_until - time.monotonic())
            assert not view.expired, f"the standby saw the lease expire: {view}"
            assert holder.held, "the holder lost a lease it renewed on time"
        assert not standby.try_acquire() and standby.epoch is None
        # Renewals stop: the standby claims the next epoch once the timeout passes.
        holder.release()
        view = standby.watch(config.timeout_s * 3)
        assert view.state.free or view.expired
        assert standby.try_acquire() and standby.epoch == 2
    finally:
        standby.close()
        holder.close()
