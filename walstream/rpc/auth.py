"""Authentication of the receiver endpoint: what each side proves, and with which key.

The application has one secret, known to its driver only: Spark's
``spark.authenticate.secret`` when ``spark.authenticate`` is on, else one generated
when the engine starts. Only two keys derived from it ever leave the driver, in
:class:`EndpointCredentials` (each receiver's task spec carries them), so Spark's
own secret is never sent to an executor nor over the endpoint's connections:

* the **call token**: every call a receiver makes presents it as the call metadata
  :data:`AUTH_METADATA_KEY`; the endpoint compares it in constant time before it
  decodes any body, and refuses a call without it, or with another one, as
  UNAUTHENTICATED. It is a bearer credential: on a plaintext connection whoever
  can read the traffic can present it too, hence TLS on untrusted networks.
* the **driver key**: never sent. The driver MACs with it what a receiver acts on:
  the registration answer (over a fresh nonce the receiver sent, so a recorded
  answer does not replay), every accepting AddBlock answer (over the session and the
  block id: only then does a receiver acknowledge its source) and every command
  (over the session and a per-session sequence number the receiver sees strictly
  increase, so a recorded command does not replay). A process that took over the
  driver's port without the secret can therefore hand out no session, no resume
  position, no acknowledgement and no command a receiver acts on.

A **session token** (random, per registration) binds the calls after a registration
to its stream: AddBlock, Report and Control present it, and the endpoint refuses
another stream's token, or one a newer registration of the stream superseded, as
PERMISSION_DENIED.

An endpoint in this process publishes its credentials here under its address
(:func:`publish_local`), so a task spec or client built in the same process for that
address finds them (:func:`local_credentials`): in-process tests and tools need not
pass them. Nothing leaves the process that way; executors get them in their spec.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from walstream.errors import ConfigError
from walstream.rpc import messages as m

#: The call metadata carrying the call token (``-bin``: gRPC sends it as bytes).
AUTH_METADATA_KEY = "walstream-auth-bin"
#: Bytes of a generated secret, of a derived key and of a registration nonce.
SECRET_BYTES = 32
NONCE_BYTES = 32
#: The nonce lengths the endpoint accepts in a registration.
MIN_NONCE_BYTES, MAX_NONCE_BYTES = 16, 64

_DOMAIN = b"walstream receiver endpoint v2"


def _derive(secret: bytes, context: str, purpose: bytes) -> bytes:
    return hmac.new(secret, b"\0".join((_DOMAIN, context.encode("utf-8"), purpose)),
                    hashlib.sha256).digest()


@dataclass(frozen=True)
class EndpointCredentials:
    """What a receiver needs to talk to its driver: the call token, the driver key and,
    when the endpoint serves TLS, the PEM certificate(s) it trusts. No field shows in
    ``repr``; build one with :meth:`from_secret` or :meth:`generate`."""

    call_token: bytes = field(repr=False)
    driver_key: bytes = field(repr=False)
    tls_root_pem: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if len(self.call_token) != SECRET_BYTES or len(self.driver_key) != SECRET_BYTES:
            raise ConfigError(f"EndpointCredentials: keys must be {SECRET_BYTES} bytes")

    @classmethod
    def from_secret(cls, secret: bytes, context: str = "",
                    tls_root_pem: bytes | None = None) -> EndpointCredentials:
        """Keys derived from ``secret`` for ``context`` (the application id: one Spark
        secret shared by several applications gives each its own keys)."""
        if not secret:
            raise ConfigError("the endpoint secret must not be empty")
        return cls(_derive(secret, context, b"call"), _derive(secret, context, b"driver"),
                   tls_root_pem)

    @classmethod
    def generate(cls, tls_root_pem: bytes | None = None) -> EndpointCredentials:
        """Keys of a fresh random secret (which is not kept)."""
        return cls.from_secret(secrets.token_bytes(SECRET_BYTES), "", tls_root_pem)

    def with_tls_root(self, tls_root_pem: bytes | None) -> EndpointCredentials:
        return replace(self, tls_root_pem=tls_root_pem)

    @property
    def metadata(self) -> tuple[tuple[str, bytes], ...]:
        """The call metadata every call presents."""
        return ((AUTH_METADATA_KEY, self.call_token),)


def call_refusal(expected: bytes, presented: Iterable[Any]) -> str | None:
    """Why a call whose :data:`AUTH_METADATA_KEY` values are ``presented`` is refused,
    or None when it presents exactly ``expected`` (compared in constant time)."""
    values = list(presented)
    if not values:
        return ("no application secret presented: the endpoint serves only the "
                "receivers its driver launched, whose task spec carries the credentials")
    if len(values) > 1:
        return "more than one application secret presented"
    value = values[0]
    if not isinstance(value, bytes) or not hmac.compare_digest(value, expected):
        return "wrong application secret: not a receiver of this application's driver"
    return None


def new_session_token() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


#: Characters of a session token (base64url of :data:`SECRET_BYTES` bytes, unpadded).
SESSION_TOKEN_CHARS = len(new_session_token())


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def same_token(a: str, b: str) -> bool:
    """Whether two session tokens are equal (constant time; an empty one equals none)."""
    return bool(a) and bool(b) and hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def _mac(key: bytes, label: bytes, *parts: bytes) -> bytes:
    h = hmac.new(key, label, hashlib.sha256)
    for part in parts:  # length-prefixed: no two different part lists give one input
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.digest()


def _int(n: int) -> bytes:
    return n.to_bytes(8, "big", signed=True)


def _check(mac: bytes, presented: Any) -> bool:
    return isinstance(presented, bytes) and hmac.compare_digest(mac, presented)


# -- the registration answer: over the receiver's nonce and the whole answer ----------

def _registration_mac(key: bytes, stream_id: int, nonce: bytes,
                      answer: Mapping[str, Any]) -> bytes:
    body = m.REGISTER_RESPONSE.encode({**answer, "proof": b""})
    return _mac(key, b"register", _int(stream_id), nonce, body)


def sign_registration(key: bytes, stream_id: int, nonce: bytes,
                      answer: Mapping[str, Any]) -> dict[str, Any]:
    return {**answer, "proof": _registration_mac(key, stream_id, nonce, answer)}


def registration_is_signed(key: bytes, stream_id: int, nonce: bytes,
                           answer: Mapping[str, Any]) -> bool:
    return _check(_registration_mac(key, stream_id, nonce, answer), answer.get("proof"))


# -- an AddBlock answer: over the session, the block id and the answer -----------------

def _add_block_mac(key: bytes, stream_id: int, session: str, block_id: str,
                   answer: Mapping[str, Any]) -> bytes:
    body = m.ADD_BLOCK_RESPONSE.encode({**answer, "proof": b""})
    return _mac(key, b"add-block", _int(stream_id), session.encode("utf-8"),
                block_id.encode("utf-8"), body)


def sign_add_block(key: bytes, stream_id: int, session: str, block_id: str,
                   answer: Mapping[str, Any]) -> dict[str, Any]:
    return {**answer, "proof": _add_block_mac(key, stream_id, session, block_id, answer)}


def add_block_is_signed(key: bytes, stream_id: int, session: str, block_id: str,
                        answer: Mapping[str, Any]) -> bool:
    return _check(_add_block_mac(key, stream_id, session, block_id, answer),
                  answer.get("proof"))


# -- a clean grant: over the session, the threshold, the receiver's nonce, the answer ----

def _clean_grant_mac(key: bytes, stream_id: int, session: str, thresh_time_ms: int,
                     nonce: bytes, answer: Mapping[str, Any]) -> bytes:
    body = m.CLEAN_GRANT_RESPONSE.encode({**answer, "proof": b""})
    return _mac(key, b"clean-grant", _int(stream_id), session.encode("utf-8"),
                _int(thresh_time_ms), nonce, body)


def sign_clean_grant(key: bytes, stream_id: int, session: str, thresh_time_ms: int,
                     nonce: bytes, answer: Mapping[str, Any]) -> dict[str, Any]:
    return {**answer, "proof": _clean_grant_mac(key, stream_id, session, thresh_time_ms,
                                                nonce, answer)}


def clean_grant_is_signed(key: bytes, stream_id: int, session: str, thresh_time_ms: int,
                          nonce: bytes, answer: Mapping[str, Any]) -> bool:
    return _check(_clean_grant_mac(key, stream_id, session, thresh_time_ms, nonce, answer),
                  answer.get("proof"))


# -- a command: over the session, its sequence number and the whole command -----------

def _command_mac(key: bytes, stream_id: int, session: str, command: Mapping[str, Any]) -> bytes:
    body = m.COMMAND.encode({**command, "mac": b""})
    return _mac(key, b"command", _int(stream_id), session.encode("utf-8"), body)


def sign_command(key: bytes, stream_id: int, session: str, seq: int,
                 command: Mapping[str, Any]) -> dict[str, Any]:
    """``command`` (a ``COMMAND`` body, missing fields at their defaults) as sequence
    number ``seq`` of the session, with its MAC."""
    full = {"message": "", "thresh_time_ms": 0, "rate_limit": 0.0, **command, "seq": seq}
    return {**full, "mac": _command_mac(key, stream_id, session, full)}


def command_is_signed(key: bytes, stream_id: int, session: str,
                      command: Mapping[str, Any]) -> bool:
    return _check(_command_mac(key, stream_id, session, command), command.get("mac"))


# -- endpoints of this process ----------------------------------------------------------

_LOCAL: dict[str, EndpointCredentials] = {}
_LOCAL_LOCK = threading.Lock()


def publish_local(address: str, credentials: EndpointCredentials) -> None:
    """The endpoint serving ``address`` in this process uses ``credentials``."""
    with _LOCAL_LOCK:
        _LOCAL[address] = credentials


def withdraw_local(address: str, credentials: EndpointCredentials) -> None:
    """Undo :func:`publish_local` (unless another endpoint took the address since)."""
    with _LOCAL_LOCK:
        if _LOCAL.get(address) is credentials:
            del _LOCAL[address]


def local_credentials(address: str) -> EndpointCredentials | None:
    """The credentials of the endpoint serving ``address`` in this process, if any."""
    with _LOCAL_LOCK:
        return _LOCAL.get(address)
