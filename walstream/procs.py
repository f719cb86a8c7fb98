"""Small helpers for the processes this project starts and must stop (no orphans)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """True when ``pid`` names a live (not zombie) process."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        # Field 3 is the state; a zombie has exited and only waits to be reaped.
        if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def terminate(pid: int, grace_s: float = 5.0) -> None:
    """SIGTERM the process group led by ``pid``, SIGKILL it after ``grace_s``; wait for exit."""
    if not pid_alive(pid):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 10.0)
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
            if not pid_alive(pid):
                return
            time.sleep(0.05)


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port`` and we may bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_port(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            if s.connect_ex((host, port)) == 0:
                return True
        time.sleep(0.05)
    return False


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGTERM when its parent dies (Linux prctl).

    For processes a test or a one-shot command owns: even a SIGKILLed pytest
    leaves no broker behind. Detached brokers (``walstream broker start``) do not
    use it: they must outlive the app that started them.
    """
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def kill_group(pid: int, grace_s: float = 20.0) -> bool:
    """SIGKILL the process group led by ``pid`` and wait until all of it is gone.

    For chaos: the driver, its JVM and its Python workers die at once. Returns
    whether the group is gone.
    """
    with contextlib.suppress(ProcessLookupError, ChildProcessError, OSError):
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False
