"""Network faults on namespace hosts: the broker and two HA drivers of one app, each on
a host of its own, while input flows into a generator receiver, the receiver-based
Kafka stream, a reliable custom receiver and a direct stream. Outputs: running
totals per batch time into files, per-batch counts appended to a file (a user's own
``foreachRDD`` outputs, which no Kafka fence protects) and a KafkaSink topic. For each
path the checker counts what was lost, doubled, and the batch times written twice
with different contents (split brain).

The leader's link cut for longer than its lease, then healed, and the leader cut
from the broker only (it still reaches the other hosts): the standby takes over
while the leader is cut off; the deposed leader stops acting at its lease's
deadline (no output of it after that, also once its link is back) and exits;
every output path is exact with no split brain. Before, the cut-off leader kept
generating batches and, once healed, wrote some of them with its stale state
after the new leader had written them.

Exact means: nothing lost, nothing doubled, on every path, with one allowance
that the design names. The reliable custom receiver (``r``) reports no source
positions, and its source redelivers what it did not learn was safe, so a block
whose ``store`` raised or whose commit never completed (its driver cut off between
them) may count twice. Its journal names those blocks; the ``r`` stream may be
over the input by exactly the words of some of them, the same on every path.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest

from integration_tests.netfault_lab import (
    FaultLab,
    PathCheck,
    check_outputs,
    redelivered_from,
    wait_exited,
)
from walstream.testing import wait_until
from walstream.testing.chaos_process import HAPair, read_jsonl
from walstream.testing.committing_receiver import open_blocks
from walstream.testing.netns import log, namespaces_available
from walstream.testing.recovery_app import expected_counts

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
# Heavy for this machine: the leader runs behind, with batches in flight at the cut
# (before, it completed some of them once healed, long after its lease ran out).
TOTAL, RATE, SEED = 16000, 200, 11  # the generator receiver: 80 s of input
DIRECT_RECORDS, DIRECT_RATE = 3000, 40.0
BATCH_S = 1.0
LEASE_S = 2.0
LEASE = "2s"
CUT_S = 20.0  # ten lease timeouts
WAIT_S = 240.0  # bound on each wait, on a loaded 2-core machine
_STOPPED = re.compile(r"^(\S+ \S+) ERROR walstream\.driver\.ha\.high_availability: "
                      r"high availability: this driver no longer leads", re.M)
# Not anchored: Spark's console progress may precede a line on its row.
_NEW_DATA = re.compile(r"(\d{4}-\d\d-\d\d [\d:]+,\d+) INFO "
                       r"walstream\.driver\.scheduler\.restart_log: first "
                       r"batch with new data after the takeover")
_TOOK_OVER = re.compile(r"(\d{4}-\d\d-\d\d [\d:]+,\d+) INFO "
                        r"walstream\.driver\.ha\.high_availability: high "
                        r"availability: took over epoch")


def _log_time(line_time: str) -> float:
    return datetime.strptime(line_time, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _made_lab(proxied: bool = False) -> Iterator[FaultLab]:
    reason = namespaces_available()
    if reason is not None:
        print(f"network fault tests skipped: {reason}")
        pytest.skip(reason)
    made = FaultLab(proxied=proxied)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def lab() -> Iterator[FaultLab]:
    yield from _made_lab()


@pytest.fixture
def proxied_lab() -> Iterator[FaultLab]:
    yield from _made_lab(proxied=True)


SINK, DIRECT = "nf-sink", "nf-direct"


def _pair(lab: FaultLab, total: int = TOTAL) -> HAPair:
    """The HA app over the lab's broker, its topics made (nothing started yet)."""
    lab.create_topics(SINK, DIRECT)
    return HAPair(lab.lab.run_dir / "app", lab.bootstrap, SINK, total=total, rate=RATE,
                  seed=SEED, direct=DIRECT, lease_timeout=LEASE, batch_s=BATCH_S,
                  env={"WALSTREAM_SPARK_MASTER": "local[5]"}, kafka_receiver=True,
                  app_args=("--per-batch-outputs",))


