"""walstream.testing.netns: hosts in network namespaces, and that nothing of them stays.

Every test that builds a lab checks afterwards that no namespace, link, run
directory, mount or process of it is left: after close, after setup failing at
each step, and after the owning process was SIGKILLed (the next lab's
cleanup_leftovers removes that run and leaves live labs alone). They skip, printing
why, where network namespaces cannot be made.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from walstream import procs
from walstream.testing import wait_until
from walstream.testing.netns import (
    RUN_ROOT,
    NetLab,
    NetnsError,
    cleanup_leftovers,
    leftovers,
    link_names,
    namespaces_available,
    netns_names,
)

POLL_S = 0.05  # the pause between polls of a process or namespace


@pytest.fixture(scope="module")
def netns_ok() -> None:
    reason = namespaces_available()
    if reason is not None:
        print(f"network namespace tests skipped: {reason}")
        pytest.skip(reason)


@pytest.fixture
def lab_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """A directory to hide (with a file in it) and one to bind (with a file in it)."""
    secret, shared = tmp_path / "secret", tmp_path / "shared"
    secret.mkdir()
    shared.mkdir()
    (secret / "code.py").write_text("SECRET = 1\n")
    (shared / "tool").write_text("shared\n")
    return secret, shared


@pytest.fixture
def lab(netns_ok: None, lab_dirs: tuple[Path, Path]) -> Iterator[NetLab]:
    secret, shared = lab_dirs
    made = NetLab(["alpha", "beta"], hidden=["beta"], hide=[secret], binds={"kit": shared})
    try:
        yield made
    finally:
        made.close()
        assert leftovers(made.run_id) == []


def _gone(run_id: str) -> None:
    assert leftovers(run_id) == []
    assert not any(run_id in n for n in netns_names())
    assert not any(run_id in n for n in link_names())
    assert not (RUN_ROOT / run_id).exists()
    mounts = Path("/proc/self/mountinfo").read_text()
    assert f"/{run_id}/" not in mounts and not mounts.rstrip().endswith(f"/{run_id}")


@pytest.mark.parametrize("kwargs", [
    {"hosts": []},
    {"hosts": ["a", "a"]},
    {"hosts": ["Bad"]},
    {"hosts": ["logs"]},
    {"hosts": ["a"], "hidden": ["b"]},
    {"hosts": ["a"], "hide": [Path("/")]},
    {"hosts": ["a"], "hide": [Path("/tmp")]},
    {"hosts": ["a"], "binds": {"a": Path("/usr")}},
    {"hosts": ["a"], "binds": {"kit": Path("/no/such/dir")}},
])
def test_a_bad_layout_is_refused_before_anything_is_made(kwargs: dict[str, object]) -> None:
    hosts = kwargs.pop("hosts")
    with pytest.raises(ValueError):
        NetLab(hosts, **kwargs)  # type: ignore[arg-type]


def test_close_removes_every_namespace_link_directory_and_process(
        netns_ok: None, lab_dirs: tuple[Path, Path]) -> None:
    secret, shared = lab_dirs
    lab = NetLab(["alpha", "beta"], hidden=["beta"], hide=[secret], binds={"kit": shared})
    run_id = lab.run_id
    assert len(leftovers(run_id)) == 2 + 2 + 1 + 1  # namespaces, veths, bridge, run dir
    started = [lab.run(h, ["sh", "-c", "sleep 300 & exec sleep 301"]) for h in lab.hosts]
    wait_until(lambda: all(len(lab.pids(h)) == 2 for h in lab.hosts), 10,
               "both sleeps on each host", poll_s=POLL_S)
    pids = [p for h in lab.hosts for p in lab.pids(h)]
    lab.close()
    lab.close()  # idempotent
    _gone(run_id)
    assert [p for p in pids if procs.pid_alive(p)] == []
    assert all(p.poll() is not None for p in started)
    with pytest.raises(NetnsError):
        lab.run("alpha", ["true"])


@pytest.mark.parametrize("step", ["run directory", "bridge", "host alpha", "host beta"])
def test_setup_failing_midway_removes_what_it_made(netns_ok: None, step: str) -> None:
    seen: list[str] = []

    def fail(lab: NetLab, at: str) -> None:
        seen.append(lab.run_id)
        if at == step:
            raise RuntimeError(f"injected at {at}")

    with pytest.raises(RuntimeError, match=f"injected at {step}"):
        NetLab(["alpha", "beta"], on_step=fail)
    assert seen
    _gone(seen[-1])


_CRASHING_OWNER = """
import sys, time
from walstream.testing.netns import NetLab
lab = NetLab(["alpha", "beta"], hidden=["beta"])
lab.run("alpha", ["sh", "-c", "trap '' TERM; exec sleep 300"])  # survives its parent's death
lab.run("beta", ["sleep", "300"])
print(lab.run_id, flush=True)
time.sleep(300)
"""


def test_leftovers_of_a_killed_owner_are_removed_and_live_labs_kept(lab: NetLab) -> None:
    owner = subprocess.Popen([sys.executable, "-c", _CRASHING_OWNER], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        assert owner.stdout is not None
        dead_id = owner.stdout.readline().strip()
        assert dead_id, "the owner made no lab"
        survivor: list[int] = []

        def started() -> bool:
            # Only once it runs sleep: the shell before its exec has "sleep" in its
            # command line too, but may not have ignored SIGTERM yet, and the
            # SIGTERM its owner's death sends would then end it.
            survivor[:] = [p for p in _netns_pids(f"wsmh-{dead_id}-alpha")
                           if procs.cmdline(p).startswith("sleep ")]
            return bool(survivor)

        wait_until(started, 10, "the owner's process on alpha", poll_s=POLL_S)
    finally:
        os.killpg(owner.pid, signal.SIGKILL)
        owner.wait()
    assert len(leftovers(dead_id)) == 6
    assert procs.pid_alive(survivor[0]), "SIGTERM-proof process died with its owner"
    live = leftovers(lab.run_id)

    removed = cleanup_leftovers()

    assert f"netns wsmh-{dead_id}-alpha" in removed
    _gone(dead_id)
    assert not procs.pid_alive(survivor[0])
    assert leftovers(lab.run_id) == live
    assert lab.call("alpha", ["true"]).returncode == 0


def _netns_pids(name: str) -> list[int]:
    res = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
    return [int(p) for p in res.stdout.split()]


def test_a_hidden_host_sees_the_binds_but_not_the_hidden_paths(
        lab: NetLab, lab_dirs: tuple[Path, Path]) -> None:
    secret, _ = lab_dirs
    kit = lab.bind_path("kit")
    look = (f"ls -A {secret} | wc -l; cat {kit}/tool; "
            f"touch {kit}/new 2>/dev/null || echo read-only; "
            f"touch {secret}/new 2>/dev/null || echo read-only")
    assert lab.call("beta", ["sh", "-c", look]).stdout.split() == [
        "0", "shared", "read-only", "read-only"]
    # alpha is not hidden: it sees the secret (and may write there); both see the bind.
    seen = lab.call("alpha", ["sh", "-c", look]).stdout.split()
    assert seen[:3] == ["1", "shared", "read-only"]
    assert (secret / "new").exists()
    # Nothing of it is mounted in this (the root) mount namespace.
    assert str(lab.run_dir) not in Path("/proc/self/mountinfo").read_text()


def test_hosts_reach_each_other_and_nothing_else(lab: NetLab) -> None:
    alpha, beta = lab.hosts["alpha"], lab.hosts["beta"]
    assert (alpha.ip, beta.ip) == ("198.18.0.10", "198.18.0.11")
    server = lab.run("beta", ["/usr/bin/python3", "-c",
                              "import socket\n"
                              f"s = socket.create_server(('{beta.ip}', 5000))\n"
                              "c, _ = s.accept()\n"
                              "c.sendall(b'from-beta')\n"])
    got: list[str] = []

    def fetched() -> bool:
        res = lab.call("alpha", ["bash", "-c", f"exec 3<>/dev/tcp/{beta.ip}/5000; cat <&3"])
        got.append(res.stdout)
        return res.returncode == 0

    wait_until(fetched, 10, "alpha to read from beta's server", poll_s=POLL_S)
    assert got[-1] == "from-beta"
    server.wait(timeout=10)
    for addr in ("192.0.2.1", "198.18.1.1"):
        res = lab.call("alpha", ["ip", "route", "get", addr])
        assert res.returncode != 0 and "unreachable" in res.stderr


def test_kill_host_kills_every_process_of_that_host_only(lab: NetLab) -> None:
    lab.run("alpha", ["sh", "-c", "setsid sleep 300 & sleep 301 & exec sleep 302"])
    other = lab.run("beta", ["sleep", "300"])
    wait_until(lambda: len(lab.pids("alpha")) == 3 and lab.pids("beta"), 10,
               "the sleeps to start", poll_s=POLL_S)
    before = lab.pids("alpha")
    killed = lab.kill_host("alpha")
    assert set(before) <= set(killed)
    assert lab.pids("alpha") == []
    assert other.poll() is None
    assert lab.call("alpha", ["echo", "back"]).stdout.strip() == "back"
