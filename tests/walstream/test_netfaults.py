"""walstream.testing.netfaults against real namespaces: a cut host hears nothing and its
open connection survives to carry data after the heal; a blocked pair cannot talk while
both reach a third host; netem delays a host's link (where the kernel has it); heal_all
undoes every fault, and the lab's close leaves none of them behind."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from walstream.testing.netfaults import NetFaults, netem_missing
from walstream.testing.netns import NetLab, leftovers, namespaces_available

pytestmark = pytest.mark.timeout(120)

#: A TCP server on port 7000 that answers each line with it, and a client's probe.
ECHO = ("import socket\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('0.0.0.0', 7000)); s.listen(16)\n"
        "while True:\n"
        "    c, _ = s.accept()\n"
        "    f = c.makefile('rwb')\n"
        "    for line in f:\n"
        "        f.write(line); f.flush()\n")
PROBE = ("import socket, sys, time\n"
         "t = time.monotonic()\n"
         "try:\n"
         "    c = socket.create_connection((sys.argv[1], 7000), timeout=float(sys.argv[2]))\n"
         "    c.sendall(b'x\\n'); c.recv(2)\n"
         "    print('ok', round(time.monotonic() - t, 3))\n"
         "except OSError as e:\n"
         "    print('fail', type(e).__name__)\n")


@pytest.fixture
def lab() -> Iterator[NetLab]:
    reason = namespaces_available()
    if reason is not None:
        pytest.skip(reason)
    made = NetLab(["server", "client", "third"])
    run_id = made.run_id
    try:
        for host in ("server", "third"):
            made.run(host, [sys.executable, "-c", ECHO], name="echo")
        time.sleep(0.5)
        yield made
    finally:
        made.close()
        assert leftovers(run_id) == []


def probe(lab: NetLab, src: str, dst: str, timeout_s: float = 2.0) -> str:
    out = lab.call(src, [sys.executable, "-c", PROBE, lab.hosts[dst].ip, str(timeout_s)],
                   timeout=timeout_s + 20)
    return out.stdout.strip() or out.stderr.strip()


def test_a_cut_host_hears_nothing_and_its_open_connection_carries_data_after_the_heal(
        lab: NetLab) -> None:
    faults = NetFaults(lab)
    assert probe(lab, "client", "server").startswith("ok")
    # A connection opened before the cut, used after the heal.
    holder = subprocess.Popen(
        lab.command("client", [sys.executable, "-c",
                               "import socket, sys, time\n"
                               "c = socket.create_connection((sys.argv[1], 7000), timeout=30)\n"
                               "print('open', flush=True)\n"
                               "sys.stdin.readline()\n"
                               "c.sendall(b'after\\n'); print(c.recv(6), flush=True)\n",
                               lab.hosts["server"].ip]),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "open"
        faults.cut("server")
        assert faults.active() == ["cut server"]
        assert probe(lab, "client", "server", 1.0) == "fail TimeoutError"
        assert probe(lab, "third", "server", 1.0) == "fail TimeoutError"
        assert probe(lab, "client", "third").startswith("ok")  # the rest is whole
        faults.heal("server")
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "b'after\\n'"
        assert probe(lab, "client", "server").startswith("ok")
    finally:
        holder.kill()
        holder.wait(10)


def test_a_blocked_pair_cannot_talk_while_both_reach_a_third_host(lab: NetLab) -> None:
    faults = NetFaults(lab)
    faults.block("client", "server")
    assert probe(lab, "client", "server", 1.0).startswith("fail")
    assert probe(lab, "client", "third").startswith("ok")
    assert probe(lab, "server", "third").startswith("ok")
    faults.unblock("client", "server")
    assert faults.active() == []
    assert probe(lab, "client", "server").startswith("ok")
    with pytest.raises(ValueError):
        faults.block("client", "client")


def test_netem_delays_a_link(lab: NetLab) -> None:
    missing = netem_missing()
    if missing is not None:
        print(f"netem test skipped: {missing}")
        pytest.skip(missing)
    faults = NetFaults(lab)
    fast = float(probe(lab, "client", "server").split()[1])
    faults.degrade("server", delay_ms=200, jitter_ms=0, loss_pct=0)
    slow = float(probe(lab, "client", "server", 5.0).split()[1])
    # The connect's SYN-ACK and the echo each leave the server once: two delays.
    assert slow >= 0.4 > fast, (fast, slow)
    faults.restore("server")
    assert faults.active() == []


def test_heal_all_undoes_every_fault(lab: NetLab) -> None:
    faults = NetFaults(lab)
    faults.cut("third")
    faults.block("client", "server")
    assert faults.active() == ["cut third", "block client-server"]
    faults.heal_all()
    assert faults.active() == []
    assert float(probe(lab, "client", "server").split()[1]) < 0.2
    assert probe(lab, "client", "third").startswith("ok")
