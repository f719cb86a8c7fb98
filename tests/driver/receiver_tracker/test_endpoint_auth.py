"""The receiver endpoint refuses whoever lacks the application secret (UNAUTHENTICATED)
and calls with another stream's or a superseded session token (PERMISSION_DENIED),
each case on its own, and answers with the driver key's proofs."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from tests.driver.helpers import CommandFollower, assert_no_leak
from walstream.driver.receiver_tracker.tracker import ReceiverTracker
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.receiver.block import SourceRange
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.receiver.driver_client import DriverClient
from walstream.receiver.errors import EndpointAuthError, EndpointPermissionError
from walstream.receiver.rate_receiver import RateGeneratorReceiver
from walstream.receiver.task import ReceiverTaskSpec
from walstream.rpc import auth
from walstream.rpc import messages as m
from walstream.testing import MemoryWAL, wait_until
from walstream.wal import RecordHandle

pytestmark = pytest.mark.timeout(60)


def _info(stream: int, i: int = 0) -> ReceivedBlockInfo:
    return ReceivedBlockInfo(stream, f"input-{stream}-{i}", 10,
                             RecordHandle("receiver-wal", 0, i),
                             (SourceRange("src", stream, i * 10, i * 10 + 10),))


@pytest.fixture
def endpoint(grpc_endpoint: tuple[ReceiverTracker, MemoryWAL]
             ) -> tuple[ReceiverTracker, MemoryWAL]:
    return grpc_endpoint


@pytest.fixture
def clients(endpoint: tuple[ReceiverTracker, MemoryWAL]) -> Iterator[list[DriverClient]]:
    """Two receivers' clients, registered for streams 0 and 1."""
    tracker, _ = endpoint
    made = [DriverClient(tracker.address, timeout_s=10) for _ in range(2)]
    for s, c in enumerate(made):
        assert c.register_receiver(s, "h", f"e{s}").accepted
    yield made
    for c in made:
        c.close()


def _unary(tracker: ReceiverTracker, method: str, codec: m.BoundedCodec, body: dict[str, Any],
           metadata: Any = None) -> Any:
    """One call with ``body`` as-is (the test decides every field and the metadata)."""
    responses = {"RegisterReceiver": m.REGISTER_RESPONSE, "AddBlock": m.ADD_BLOCK_RESPONSE,
                 "Report": m.EMPTY}
    channel = grpc.insecure_channel(tracker.address)
    try:
        call = channel.unary_unary(f"/{m.SERVICE}/{method}", request_serializer=m.encode(codec),
                                   response_deserializer=m.decode(responses[method]))
        return call(body, timeout=10, metadata=metadata)
    finally:
        channel.close()


def _control(tracker: ReceiverTracker, body: dict[str, Any], metadata: Any = None
             ) -> dict[str, Any]:
    """The first command of a Control stream opened with ``body``."""
    channel = grpc.insecure_channel(tracker.address)
    try:
        call = channel.unary_stream(f"/{m.SERVICE}/Control",
                                    request_serializer=m.encode(m.CONTROL_REQUEST),
                                    response_deserializer=m.decode(m.COMMAND))
        stream = call(body, timeout=10, metadata=metadata)
        try:
            return dict(next(iter(stream)))
        finally:
            stream.cancel()
    finally:
        channel.close()


NONCE = b"n" * 32
REGISTER: dict[str, Any] = {"stream_id": 0, "host": "h", "executor_id": "e", "receiver_type": "",
            "nonce": NONCE}


def _every_call(tracker: ReceiverTracker, metadata: Any) -> dict[str, Any]:
    """Each method of the endpoint called with ``metadata``: the error each raised."""
    calls = {
        "RegisterReceiver": lambda: _unary(tracker, "RegisterReceiver", m.REGISTER_REQUEST,
                                           REGISTER, metadata),
        "AddBlock": lambda: _unary(tracker, "AddBlock", m.ADD_BLOCK_REQUEST,
                                   {"block": _info(0).to_dict(), "session": ""}, metadata),
        "Report": lambda: _unary(tracker, "Report", m.REPORT_REQUEST,
                                 {"stream_id": 0, "kind": "DEREGISTER", "message": "",
                                  "error": "", "session": ""}, metadata),
        "Control": lambda: _control(tracker, {"stream_id": 0, "session": ""}, metadata),
    }
    errors: dict[str, Any] = {}
    for name, call in calls.items():
        with pytest.raises(grpc.RpcError) as err:
            call()
        errors[name] = err.value
    return errors


