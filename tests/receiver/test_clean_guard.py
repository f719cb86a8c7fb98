"""A receiver deletes its WAL data only while its driver is certain to lead: the driver
commanded the clean, its lease is held when the receiver's cleaning thread is about
to delete, and enough of it is left for the delete to be issued inside it. A
deposed leader's command, a lease run out between command and delete, a grant
with too little lease left, or a grant not signed by the driver deletes nothing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from walstream.driver.ha.errors import LeaseLostError
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver.clean_guard import CleanGuard
from walstream.receiver.driver_client import DriverClient
from walstream.receiver.errors import CleanRefusedError, DriverProofError
from walstream.receiver.receiver import Receiver
from walstream.receiver.task import ReceiverTaskSpec, receiver_wal
from walstream.rpc import auth
from walstream.rpc import messages as m
from walstream.testing import MemoryWAL
from walstream.wal import KafkaWriteAheadLog

pytestmark = pytest.mark.timeout(120)

THRESH = 500


class _Idle(Receiver):
    def onStart(self) -> None:
        pass

    def onStop(self) -> None:
        pass


class Leadership:
    """The driver's lease as the endpoint sees it: a check and the validity left."""

    def __init__(self) -> None:
        self.held = True
        self.left_s = 3.0

    def check(self) -> None:
        if not self.held:
            raise LeaseLostError("no renewal confirmed in time")

    def validity(self) -> float:
        return self.left_s if self.held else 0.0


@pytest.fixture
def driver() -> Iterator[tuple[ReceiverTracker, Leadership]]:
    blocks = ReceivedBlockTracker([0], MemoryWAL())
    tracker = ReceiverTracker(blocks, [0])
    lead = Leadership()
    tracker.leadership = lead.check
    tracker.leadership_validity = lead.validity
    yield tracker, lead
    tracker.stop()
    blocks.stop()


@pytest.fixture
def client(driver: tuple[ReceiverTracker, Leadership]) -> Iterator[DriverClient]:
    c = DriverClient(driver[0].address, timeout_s=20)
    assert c.register_receiver(0, "h", "e").accepted
    yield c
    c.close()


@pytest.fixture
def receiver_log(bootstrap: str, unique_name: Callable[[str], str], client: DriverClient
                 ) -> Iterator[tuple[KafkaWriteAheadLog, CleanGuard]]:
    """The receiver's WAL as its task builds it, holding segments older than THRESH."""
    spec = ReceiverTaskSpec(0, _Idle(), client.address, bootstrap, unique_name("rwal"),
                            wal_options={"rolling_interval_ms": 100, "write_timeout_s": 20.0,
                                         "read_timeout_s": 20.0})
    wal, guard = receiver_wal(spec, client)
    for i in range(20):
        wal.write(f"r{i}".encode(), i * 50)
    assert any(s.end_ms <= THRESH for s in wal.segments())  # something a clean deletes
    yield wal, guard
    wal.close()
    cleaner = KafkaWriteAheadLog(bootstrap, spec.wal_name)
    cleaner._clean_now(2**42)
    cleaner.close()


def _topics(wal: KafkaWriteAheadLog) -> list[str]:
    return [s.topic for s in wal.segments()]


def test_a_clean_commanded_by_the_leader_deletes_while_it_leads(
        driver: tuple[ReceiverTracker, Leadership],
        receiver_log: tuple[KafkaWriteAheadLog, CleanGuard]) -> None:
    tracker, _ = driver
    wal, guard = receiver_log
    tracker.cleanup_old_blocks(THRESH)
    guard.asked(THRESH)
    wal.clean(THRESH, wait_for_completion=True)
    assert wal.segments() and all(s.end_ms > THRESH for s in wal.segments())


def test_a_lease_run_out_between_command_and_delete_deletes_nothing(
        driver: tuple[ReceiverTracker, Leadership],
        receiver_log: tuple[KafkaWriteAheadLog, CleanGuard]) -> None:
    """The leader checked its lease and commanded the clean; before the receiver's
    cleaning thread got to the delete, the lease ran out (a standby may lead now
    and still need these blocks)."""
    tracker, lead = driver
    wal, guard = receiver_log
    before = _topics(wal)
    tracker.cleanup_old_blocks(THRESH)
    guard.asked(THRESH)
    lead.held = False
    with pytest.raises(CleanRefusedError, match="not certain to lead"):
        wal.clean(THRESH, wait_for_completion=True)
    assert _topics(wal) == before
    lead.held = True  # leading again: the next clean goes through
    wal.clean(THRESH, wait_for_completion=True)
    assert all(s.end_ms > THRESH for s in wal.segments())