def _start(lab: FaultLab, pair: HAPair, direct_records: int = DIRECT_RECORDS
           ) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """The direct topic's feed, the leader on drivera (running batches) and the
    standby on driverb."""
    lab.feed(DIRECT, SEED, direct_records, DIRECT_RATE)
    leader = pair.launch(wrap=lab.wrap("drivera"))
    pair.wait_role(leader, "leader", "the driver on drivera to lead")
    standby = pair.launch(wrap=lab.wrap("driverb"))
    pair.wait_role(standby, "standby", "the driver on driverb to stand by")
    since = time.time()
    wait_until(lambda: pair.ran(leader, since, 3), WAIT_S, "the leader to run batches",
               details=pair.details)
    return leader, standby


def _wait_exact(lab: FaultLab, pair: HAPair, total: int = TOTAL,
                timeout_s: float = WAIT_S) -> dict[str, PathCheck]:
    """Wait until the running totals equal the input (the generator's and the fed
    topic's, through each of its three streams); then each output path's check.

    The ``r`` stream's source redelivers what its receiver did not learn was safe:
    a block whose ``store`` raised or whose commit never completed (a leader cut off
    between them) may count twice, the documented at-least-once window of a receiver
    without source positions. So ``r`` may be over the input by exactly the words of
    some of those blocks (the receiver's journal names them), the same words on every
    output path; never short, and no other stream over by anything."""
    want = Counter(expected_counts(SEED, total))
    fed = lab.fed(DIRECT, WAIT_S)
    for tag in ("d", "k", "r"):
        want.update({f"{tag} {w}": n for w, n in fed.items()})
    journal = pair.out / "reliable-blocks.jsonl"

    def open_r_blocks() -> list[Counter[str]]:
        return [Counter({f"r {w}": n for w, n in b.items()}) for b in open_blocks(journal)]

    def extra() -> tuple[Counter[str], Counter[str]]:
        """(the r stream's words over the input, every other stream's)."""
        over = Counter(pair.totals()) - want
        r = Counter({w: n for w, n in over.items() if w.startswith("r ")})
        return r, over - r

    def over() -> str | None:
        r, others = extra()
        if not others and not r - sum(open_r_blocks(), Counter()):
            return None
        by_stream = Counter({tag: 0 for tag in ("d", "k", "r", "generator")})
        for w, n in (r + others).items():
            by_stream[w.split(" ")[0] if " " in w else "generator"] += n
        return (f"totals over the input by {dict(by_stream)}, beyond what the r stream's "
                f"open blocks hold ({len(open_r_blocks())} blocks): "
                f"{(r + others).most_common(8)}")

    def exact() -> bool:
        r, others = extra()
        return (not others and not want - Counter(pair.totals())
                and redelivered_from(r, open_r_blocks()))

    wait_until(exact, timeout_s, "the running totals to equal the input", poll_s=1.0,
               abort=over,
               details=lambda: f"{sum(pair.totals().values())} of {sum(want.values())} "
                               f"words; r over by {sum(extra()[0].values())}, "
                               f"{len(open_r_blocks())} open r blocks\n{pair.details()}")
    redelivered, _ = extra()
    log(f"network faults: the r stream's receiver left {len(open_r_blocks())} blocks with "
        f"an open outcome; {sum(redelivered.values())} words of them counted twice")
    return check_outputs(pair.out, lab.sink_counts(SINK), want + redelivered)


def _report(name: str, lines: dict[str, Any]) -> None:
    shown = {k: f"{v:.1f} s" if isinstance(v, float) else str(v) for k, v in lines.items()}
    log(f"network fault, {name}: " + "; ".join(f"{k}: {v}" for k, v in shown.items()))
    print(f"\n{name}:")
    for k, v in shown.items():
        print(f"  {k}: {v}")


