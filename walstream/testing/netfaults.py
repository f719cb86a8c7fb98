"""Network faults between the hosts of a :class:`~walstream.testing.netns.NetLab`.

Each fault is one iproute2 or tc change that a heal undoes exactly:

* :meth:`NetFaults.cut` takes a host off the network: its veth end on the bridge
  goes down, so every packet to or from it is dropped, as a pulled cable or a
  dead switch port would. Its processes keep running and its TCP connections stay
  open (no reset reaches them); they simply hear nothing until :meth:`heal`.
* :meth:`NetFaults.block` cuts two hosts off from each other only: a blackhole
  route to the other's address in each namespace (a packet between them is
  dropped at its sender, in both directions), while both still reach every other
  host. :meth:`unblock` removes the two routes.
* :meth:`NetFaults.degrade` adds delay, jitter and loss to a host's link
  (``tc netem`` on its ``eth0``; both directions of its traffic pass it on the way
  out of one end or the other, so the delay is paid once per direction by that
  host's own sends); :meth:`restore` removes the qdisc.

Everything a fault changes lives inside the lab's namespaces and links, so the
lab's close removes it with them; :meth:`NetFaults.heal_all` undoes every fault
still in place earlier, for a test that goes on with a healthy network.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from walstream.testing.netns import PREFIX, NetLab, NetnsError


def netem_missing() -> str | None:
    """Why ``tc netem`` cannot be used here (None when it can): some kernels are built
    without ``sch_netem`` and load no modules (``Specified qdisc kind is unknown``)."""
    probe = NetLab(["netem"])
    try:
        res = subprocess.run(["tc", "-n", probe.hosts["netem"].netns, "qdisc", "add", "dev",
                              "eth0", "root", "netem", "delay", "1ms"],
                             capture_output=True, text=True, timeout=30)
    finally:
        probe.close()
    if res.returncode != 0:
        return f"tc netem is not available here: {res.stderr.strip() or res.stdout.strip()}"
    return None


def _run(argv: Sequence[str]) -> None:
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {res.stderr.strip() or res.stdout.strip()}")


class NetFaults:
    """Faults on ``lab``'s hosts, each undone by its heal (see the module docstring)."""

    def __init__(self, lab: NetLab) -> None:
        self.lab = lab
        self._cut: set[str] = set()
        self._blocked: set[frozenset[str]] = set()
        self._degraded: set[str] = set()

    def _veth(self, host: str) -> str:
        h = self.lab.hosts[host]
        return f"{PREFIX}{self.lab.run_id}v{h.index:02d}"

    def _ns(self, host: str) -> str:
        return self.lab.hosts[host].netns

    # -- a host off the network ----------------------------------------------------------

    def cut(self, host: str) -> None:
        _run(["ip", "link", "set", self._veth(host), "down"])
        self._cut.add(host)

    def heal(self, host: str) -> None:
        _run(["ip", "link", "set", self._veth(host), "up"])
        self._cut.discard(host)

    # -- two hosts apart -----------------------------------------------------------------

    def _routes(self, a: str, b: str, verb: str) -> None:
        for src, dst in ((a, b), (b, a)):
            _run(["ip", "-n", self._ns(src), "route", verb, "blackhole",
                  f"{self.lab.hosts[dst].ip}/32"])

    def block(self, a: str, b: str) -> None:
        if a == b:
            raise ValueError(f"cannot block {a} from itself")
        self._routes(a, b, "add")
        self._blocked.add(frozenset((a, b)))

    def unblock(self, a: str, b: str) -> None:
        self._routes(a, b, "del")
        self._blocked.discard(frozenset((a, b)))

    # -- a slow, lossy link --------------------------------------------------------------

    def degrade(self, host: str, delay_ms: int = 200, jitter_ms: int = 50,
                loss_pct: float = 5.0) -> None:
        if host in self._degraded:
            raise ValueError(f"{host}'s link is degraded already")
        _run(["tc", "-n", self._ns(host), "qdisc", "add", "dev", "eth0", "root", "netem",
              "delay", f"{delay_ms}ms", f"{jitter_ms}ms", "loss", f"{loss_pct}%"])
        self._degraded.add(host)

    def restore(self, host: str) -> None:
        _run(["tc", "-n", self._ns(host), "qdisc", "del", "dev", "eth0", "root"])
        self._degraded.discard(host)

    # -- all of them ---------------------------------------------------------------------

    def active(self) -> list[str]:
        """The faults in place, described (empty when the network is whole)."""
        return ([f"cut {h}" for h in sorted(self._cut)]
                + [f"block {'-'.join(sorted(p))}" for p in sorted(self._blocked, key=sorted)]
                + [f"degrade {h}" for h in sorted(self._degraded)])

    def heal_all(self) -> None:
        for h in sorted(self._cut):
            self.heal(h)
        for pair in list(self._blocked):
            a, b = sorted(pair)
            self.unblock(a, b)
        for h in sorted(self._degraded):
            self.restore(h)
