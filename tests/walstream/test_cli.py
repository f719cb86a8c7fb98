"""``walstream broker start|status|stop`` run as real subprocesses.

Each test uses its own ``WALSTREAM_HOME`` (under ``tmp_path``) and a free port;
the ``cli_env`` fixture stops whatever the CLI started there, also when the test
fails (``broker.stop`` then, by pid, any tansu still bound to a port the test used).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from walstream import broker, procs

pytestmark = pytest.mark.timeout(120)


@dataclass
class CliEnv:
    home: Path
    env: dict[str, str]
    ports: set[int] = field(default_factory=set)

    def port(self) -> int:
        p = procs.free_port()
        self.ports.add(p)
        return p

    def run(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "walstream.cli", *args],
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def leftovers(self) -> list[int]:
        found = []
        needles = [f"tcp://{broker.HOST}:{p}" for p in self.ports]
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            cmd = procs.cmdline(pid)
            if "tansu" in cmd and any(n in cmd for n in needles) and procs.pid_alive(pid):
                found.append(pid)
        return found


@pytest.fixture
def cli_env(tmp_path: Path) -> Iterator[CliEnv]:
    env = dict(os.environ)
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "WALSTREAM_BROKER_PORT"):
        env.pop(name, None)
    home = tmp_path / "walstream-home"
    env["WALSTREAM_HOME"] = str(home)
    c = CliEnv(home, env)
    try:
        yield c
    finally:
        try:
            state = broker.read_state(home)
            if state is not None:
                c.ports.add(state.port)
        except Exception:
            pass
        try:
            broker.stop(home)
        finally:
            for pid in c.leftovers():
                procs.terminate(pid)
        assert c.leftovers() == [], "a broker started by the CLI survived the test"


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def test_cli_start_status_stop(cli_env: CliEnv) -> None:
    before = cli_env.run("broker", "status")
    assert before.returncode == 1, before
    assert "not running" in before.stdout

    port = cli_env.port()
    started = cli_env.run("broker", "start", "--port", str(port))
    assert started.returncode == 0, started.stderr
    assert _last_line(started.stdout) == f"127.0.0.1:{port}"
    state = broker.read_state(cli_env.home)
    assert state is not None and state.port == port and state.broker_alive()

    # Idempotent through the CLI too: same pid, same address.
    again = cli_env.run("broker", "start", "--port", str(port))
    assert again.returncode == 0, again.stderr
    assert _last_line(again.stdout) == f"127.0.0.1:{port}"
    assert broker.read_state(cli_env.home) == state

    status = cli_env.run("broker", "status")
    assert status.returncode == 0, status
    assert "running" in status.stdout and _last_line(status.stdout) == f"127.0.0.1:{port}"

    stopped = cli_env.run("broker", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not procs.pid_alive(state.pid)

    after = cli_env.run("broker", "status")
    assert after.returncode == 1, after

    again_stop = cli_env.run("broker", "stop")
    assert again_stop.returncode == 0, again_stop.stderr
    assert "nothing to stop" in again_stop.stdout


def test_cli_busy_port_exits_2_with_one_line(cli_env: CliEnv) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((broker.HOST, 0))
        s.listen(1)
        port = s.getsockname()[1]
        cli_env.ports.add(port)
        result = cli_env.run("broker", "start", "--port", str(port))
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("walstream: error:")
    assert str(port) in lines[0]
    assert "Traceback" not in result.stderr
    assert broker.read_state(cli_env.home) is None


def test_cli_external_cluster_starts_nothing(cli_env: CliEnv) -> None:
    env = dict(cli_env.env, KAFKA_BOOTSTRAP_SERVERS="1.2.3.4:9092")
    result = cli_env.run("broker", "start", env=env)
    assert result.returncode == 0, result.stderr
    assert _last_line(result.stdout) == "1.2.3.4:9092"
    assert broker.read_state(cli_env.home) is None
    assert not (cli_env.home / broker.STATE_FILE).exists()