@dataclass(frozen=True)
class LeaderFault:
    """A fault that takes the leader away from what its lease needs, and its heal."""

    name: str
    apply: Callable[[FaultLab], None]
    heal: Callable[[FaultLab], None]


LEADER_FAULTS = [
    # Its whole link: nothing reaches it, its open connections hear nothing.
    LeaderFault("leader cut off", lambda lab: lab.faults.cut("drivera"),
                lambda lab: lab.faults.heal("drivera")),
    # Only the broker: the leader still reaches every other host, and its sends to
    # the broker fail at once (a route that drops them) instead of going unanswered.
    LeaderFault("leader apart from the broker",
                lambda lab: lab.faults.block("drivera", "broker"),
                lambda lab: lab.faults.unblock("drivera", "broker")),
]


@pytest.mark.parametrize("fault", LEADER_FAULTS, ids=lambda f: f.name.replace(" ", "-"))
def test_a_leader_cut_off_longer_than_its_lease_stops_and_writes_nothing_stale(
        lab: FaultLab, fault: LeaderFault) -> None:
    pair = _pair(lab)
    fig: dict[str, Any] = {}
    try:
        leader, standby = _start(lab, pair)
        cut_at = time.time()
        fault.apply(lab)
        fig["leader's lag at the fault"] = cut_at - pair.batches(leader)[-1]["batch"] / 1000
        fig["standby's first batch after the fault"] = pair.first_batch_after(
            standby, cut_at, "the standby's first batch after the fault")
        took = pair.took_over_s(standby)
        fig["standby's takeover (claim to leading)"] = took
        time.sleep(max(0.0, cut_at + CUT_S - time.time()))
        healed_at = time.time()
        fault.heal(lab)
        exited = wait_exited(leader, WAIT_S, "the deposed leader to exit", pair.details)
        # Read from their log lines' times: waiting for them after the heal changes nothing.
        fig["fault -> standby leading"] = _logged_at(
            pair, standby, _TOOK_OVER, "the standby's takeover") - cut_at
        fig["fault -> first batch with new data"] = _logged_at(
            pair, standby, _NEW_DATA, "the new leader's first batch with new data") - cut_at
        stopped = _STOPPED.findall(pair.log_of(leader))
        assert stopped, f"the deposed leader never said it stopped leading\n{pair.details()}"
        stopped_s = fig["fault -> old leader stopped acting"] = _log_time(stopped[0]) - cut_at
        fig["heal -> old leader exited"] = exited - healed_at
        fig["old leader's batches completed after the fault"] = len(pair.batches(leader,
                                                                               cut_at))
        fig["old leader's batches refused or cancelled after the fault"] = sum(
            1 for b in read_jsonl(pair.out / "failed.jsonl")
            if b.get("pid") == leader.pid and b.get("wall", 0) >= cut_at)
        # Checked with the outputs below: what it completed late shows there too.
        late = pair.batches(leader, cut_at + 1.0)

        checks = _wait_exact(lab, pair)
        for path, check in checks.items():
            fig[path] = str(check)
        # Its lease ran out at most LEASE_S after the fault (its last renewal was
        # before); it must stop then, not once it hears from the broker again.
        assert stopped_s <= LEASE_S + 1.0, f"the deposed leader stopped {stopped_s:.1f} s " \
            "after the fault, past its lease"
        assert all(c.exact() for c in checks.values()) and not late, (
            "\n".join(f"{p}: {c}" for p, c in checks.items())
            + f"\nbatches the deposed leader completed after its lease ran out: {late}")
    finally:
        _report(fault.name, fig)
        pair.close()


def _logged_at(pair: HAPair, p: subprocess.Popen[bytes], line: re.Pattern[str],
               what: str) -> float:
    """Wall time of the first line of ``p``'s log that ``line`` matches (waited for)."""
    found: list[str] = []

    def logged() -> bool:
        found[:] = line.findall(pair.log_of(p))
        return bool(found)

    wait_until(logged, WAIT_S, what, poll_s=0.2, details=pair.details)
    return _log_time(found[0])