def test_a_clean_this_driver_never_commanded_deletes_nothing(
        driver: tuple[ReceiverTracker, Leadership],
        receiver_log: tuple[KafkaWriteAheadLog, CleanGuard]) -> None:
    """A command from a deposed leader, acted on while the receiver reports to the new
    one: the new leader asked for no clean that far and grants none."""
    tracker, _ = driver
    wal, guard = receiver_log
    before = _topics(wal)
    tracker.cleanup_old_blocks(THRESH - 200)
    guard.asked(THRESH)
    with pytest.raises(CleanRefusedError, match="asked for cleans below 300 only"):
        wal.clean(THRESH, wait_for_completion=True)
    assert _topics(wal) == before


def test_a_grant_with_too_little_lease_left_deletes_nothing(
        driver: tuple[ReceiverTracker, Leadership],
        receiver_log: tuple[KafkaWriteAheadLog, CleanGuard]) -> None:
    tracker, lead = driver
    wal, guard = receiver_log
    before = _topics(wal)
    tracker.cleanup_old_blocks(THRESH)
    guard.asked(THRESH)
    lead.left_s = guard.margin_s / 2
    with pytest.raises(CleanRefusedError, match=r"under the 0\.5 s margin"):
        wal.clean(THRESH, wait_for_completion=True)
    assert _topics(wal) == before


def test_a_driver_without_high_availability_grants_without_a_bound(
        driver: tuple[ReceiverTracker, Leadership], client: DriverClient) -> None:
    tracker, _ = driver
    tracker.leadership = None
    tracker.leadership_validity = None
    tracker.cleanup_old_blocks(THRESH)
    assert client.may_clean(0, THRESH) is None
    assert client.may_clean(0, THRESH - 1) is None  # a lower threshold is covered
    with pytest.raises(CleanRefusedError):
        client.may_clean(0, THRESH + 1)


def test_the_guard_asks_for_the_highest_threshold_commanded() -> None:
    asks: list[int] = []

    class Grants:
        def may_clean(self, stream_id: int, thresh_time_ms: int) -> float | None:
            asks.append(thresh_time_ms)
            return None

    guard = CleanGuard(Grants(), 0)
    for t in (700, 900, 800):
        guard.asked(t)
    guard()
    assert asks == [900]
    with pytest.raises(ValueError):
        CleanGuard(Grants(), 0, margin_s=0)


# -- grants that do not come from the driver ------------------------------------------

CREDS = auth.EndpointCredentials.generate()
WRONG_KEY = auth.EndpointCredentials.generate().driver_key


class GrantingSquatter:
    """A process on the driver's port that grants every clean: with ``sign_key``,
    and over ``nonce`` (default: the ask's own) for a replayed grant."""

    def __init__(self, sign_key: bytes, nonce: bytes | None = None) -> None:
        self.sign_key, self.nonce = sign_key, nonce
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handlers = {
            "RegisterReceiver": grpc.unary_unary_rpc_method_handler(
                self._register, m.decode(m.REGISTER_REQUEST), m.encode(m.REGISTER_RESPONSE)),
            "MayClean": grpc.unary_unary_rpc_method_handler(
                self._may_clean, m.decode(m.CLEAN_GRANT_REQUEST),
                m.encode(m.CLEAN_GRANT_RESPONSE)),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(m.SERVICE, handlers),))
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def _register(self, req: dict[str, Any], _: Any) -> dict[str, Any]:
        answer = {"accepted": True, "message": "", "rate_limit": 0.0, "positions": [],
                  "session": "s"}
        return auth.sign_registration(CREDS.driver_key, req["stream_id"], req["nonce"], answer)

    def _may_clean(self, req: dict[str, Any], _: Any) -> dict[str, Any]:
        return auth.sign_clean_grant(self.sign_key, req["stream_id"], req["session"],
                                     req["thresh_time_ms"], self.nonce or req["nonce"],
                                     {"granted": True, "message": "", "valid_ms": 0})

    def stop(self) -> None:
        self._server.stop(0).wait(5)


@pytest.mark.parametrize("who", ["wrong key", "replayed grant"])
def test_a_grant_that_does_not_prove_the_secret_deletes_nothing(who: str) -> None:
    squatter = GrantingSquatter(WRONG_KEY) if who == "wrong key" else GrantingSquatter(
        CREDS.driver_key, nonce=auth.new_nonce())
    client = DriverClient(squatter.address, timeout_s=10, credentials=CREDS)
    try:
        assert client.register_receiver(0, "h", "e").accepted
        guard = CleanGuard(client, 0)
        guard.asked(THRESH)
        with pytest.raises(DriverProofError, match="nothing is deleted"):
            guard()
    finally:
        client.close()
        squatter.stop()