def _nothing_happened(tracker: ReceiverTracker, wal: MemoryWAL) -> None:
    assert [tracker.receivers[s].state for s in (0, 1)] == ["inactive", "inactive"]
    assert wal.writes == 0 and tracker.tracker.get_unallocated_blocks(0) == []


# -- the application secret ----------------------------------------------------------------


def test_every_call_without_the_secret_is_refused_unauthenticated(
    endpoint: tuple[ReceiverTracker, MemoryWAL],
) -> None:
    tracker, wal = endpoint
    for name, err in _every_call(tracker, metadata=None).items():
        assert err.code() is grpc.StatusCode.UNAUTHENTICATED, name
        assert "no application secret presented" in err.details(), name
    _nothing_happened(tracker, wal)
    assert tracker.auth.refused == 4


def test_every_call_with_a_wrong_secret_is_refused_unauthenticated(
    endpoint: tuple[ReceiverTracker, MemoryWAL],
) -> None:
    tracker, wal = endpoint
    other = auth.EndpointCredentials.generate()
    for name, err in _every_call(tracker, metadata=other.metadata).items():
        assert err.code() is grpc.StatusCode.UNAUTHENTICATED, name
        assert "wrong application secret" in err.details(), name
    # Two tokens, or a token of another length, are refused too.
    doubled = (*tracker.credentials.metadata, *other.metadata)
    short = ((auth.AUTH_METADATA_KEY, tracker.credentials.call_token[:-1]),)
    for metadata in (doubled, short):
        with pytest.raises(grpc.RpcError) as err:
            _unary(tracker, "RegisterReceiver", m.REGISTER_REQUEST, REGISTER, metadata)
        assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED
    _nothing_happened(tracker, wal)


def test_a_client_without_the_secret_gets_a_typed_error_that_says_so(
    endpoint: tuple[ReceiverTracker, MemoryWAL],
) -> None:
    tracker, wal = endpoint
    port = tracker.address.rsplit(":", 1)[1]
    # Another name for the same endpoint: no endpoint of this process publishes it.
    missing = DriverClient(f"localhost:{port}", timeout_s=10)
    wrong = DriverClient(tracker.address, timeout_s=10,
                         credentials=auth.EndpointCredentials.generate())
    try:
        assert missing.credentials is None
        with pytest.raises(EndpointAuthError, match="no application secret presented"):
            missing.register_receiver(0, "h", "e")
        with pytest.raises(EndpointAuthError, match="wrong application secret"):
            wrong.register_receiver(0, "h", "e")
        with pytest.raises(EndpointAuthError, match="refused this receiver's application secret"):
            wrong.add_block(_info(0))
    finally:
        missing.close()
        wrong.close()
    _nothing_happened(tracker, wal)


def test_the_endpoint_logs_refusals_without_flooding_and_never_the_token(
    endpoint: tuple[ReceiverTracker, MemoryWAL], caplog: pytest.LogCaptureFixture,
) -> None:
    tracker, _ = endpoint
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):
            _every_call(tracker, metadata=auth.EndpointCredentials.generate().metadata)
        client = DriverClient(tracker.address, timeout_s=10)
        try:
            assert client.register_receiver(0, "h", "e").accepted
            assert client.add_block(_info(0))
        finally:
            client.close()
    refusals = [r for r in caplog.records if "unauthenticated" in r.getMessage()]
    assert len(refusals) == 1 and tracker.auth.refused == 12
    secrets = (tracker.credentials.call_token, tracker.credentials.driver_key)
    session = tracker.receivers[0].session
    for r in caplog.records:
        assert_no_leak(r.getMessage(), session, *secrets)
    assert_no_leak(caplog.text, session, *secrets)  # formatted, with any traceback
    assert_no_leak(repr(tracker.receivers[0]), session, *secrets)
    assert "call_token" not in repr(tracker.credentials)


def test_the_leak_check_finds_a_token_in_every_form_a_log_line_could_take() -> None:
    import base64

    token = auth.EndpointCredentials.generate().call_token
    for shown in (f"metadata {((auth.AUTH_METADATA_KEY, token),)}", token.hex().upper(),
                  base64.b64encode(token).decode(), base64.urlsafe_b64encode(token).decode(),
                  token.decode("latin-1"), token.hex()):
        with pytest.raises(AssertionError, match="a secret leaked"):
            assert_no_leak(f"refused a call: {shown}", token)
    assert_no_leak("refused a call: no token", token)


# -- session tokens ------------------------------------------------------------------------


