"""A receiver believes only its driver: against a process on the driver's port that does
not sign with the driver key (a squatter), or that replays what the driver signed, the
client refuses the registration and acceptances and ignores the commands, and never
retries a refused secret or session."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from tests.receiver.doubles import FakeReporter
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.clean_guard import CleanGuard
from walstream.receiver.driver_client import DriverClient
from walstream.receiver.errors import (
    BlockReportError,
    DriverProofError,
    EndpointPermissionError,
    EndpointSecurityError,
)
from walstream.receiver.task import _follow_control
from walstream.rpc import auth
from walstream.rpc import messages as m
from walstream.testing import WAIT_S, MemoryWAL, wait_until
from walstream.wal import RecordHandle

pytestmark = pytest.mark.timeout(60)

CREDS = auth.EndpointCredentials.generate()
WRONG_KEY = auth.EndpointCredentials.generate().driver_key
SESSION = "session-of-stream-0"


class FakeDriver:
    """A gRPC server on the driver's service that answers as the test says:
    ``sign_key`` signs registrations and acceptances, ``commands`` is the Control
    stream (already signed, or not, by the test), ``control_refusal`` refuses it."""

    def __init__(self) -> None:
        self.sign_key = CREDS.driver_key
        self.nonce_override: bytes | None = None
        self.add_block_answer: dict[str, Any] | None = None
        self.commands: list[dict[str, Any]] = []
        self.control_refusal: str | None = None
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = {
            "RegisterReceiver": grpc.unary_unary_rpc_method_handler(
                self._register, m.decode(m.REGISTER_REQUEST), m.encode(m.REGISTER_RESPONSE)),
            "AddBlock": grpc.unary_unary_rpc_method_handler(
                self._add_block, m.decode(m.ADD_BLOCK_REQUEST), m.encode(m.ADD_BLOCK_RESPONSE)),
            "Control": grpc.unary_stream_rpc_method_handler(
                self._control, m.decode(m.CONTROL_REQUEST), m.encode(m.COMMAND)),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(m.SERVICE, handlers),))
        self.address = f"127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def _register(self, req: dict[str, Any], _: Any) -> dict[str, Any]:
        answer = {"accepted": True, "message": "registered", "rate_limit": 0.0,
                  "positions": [{"topic": "src", "partition": 0, "from_offset": 0,
                                 "until_offset": 10**9}], "session": SESSION}
        nonce = self.nonce_override or req["nonce"]
        return auth.sign_registration(self.sign_key, req["stream_id"], nonce, answer)

    def _add_block(self, req: dict[str, Any], _: Any) -> dict[str, Any]:
        if self.add_block_answer is not None:
            return self.add_block_answer
        block = req["block"]
        return auth.sign_add_block(self.sign_key, block["stream_id"], req["session"],
                                   block["block_id"], {"ok": True, "message": ""})

    def _control(self, req: dict[str, Any], ctx: Any) -> Iterator[dict[str, Any]]:
        if self.control_refusal is not None:
            ctx.abort(grpc.StatusCode.PERMISSION_DENIED, self.control_refusal)
        yield from self.commands

    def stop(self) -> None:
        self._server.stop(0).wait(5)


@pytest.fixture
def fake() -> Iterator[FakeDriver]:
    driver = FakeDriver()
    yield driver
    driver.stop()


@pytest.fixture
def client(fake: FakeDriver) -> Iterator[DriverClient]:
    c = DriverClient(fake.address, timeout_s=10, credentials=CREDS)
    yield c
    c.close()


def _info(i: int = 0) -> ReceivedBlockInfo:
    return ReceivedBlockInfo(0, f"input-0-{i}", 1, RecordHandle("w", 0, i),
                             (SourceRange("src", 0, i, i + 1),))


def _signed(seq: int, kind: str, key: bytes = CREDS.driver_key, session: str = SESSION,
            **fields: Any) -> dict[str, Any]:
    return auth.sign_command(key, 0, session, seq, {"kind": kind, **fields})


def test_a_registration_answer_signed_without_the_secret_is_refused(
    fake: FakeDriver, client: DriverClient
) -> None:
    fake.sign_key = WRONG_KEY
    with pytest.raises(DriverProofError, match="does not prove the application secret"):
        client.register_receiver(0, "h", "e")
    assert client.session_of(0) == ""  # no session taken from it


def test_a_replayed_registration_answer_for_another_nonce_is_refused(
    fake: FakeDriver, client: DriverClient
) -> None:
    fake.nonce_override = b"an answer recorded for another registration"
    with pytest.raises(DriverProofError):
        client.register_receiver(0, "h", "e")
    fake.nonce_override = None
    assert client.register_receiver(0, "h", "e").session == SESSION


def test_an_acceptance_without_the_drivers_proof_is_not_believed(
    fake: FakeDriver, client: DriverClient
) -> None:
    client.register_receiver(0, "h", "e")
    assert client.add_block(_info(0))  # signed for this session and block
    fake.add_block_answer = {"ok": True, "message": "", "proof": b"x" * 32}
    with pytest.raises(DriverProofError, match="source is not acknowledged"):
        client.add_block(_info(1))
    # A proof for another block is no proof for this one.
    fake.add_block_answer = auth.sign_add_block(CREDS.driver_key, 0, SESSION, "input-0-9",
                                                {"ok": True, "message": ""})
    with pytest.raises(DriverProofError):
        client.add_block(_info(1))
    # A refusal needs no proof: acting on it acknowledges nothing.
    fake.add_block_answer = {"ok": False, "message": "no", "proof": b""}
    assert client.add_block(_info(1)) is False


def test_forged_and_replayed_commands_are_ignored_and_logged(
    fake: FakeDriver, client: DriverClient, caplog: pytest.LogCaptureFixture
) -> None:
    client.register_receiver(0, "h", "e")
    cleanup = _signed(2, "CLEANUP_OLD_BLOCKS", thresh_time_ms=5000)
    fake.commands = [
        _signed(1, "STOP", key=WRONG_KEY, message="forged: wrong key"),
        {**_signed(1, "STOP", message="forged: tampered"), "message": "tampered"},
        {"kind": "STOP", "message": "forged: unsigned", "thresh_time_ms": 0,
         "rate_limit": 0.0, "seq": 1, "mac": b""},
        cleanup,
        cleanup,  # replayed
        _signed(1, "UPDATE_RATE_LIMIT", rate_limit=1.0),  # an older sequence number
        _signed(3, "STOP", session="another session", message="forged: other session"),
        _signed(4, "STOP", message="the driver's stop"),
    ]
    with caplog.at_level(logging.WARNING, logger="walstream.receiver.driver_client"):
        got = list(client.control(0))
    assert got == [cleanup, fake.commands[-1]]
    ignored = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(ignored) == 6, ignored
    assert sum("replayed" in text for text in ignored) == 2


class _FakeSupervisor:
    """What ``_follow_control`` acts on, recording every action."""

    def __init__(self) -> None:
        self.stream_id = 0
        self.stopped = threading.Event()
        self.actions: list[tuple[str, Any]] = []
        outer = self

        class _Wal:
            def clean(self, thresh: int, wait: bool) -> None:
                outer.actions.append(("clean", thresh))

        class _Generator:
            def update_rate(self, rate: float) -> None:
                outer.actions.append(("rate", rate))

        self.wal = _Wal()
        self.generator = _Generator()

    def stop(self, message: str, error: BaseException | None) -> None:
        self.actions.append(("stop", message))
        self.stopped.set()


def test_the_receiver_task_acts_only_on_the_drivers_commands(
    fake: FakeDriver, client: DriverClient
) -> None:
    client.register_receiver(0, "h", "e")
    fake.commands = [
        _signed(1, "STOP", key=WRONG_KEY, message="forged"),
        _signed(1, "CLEANUP_OLD_BLOCKS", key=WRONG_KEY, thresh_time_ms=10**12),
        _signed(2, "UPDATE_RATE_LIMIT", rate_limit=3.0),
        _signed(2, "UPDATE_RATE_LIMIT", rate_limit=3.0),  # replayed
        _signed(3, "CLEANUP_OLD_BLOCKS", thresh_time_ms=7000),
        _signed(4, "STOP", message="the driver's stop"),
    ]
    sup = _FakeSupervisor()
    guard = CleanGuard(client, 0)
    _follow_control(client, sup, guard)
    assert sup.stopped.wait(WAIT_S)
    wait_until(lambda: ("stop", "the driver's stop") in sup.actions)
    assert sup.actions == [("rate", 3.0), ("clean", 7000), ("stop", "the driver's stop")]
    asked: list[int] = []
    guard.client = type("Grants", (), {"may_clean": lambda _, s, t: asked.append(t)})()
    guard()
    assert asked == [7000]  # the guard asks for the signed command's threshold only


def test_a_refused_control_stream_stops_the_receiver_with_the_typed_error(
    fake: FakeDriver, client: DriverClient
) -> None:
    fake.control_refusal = "the session token is stream 3's"
    client.register_receiver(0, "h", "e")
    stops: list[BaseException | None] = []
    sup = _FakeSupervisor()
    sup.stop = lambda message, error: stops.append(error)  # type: ignore[method-assign]
    _follow_control(client, sup, CleanGuard(client, 0))
    assert len(stops) == 1 and isinstance(stops[0], EndpointPermissionError)
    assert "stream 3's" in str(stops[0])


@pytest.mark.parametrize("error", [
    DriverProofError("not the driver"),
    EndpointPermissionError("the session token is stream 1's"),
])
def test_a_security_refusal_of_a_block_is_not_retried_and_not_acked(
    error: EndpointSecurityError, make_sup: Callable[..., Any], reporter: FakeReporter,
    wal: MemoryWAL,
) -> None:
    reporter.add_block_answer = error
    sup, receiver = make_sup(lambda r: r.store(["a"], SourceRange("src", 0, 0, 1)),
                             report_retries=5, report_backoff_s=0.5)
    sup.start()
    assert sup.await_termination(WAIT_S), "the supervisor did not stop"
    assert isinstance(sup.error, BlockReportError) and sup.error.__cause__ is error
    assert reporter.add_block_attempts == 1  # never retried
    assert receiver.reported == []  # the source is not acknowledged