# -- the long, seeded schedule (make chaos) ------------------------------------------

ROUNDS_ENV, SEED_ENV = "WALSTREAM_NETFAULT_ROUNDS", "WALSTREAM_NETFAULT_SEED"
ROUND_RECORDS = 5000  # generator input per round (25 s at RATE)
DRIVER_HOSTS = ("drivera", "driverb")


def _schedule_faults(lab: FaultLab, leader_host: str) -> dict[str, tuple[
        Callable[[], None], Callable[[], None]]]:
    """name -> (apply, heal) of each fault a round may pick, given who leads now."""
    other = next(h for h in DRIVER_HOSTS if h != leader_host)
    return {
        "cut the leader": (lambda: lab.faults.cut(leader_host),
                           lambda: lab.faults.heal(leader_host)),
        "leader apart from the broker": (lambda: lab.faults.block(leader_host, "broker"),
                                         lambda: lab.faults.unblock(leader_host, "broker")),
        "cut the standby": (lambda: lab.faults.cut(other), lambda: lab.faults.heal(other)),
        "slow, lossy broker link": (lab.slow_broker_link, lab.fast_broker_link),
    }


@pytest.mark.timeout(7200)  # make chaos: as many rounds as asked for
def test_a_seeded_schedule_of_network_faults_loses_and_doubles_nothing(
        proxied_lab: FaultLab) -> None:
    """Rounds of faults picked by a seeded random schedule (``WALSTREAM_NETFAULT_ROUNDS``
    rounds, ``WALSTREAM_NETFAULT_SEED``; run by ``make chaos``): each round cuts the
    leader, parts it from the broker, cuts the standby or slows the broker's link,
    for half a lease timeout to six, then heals; a driver that stopped is started again on its
    host. At the end every output path is exact, no batch time was written twice
    with different contents, and no driver completed a batch after it said it had
    stopped leading."""
    rounds = int(os.environ.get(ROUNDS_ENV, "0"))
    if rounds <= 0:
        print(f"the seeded network-fault schedule runs in make chaos ({ROUNDS_ENV})")
        pytest.skip(f"the seeded schedule runs when {ROUNDS_ENV} is set (make chaos)")
    seed = int(os.environ.get(SEED_ENV, "1"))
    rng = random.Random(seed)
    lab = proxied_lab
    total = ROUND_RECORDS * rounds
    pair = _pair(lab, total)
    on: dict[str, subprocess.Popen[bytes]] = {}
    done: dict[str, Any] = {}
    try:
        on["drivera"], on["driverb"] = _start(lab, pair, total // 5)
        for i in range(rounds):
            leader_host = _leading_host(pair, on)
            hold_s = rng.uniform(0.5, 6.0) * LEASE_S
            faults = _schedule_faults(lab, leader_host)
            name = rng.choice(sorted(faults))
            apply, heal = faults[name]
            started = time.time()
            apply()
            time.sleep(hold_s)
            heal()
            _wait_settled(pair, on, started, lab)
            done[f"round {i + 1}"] = (f"{name} ({leader_host} led) for {hold_s:.1f} s, "
                                      f"settled {time.time() - started:.1f} s after")
            log(f"network-fault schedule (seed {seed}) round {i + 1}: {done[f'round {i + 1}']}")
        checks = _wait_exact(lab, pair, total, WAIT_S * 2)
        late = {p.pid: pair.batches(p, _log_time(stopped[0]) + 1.0) for p in pair.procs
                if (stopped := _STOPPED.findall(pair.log_of(p)))}
        done.update(checks)
        assert all(c.exact() for c in checks.values()) and not any(late.values()), (
            "\n".join(f"{k}: {v}" for k, v in done.items())
            + f"\nbatches completed after their driver stopped: {late}")
    finally:
        _report(f"schedule, seed {seed}, {rounds} rounds", done)
        pair.close()


def _leading_host(pair: HAPair, on: dict[str, subprocess.Popen[bytes]]) -> str:
    """The host whose driver completed the newest batch."""
    newest = {host: max((b["wall"] for b in pair.batches(p)), default=0.0)
              for host, p in on.items()}
    return max(newest, key=lambda h: newest[h])


def _wait_settled(pair: HAPair, on: dict[str, subprocess.Popen[bytes]], since: float,
                  lab: FaultLab) -> None:
    """One driver completes batches after ``since`` and the other stands by; a driver
    that exited (a deposed leader does) is started again on its host meanwhile."""
    def settled() -> bool:
        for host, p in list(on.items()):
            if p.poll() is not None:
                on[host] = pair.launch(wrap=lab.wrap(host))
        leading = [p for p in on.values() if pair.batches(p, since + LEASE_S)]
        if len(leading) != 1:
            return False
        other = next(p for p in on.values() if p is not leading[0])
        return pair.role(other) == "standby"

    wait_until(settled, WAIT_S, "one driver to lead and the other to stand by",
               poll_s=0.5, details=pair.details)


SLOW_S = 60.0
SLOW_ENV = "WALSTREAM_NETFAULT_SLOW"


def test_a_slow_lossy_broker_link_for_a_minute_loses_and_doubles_nothing(
        proxied_lab: FaultLab) -> None:
    """Every connection to the broker held 200 +- 50 ms each way, and 5 % of what
    passes held a retransmission time more, for a minute while input flows (a delay
    proxy in front of the broker: this kernel has no netem); then the link is fast
    again. Whoever leads meanwhile, every output path is exact, and a leader that
    lost its lease completes nothing after it stopped.

    A 2 s lease cannot be renewed over round trips of half a second and more, so
    both drivers may lose it during the minute; a deposed leader exits, and, as a
    process supervisor would, the test starts an exited driver again on its host
    once the link is fast.

    Runs in ``make chaos`` (``WALSTREAM_NETFAULT_SLOW=1``), not in ``make test``
    (docs/CHAOS.md)."""
    if os.environ.get(SLOW_ENV) != "1":
        print(f"the slow-link fault runs in make chaos ({SLOW_ENV}=1)")
        pytest.skip(f"runs when {SLOW_ENV}=1 (make chaos)")
    lab = proxied_lab
    pair = _pair(lab)
    fig: dict[str, Any] = {}
    try:
        on: dict[str, subprocess.Popen[bytes]] = {}
        on["drivera"], on["driverb"] = _start(lab, pair)
        slow_at = time.time()
        lab.slow_broker_link()
        time.sleep(SLOW_S)
        lab.fast_broker_link()
        fast_at = time.time()
        during = pair.batches(None, slow_at)
        fig["batches completed while slow"] = sum(1 for b in during if b["wall"] < fast_at)
        fig["drivers exited by the end of the minute"] = sum(
            1 for p in on.values() if p.poll() is not None)
        _wait_settled(pair, on, fast_at, lab)
        fig["fast again -> one leads, one stands by"] = time.time() - fast_at
        checks = _wait_exact(lab, pair)
        fig["fast again -> totals exact"] = time.time() - fast_at
        late: list[dict[str, Any]] = []
        for p in pair.procs:
            stopped = _STOPPED.findall(pair.log_of(p))
            if stopped:
                fig[f"process {p.pid} stopped leading"] = f"{_log_time(stopped[0]) - slow_at:.1f}" \
                    " s after the link slowed"
                late += pair.batches(p, _log_time(stopped[0]) + 1.0)
        fig["led at the end"] = ", ".join(
            f"pid {p.pid}" for p in pair.procs if p.poll() is None and pair.batches(p, fast_at))
        for path, check in checks.items():
            fig[path] = str(check)
        assert all(c.exact() for c in checks.values()) and not late, (
            "\n".join(f"{p}: {c}" for p, c in checks.items())
            + f"\nbatches completed after their driver stopped leading: {late}")
    finally:
        _report("slow, lossy broker link", fig)
        pair.close()