def test_add_block_with_another_streams_token_is_refused(
    endpoint: tuple[ReceiverTracker, MemoryWAL], clients: list[DriverClient],
) -> None:
    tracker, wal = endpoint
    token_of_0 = clients[0].session_of(0)
    with pytest.raises(grpc.RpcError) as err:
        _unary(tracker, "AddBlock", m.ADD_BLOCK_REQUEST,
               {"block": _info(1).to_dict(), "session": token_of_0},
               tracker.credentials.metadata)
    assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "the session token is stream 0's" in err.value.details()
    assert wal.writes == 0 and tracker.tracker.get_unallocated_blocks(1) == []
    assert clients[1].add_block(_info(1))  # its own receiver still reports


def test_report_with_another_streams_token_is_refused(
    endpoint: tuple[ReceiverTracker, MemoryWAL], clients: list[DriverClient],
) -> None:
    tracker, _ = endpoint
    for kind in ("DEREGISTER", "ERROR"):
        with pytest.raises(grpc.RpcError) as err:
            _unary(tracker, "Report", m.REPORT_REQUEST,
                   {"stream_id": 1, "kind": kind, "message": "forged", "error": "",
                    "session": clients[0].session_of(0)}, tracker.credentials.metadata)
        assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "stream 0's" in err.value.details()
    assert tracker.receivers[1].state == "active" and tracker.receivers[1].errors == []


def test_control_with_another_streams_token_is_refused(
    endpoint: tuple[ReceiverTracker, MemoryWAL], clients: list[DriverClient],
) -> None:
    tracker, _ = endpoint
    with pytest.raises(grpc.RpcError) as err:
        _control(tracker, {"stream_id": 1, "session": clients[0].session_of(0)},
                 tracker.credentials.metadata)
    assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED
    # A client told another stream's token gets the typed error when it follows.
    clients[0]._sessions[1] = clients[0].session_of(0)
    with pytest.raises(EndpointPermissionError, match="stream 0's"):
        next(iter(clients[0].control(1)))


def test_a_client_reporting_for_a_stream_it_did_not_register_gets_a_typed_error(
    clients: list[DriverClient],
) -> None:
    with pytest.raises(EndpointPermissionError, match="no session token presented"):
        clients[0].add_block(_info(1))
    with pytest.raises(EndpointPermissionError, match="no session token presented"):
        clients[0].report_error(1, "m", "e")


def test_a_stale_token_from_a_superseded_registration_is_refused_everywhere(
    endpoint: tuple[ReceiverTracker, MemoryWAL], clients: list[DriverClient],
) -> None:
    tracker, wal = endpoint
    stale = clients[0].session_of(0)
    clients[0].deregister_receiver(0, "restarting", "")
    assert clients[0].register_receiver(0, "h", "e0b").accepted
    fresh = clients[0].session_of(0)
    assert fresh != stale
    md = tracker.credentials.metadata
    calls = {
        "AddBlock": lambda: _unary(tracker, "AddBlock", m.ADD_BLOCK_REQUEST,
                                   {"block": _info(0).to_dict(), "session": stale}, md),
        "Report": lambda: _unary(tracker, "Report", m.REPORT_REQUEST,
                                 {"stream_id": 0, "kind": "DEREGISTER", "message": "",
                                  "error": "", "session": stale}, md),
        "Control": lambda: _control(tracker, {"stream_id": 0, "session": stale}, md),
    }
    for name, call in calls.items():
        with pytest.raises(grpc.RpcError) as err:
            call()
        assert err.value.code() is grpc.StatusCode.PERMISSION_DENIED, name
        assert "not the stream's current one" in err.value.details(), name
    assert wal.writes == 0 and tracker.receivers[0].state == "active"
    assert clients[0].add_block(_info(0))  # the current session reports


def test_a_control_stream_follows_its_receivers_new_session_after_a_restart_in_place(
    endpoint: tuple[ReceiverTracker, MemoryWAL], clients: list[DriverClient],
) -> None:
    tracker, _ = endpoint
    client = clients[0]
    follower = CommandFollower(client.control(0))
    got = follower.got
    tracker.update_rate_limit(0, 5.0)
    wait_until(lambda: len(got) == 1, 10, "the first rate update")
    client.deregister_receiver(0, "restart in place", "")
    assert client.register_receiver(0, "h", "e0b").accepted
    tracker.update_rate_limit(0, 7.0)
    tracker.restart_receiver(0)
    assert follower.until_stop(15), f"no STOP reached the new session's stream: {got}"
    assert [(c["kind"], c["rate_limit"]) for c in got[:2]] == [
        ("UPDATE_RATE_LIMIT", 5.0), ("UPDATE_RATE_LIMIT", 7.0)]
    assert got[-1]["kind"] == "STOP"


# -- the driver's proofs -------------------------------------------------------------------


def test_answers_and_commands_carry_the_driver_keys_proofs(
    endpoint: tuple[ReceiverTracker, MemoryWAL],
) -> None:
    tracker, _ = endpoint
    key, md = tracker.credentials.driver_key, tracker.credentials.metadata
    answer = _unary(tracker, "RegisterReceiver", m.REGISTER_REQUEST, REGISTER, md)
    assert answer["accepted"]
    assert auth.registration_is_signed(key, 0, NONCE, answer)
    assert not auth.registration_is_signed(key, 0, b"m" * 32, answer)  # another nonce
    session = answer["session"]
    ok = _unary(tracker, "AddBlock", m.ADD_BLOCK_REQUEST,
                {"block": _info(0).to_dict(), "session": session}, md)
    assert ok["ok"] and auth.add_block_is_signed(key, 0, session, "input-0-0", ok)
    assert not auth.add_block_is_signed(key, 0, session, "input-0-1", ok)
    cmd = _control(tracker, {"stream_id": 0, "session": session}, md)
    assert cmd["kind"] == "HEARTBEAT" and cmd["seq"] >= 1
    assert auth.command_is_signed(key, 0, session, cmd)
    assert not auth.command_is_signed(key, 1, session, cmd)


def test_a_registration_without_a_nonce_is_refused(
    endpoint: tuple[ReceiverTracker, MemoryWAL],
) -> None:
    tracker, _ = endpoint
    with pytest.raises(grpc.RpcError) as err:
        _unary(tracker, "RegisterReceiver", m.REGISTER_REQUEST, {**REGISTER, "nonce": b""},
               tracker.credentials.metadata)
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "nonce" in err.value.details()
    assert tracker.receivers[0].state == "inactive"


# -- credentials reach the receivers -------------------------------------------------------


def test_a_spec_built_beside_the_endpoint_carries_its_credentials_and_never_shows_them(
    endpoint: tuple[ReceiverTracker, MemoryWAL],
) -> None:
    tracker, _ = endpoint
    spec = ReceiverTaskSpec(0, RateGeneratorReceiver(1.0), tracker.address, "b:1", "a-receiver-0")
    assert spec.credentials is tracker.credentials
    shown = repr(spec)
    assert "credentials" not in shown
    assert_no_leak(shown, tracker.credentials.call_token, tracker.credentials.driver_key)
    copy = pickle.loads(pickle.dumps(spec))  # what the executor gets
    assert copy.credentials == tracker.credentials
    elsewhere = ReceiverTaskSpec(0, RateGeneratorReceiver(1.0), "10.9.9.9:1", "b:1", "a-r-0")
    assert elsewhere.credentials is None
    given = auth.EndpointCredentials.generate()
    assert ReceiverTaskSpec(0, RateGeneratorReceiver(1.0), tracker.address, "b:1", "a-r-0",
                            credentials=given).credentials is given


def test_a_stopped_endpoint_withdraws_its_credentials() -> None:
    blocks = ReceivedBlockTracker([0], None)
    tracker = ReceiverTracker(blocks, [0])
    assert auth.local_credentials(tracker.address) is tracker.credentials
    tracker.stop()
    blocks.stop()
    assert auth.local_credentials(tracker.address) is None


def test_credentials_derive_from_a_secret_per_application() -> None:
    a = auth.EndpointCredentials.from_secret(b"spark-secret", "app-a")
    assert a == auth.EndpointCredentials.from_secret(b"spark-secret", "app-a")
    b = auth.EndpointCredentials.from_secret(b"spark-secret", "app-b")
    assert a.call_token != b.call_token and a.driver_key != b.driver_key
    assert a.call_token != a.driver_key
    assert auth.EndpointCredentials.generate() != auth.EndpointCredentials.generate()
    with pytest.raises(ValueError, match="must not be empty"):
        auth.EndpointCredentials.from_secret(b"")


def test_endpoint_limits_keep_room_for_a_session_token() -> None:
    from walstream.driver.receiver_tracker.endpoint_limits import EndpointLimits

    with pytest.raises(ValueError, match="max_name_bytes must be >= 43"):
        EndpointLimits(max_name_bytes=auth.SESSION_TOKEN_CHARS - 1)
    assert EndpointLimits(max_name_bytes=auth.SESSION_TOKEN_CHARS).max_name_bytes == 43
