"""Several hosts on one machine: one Linux network namespace per host on a private bridge.

A :class:`NetLab` builds, as root:

* one bridge with no address and no route anywhere (no default route, no NAT,
  IPv6 off), so the hosts reach each other and nothing else: not the machine's
  own addresses, not the outside;
* per host, a network namespace with a veth pair on the bridge, an address from
  the benchmarking range 198.18.0.0/24 (``.10`` upwards, in the order given)
  and its loopback up (inside a namespace 127.0.0.1 is that host's own);
* per process, a private mount namespace (``unshare --mount``) in which the
  lab's binds are mounted read-only (``binds={"spark-home": pyspark_dir}`` shows
  ``pyspark_dir`` at ``lab.bind_path("spark-home")`` on every host, as Spark
  installed on each host of a real cluster) and, on a *hidden* host, the
  repository and the driver's virtualenv are covered by an empty read-only
  directory, so Python code there can only come from what is shipped to it.

Everything a lab makes carries its run id in its name: namespaces
``wsmh-<id>-<host>``, links ``wsmh<id>...``, files under
``/tmp/walstream-mh/<id>/`` (which records the owning process). :meth:`NetLab.close`
kills every process of every host (``ip netns pids``), deletes the links and
namespaces and the run directory, and raises if anything stayed;
:func:`cleanup_leftovers` (run by every new lab) removes what a run whose owner
died left behind, and leaves live runs of other processes alone.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from walstream import procs

PREFIX = "wsmh"
SUBNET = ipaddress.ip_network("198.18.0.0/24")
FIRST_HOST = 10  # host i gets SUBNET's address FIRST_HOST + i
RUN_ROOT = Path("/tmp/walstream-mh")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_ID_LEN = 4  # hex digits; links are named wsmh<id><kind><nn> (at most 15 characters)
_HOST_NAME = re.compile(r"^[a-z][a-z0-9]{0,15}$")
_BIND_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_RESERVED = frozenset({"empty", "logs", "owner"})
_SETUP_GRACE_S = 60.0  # a run directory without an owner file this young is being set up


class NetnsError(RuntimeError):
    """A lab could not be built, or something it made could not be removed."""


def log(msg: str) -> None:
    print(f"[netns {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Host:
    """One host of a lab: its name, address, network namespace and whether it is hidden."""

    name: str
    ip: str
    netns: str
    hidden: bool
    index: int


def _ip(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30,
                         stdin=subprocess.DEVNULL)
    if check and res.returncode != 0:
        raise NetnsError(f"ip {' '.join(argv)} failed ({res.returncode}): "
                         f"{res.stderr.strip() or res.stdout.strip()}")
    return res


def _write_sysctl(path: str, value: str, netns: str | None = None) -> None:
    """Write a /proc/sys file, inside ``netns`` when given (net sysctls are per namespace)."""
    if netns is None:
        Path(path).write_text(value)
        return
    _ip(["netns", "exec", netns, "sh", "-c", f"echo {value} > {shlex.quote(path)}"])


def netns_names() -> list[str]:
    """Every named network namespace (``ip netns list``)."""
    out = _ip(["netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def link_names() -> list[str]:
    """Every network interface of this (the root) namespace."""
    out = _ip(["-o", "link", "show"], check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def netns_pids(netns: str) -> list[int]:
    """The processes whose network namespace is ``netns`` (``ip netns pids``)."""
    res = _ip(["netns", "pids", netns], check=False)
    return [int(p) for p in res.stdout.split() if p.isdigit()]


def _run_id_of_netns(name: str) -> str | None:
    m = re.match(rf"^{PREFIX}-([0-9a-f]{{{_ID_LEN}}})-", name)
    return m.group(1) if m else None


def _run_id_of_link(name: str) -> str | None:
    m = re.match(rf"^{PREFIX}([0-9a-f]{{{_ID_LEN}}})", name)
    return m.group(1) if m else None


def _start_time(pid: int) -> str:
    """The kernel's start time of ``pid`` ("" when gone): a pid plus it names one process."""
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    return ""


def _owner_alive(run_id: str) -> bool:
    try:
        owner = json.loads((RUN_ROOT / run_id / "owner").read_text())
        pid, start = int(owner["pid"]), str(owner["start"])
    except (OSError, ValueError, KeyError, TypeError):
        # A lab writes its owner right after making its directory, before anything
        # else: a directory without one is either being set up or abandoned.
        with contextlib.suppress(OSError):
            return time.time() - (RUN_ROOT / run_id).stat().st_mtime < _SETUP_GRACE_S
        return False
    return procs.pid_alive(pid) and _start_time(pid) == start


def leftovers(run_id: str | None = None) -> list[str]:
    """Namespaces, links and run directories of labs (of ``run_id`` when given) that exist."""
    found = [f"netns {n}" for n in netns_names()
             if _run_id_of_netns(n) is not None and run_id in (None, _run_id_of_netns(n))]
    found += [f"link {n}" for n in link_names()
              if _run_id_of_link(n) is not None and run_id in (None, _run_id_of_link(n))]
    if RUN_ROOT.is_dir():
        found += [f"dir {d}" for d in sorted(RUN_ROOT.iterdir())
                  if run_id in (None, d.name)]
    return found


def _mounts_under(path: Path) -> list[str]:
    """Mount points of this process's mount namespace at or below ``path``."""
    points = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point == str(path) or point.startswith(str(path) + "/"):
                points.append(point)
    return points


def _kill_pids(pids_of: Callable[[], list[int]], timeout_s: float) -> list[int]:
    """SIGKILL whatever ``pids_of`` lists until it lists nothing; return every pid killed."""
    killed: list[int] = []
    deadline = time.monotonic() + timeout_s
    while True:
        pids = [p for p in pids_of() if p != os.getpid()]
        live = [p for p in pids if procs.pid_alive(p)]
        if not live:
            return killed
        for pid in live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            if pid not in killed:
                killed.append(pid)
        if time.monotonic() > deadline:
            raise NetnsError(f"processes {live} survived SIGKILL for {timeout_s:g}s")
        time.sleep(0.05)


def _remove_run(run_id: str, netns: Iterable[str], links: Iterable[str]) -> list[str]:
    """Kill, unlink and delete everything of ``run_id``; return what could not be removed."""
    errors: list[str] = []
    netns = list(netns)
    for ns in netns:
        try:
            _kill_pids(functools.partial(netns_pids, ns), 15.0)
        except NetnsError as exc:
            errors.append(f"netns {ns}: {exc}")
    for link in links:  # deleting one end of a veth pair deletes both
        res = _ip(["link", "del", link], check=False)
        if res.returncode != 0 and link in link_names():
            errors.append(f"link {link}: {res.stderr.strip()}")
    for ns in netns:
        res = _ip(["netns", "del", ns], check=False)
        if res.returncode != 0 and ns in netns_names():
            errors.append(f"netns {ns}: {res.stderr.strip()}")
    # A deleted namespace is torn down by the kernel a moment later, with its veth ends.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
            not d.startswith("dir ") for d in leftovers(run_id)):
        time.sleep(0.05)
    run_dir = RUN_ROOT / run_id
    mounts = _mounts_under(run_dir)
    for point in sorted(mounts, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    if _mounts_under(run_dir):
        # Never delete through a mount: it could be a bind of the repository.
        errors.append(f"mounts under {run_dir} stay: {_mounts_under(run_dir)}")
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            RUN_ROOT.rmdir()  # only when no other lab uses it
    errors += [f"left: {d}" for d in leftovers(run_id)]
    return errors


def cleanup_leftovers() -> list[str]:
    """Remove what labs whose owning process is gone left behind; return what was removed.

    Labs of live processes (another test run on the same machine) are left alone.
    """
    netns_by_run: dict[str, list[str]] = {}
    links_by_run: dict[str, list[str]] = {}
    for n in netns_names():
        if (rid := _run_id_of_netns(n)) is not None:
            netns_by_run.setdefault(rid, []).append(n)
    for n in link_names():
        if (rid := _run_id_of_link(n)) is not None:
            links_by_run.setdefault(rid, []).append(n)
    runs = set(netns_by_run) | set(links_by_run)
    if RUN_ROOT.is_dir():
        runs |= {d.name for d in RUN_ROOT.iterdir()
                 if re.fullmatch(rf"[0-9a-f]{{{_ID_LEN}}}", d.name)}
    removed: list[str] = []
    for rid in sorted(runs):
        if _owner_alive(rid):
            continue
        found = leftovers(rid)
        errors = _remove_run(rid, netns_by_run.get(rid, []), links_by_run.get(rid, []))
        if errors:
            raise NetnsError(f"could not remove the leftovers of run {rid}: {errors}")
        removed += found
    if removed:
        log(f"removed leftovers of crashed runs: {removed}")
    return removed


def repository_root() -> Path | None:
    """The checkout this module runs from (None when installed as a plain package)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else None


def default_hidden_paths() -> tuple[Path, ...]:
    """What a hidden host must not see: the repository and the running virtualenv."""
    paths: list[Path] = []
    if (root := repository_root()) is not None:
        paths.append(root)
    prefix = Path(sys.prefix).resolve()
    if sys.prefix != sys.base_prefix and not any(prefix.is_relative_to(p) for p in paths):
        paths.append(prefix)  # a virtualenv outside the checkout
    return tuple(paths)


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a lab process: system PATH, no virtualenv, no Spark or Kafka settings."""
    env = {"PATH": SYSTEM_PATH, "HOME": os.environ.get("HOME", "/root"),
           "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    env.update(extra or {})
    return env


@functools.cache
def namespaces_available() -> str | None:
    """``None`` when labs can be built here, else the reason why not.

    Builds and closes a one-host lab with a hidden path and a bind, so a yes
    covers every operation a lab does.
    """
    if os.name != "posix" or not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "network namespaces need root (run the tests as root)"
    for tool in ("ip", "unshare", "mount", "umount", "sh"):
        if shutil.which(tool, path=SYSTEM_PATH) is None:
            return f"{tool} is not installed (iproute2 / util-linux)"
    try:
        probe_src = Path(__file__).resolve().parent
        with NetLab(["probe"], hidden=["probe"], hide=[probe_src.parent],
                    binds={"src": probe_src}) as lab:
            seen = lab.bind_path("src") / Path(__file__).name
            out = lab.call("probe", ["sh", "-c",
                                     f"ls -A {shlex.quote(str(probe_src.parent))} | wc -l; "
                                     f"test -f {shlex.quote(str(seen))} && echo bound; "
                                     "ip -o -4 addr show dev eth0"], timeout=30)
            lines = out.stdout.split()
            if out.returncode != 0 or lines[:2] != ["0", "bound"] \
                    or f"{lab.hosts['probe'].ip}/{SUBNET.prefixlen}" not in lines:
                return ("a namespace was made but its mounts or address are wrong: "
                        f"{out.stdout.strip()} {out.stderr.strip()}")
    except (NetnsError, OSError, subprocess.SubprocessError) as exc:
        return f"cannot build network namespaces here: {exc}"
    return None


class NetLab:
    """Hosts in network namespaces on one private bridge; see the module's docstring.

    ``hosts`` names the hosts (lowercase letters and digits), in address order.
    ``hidden`` names the hosts that must not see ``hide`` (by default the
    repository and the virtualenv running this code). ``binds`` maps a name to
    a directory shown read-only at :meth:`bind_path` on every host.
    ``on_step(lab, step)`` is called after each setup step (tests use it to fail
    setup midway). Setup that fails removes everything it made before raising.
    """

    def __init__(self, hosts: Sequence[str], *, hidden: Iterable[str] = (),
                 hide: Iterable[Path] | None = None,
                 binds: Mapping[str, Path] | None = None,
                 on_step: Callable[[NetLab, str], None] | None = None) -> None:
        self.hosts: dict[str, Host] = {}
        self._procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self._closed = False
        names = list(hosts)
        hidden = set(hidden)
        self.run_id = ""
        self.run_dir = RUN_ROOT
        if not names or len(set(names)) != len(names):
            raise ValueError(f"host names must be given and unique: {names}")
        if len(names) > 90:
            raise ValueError("at most 90 hosts fit the lab's addresses")
        for n in names:
            if not _HOST_NAME.match(n) or n in _RESERVED:
                raise ValueError(f"host name {n!r}: lowercase letters and digits, "
                                 f"at most 16, not {sorted(_RESERVED)}")
        if not hidden <= set(names):
            raise ValueError(f"hidden hosts {sorted(hidden - set(names))} are not hosts")
        self.binds = {k: Path(v).resolve() for k, v in (binds or {}).items()}
        for k, src in self.binds.items():
            if not _BIND_NAME.match(k) or k in _RESERVED or k in names:
                raise ValueError(f"bind name {k!r}: lowercase, not a host or {sorted(_RESERVED)}")
            if not src.is_dir():
                raise ValueError(f"bind {k!r}: {src} is not a directory")
        self.hide = tuple(Path(p).resolve() for p in
                          (default_hidden_paths() if hide is None else hide))
        for p in self.hide:
            if p == Path("/") or RUN_ROOT.resolve().is_relative_to(p) or not p.is_dir():
                raise ValueError(f"cannot hide {p}: not a directory, or it holds the lab")
        self._on_step = on_step
        self.bridge = ""
        self._veths: list[str] = []
        try:
            self._setup(names, hidden)
        except BaseException:
            self.close(raise_errors=False)
            raise

    # -- setup -------------------------------------------------------------------------

    def _step(self, name: str) -> None:
        if self._on_step is not None:
            self._on_step(self, name)

    def _setup(self, names: list[str], hidden: set[str]) -> None:
        cleanup_leftovers()
        while True:
            rid = secrets.token_hex(_ID_LEN // 2)
            try:
                RUN_ROOT.mkdir(mode=0o755, parents=True, exist_ok=True)
                (RUN_ROOT / rid).mkdir(mode=0o755)
                break
            except (FileExistsError, FileNotFoundError):
                continue  # id taken, or RUN_ROOT just removed by another lab's close
        self.run_id, self.run_dir = rid, RUN_ROOT / rid
        (self.run_dir / "owner").write_text(json.dumps(
            {"pid": os.getpid(), "start": _start_time(os.getpid())}))
        for d in ("empty", "logs", *self.binds):
            (self.run_dir / d).mkdir()
        (self.run_dir / "empty").chmod(0o555)
        self._step("run directory")
        self.bridge = f"{PREFIX}{rid}br"
        _ip(["link", "add", "name", self.bridge, "type", "bridge"])
        _write_sysctl(f"/proc/sys/net/ipv6/conf/{self.bridge}/disable_ipv6", "1")
        _ip(["link", "set", self.bridge, "up"])
        self._step("bridge")
        for i, name in enumerate(names):
            ip = str(SUBNET.network_address + FIRST_HOST + i)
            host = Host(name=name, ip=ip, netns=f"{PREFIX}-{rid}-{name}",
                        hidden=name in hidden, index=i)
            self.hosts[name] = host
            for d in ("work", "tmp"):
                (self.run_dir / name / d).mkdir(parents=True)
            _ip(["netns", "add", host.netns])
            for conf in ("all", "default"):
                _write_sysctl(f"/proc/sys/net/ipv6/conf/{conf}/disable_ipv6", "1", host.netns)
            outer, inner = f"{PREFIX}{rid}v{i:02d}", f"{PREFIX}{rid}p{i:02d}"
            _ip(["link", "add", outer, "type", "veth", "peer", "name", inner,
                 "netns", host.netns])
            self._veths.append(outer)
            _write_sysctl(f"/proc/sys/net/ipv6/conf/{outer}/disable_ipv6", "1")
            _ip(["link", "set", outer, "master", self.bridge, "up"])
            _ip(["-n", host.netns, "link", "set", inner, "name", "eth0"])
            _ip(["-n", host.netns, "addr", "add", f"{ip}/{SUBNET.prefixlen}", "dev", "eth0"])
            _ip(["-n", host.netns, "link", "set", "lo", "up"])
            _ip(["-n", host.netns, "link", "set", "eth0", "up"])
            self._step(f"host {name}")
        log(f"lab {rid}: bridge {self.bridge}, hosts "
            + ", ".join(f"{h.name}={h.ip}{' (hidden)' if h.hidden else ''}"
                        for h in self.hosts.values()))

    # -- processes ---------------------------------------------------------------------

    def bind_path(self, name: str) -> Path:
        """Where bind ``name`` shows on every host of the lab."""
        if name not in self.binds:
            raise KeyError(f"no bind {name!r}; binds: {sorted(self.binds)}")
        return self.run_dir / name

    def host_dir(self, host: str) -> Path:
        """A directory of ``host``'s own (``work/`` and ``tmp/`` in it), removed by close."""
        return self.run_dir / self._host(host).name

    def _host(self, host: str) -> Host:
        if self._closed:
            raise NetnsError(f"lab {self.run_id} is closed")
        try:
            return self.hosts[host]
        except KeyError:
            raise KeyError(f"no host {host!r}; hosts: {sorted(self.hosts)}") from None

    def command(self, host: str, argv: Sequence[str], cwd: Path | None = None) -> list[str]:
        """The command line that runs ``argv`` on ``host``: its network namespace,
        a private mount namespace with the binds, the hidden paths covered, ``cwd``."""
        h = self._host(host)
        mounts = [f"mount --bind -o ro {shlex.quote(str(src))} "
                  f"{shlex.quote(str(self.run_dir / name))}" for name, src in self.binds.items()]
        if h.hidden:
            empty = shlex.quote(str(self.run_dir / "empty"))
            mounts += [f"mount --bind -o ro {empty} {shlex.quote(str(p))}" for p in self.hide]
        where = shlex.quote(str(cwd or self.run_dir / h.name))
        script = " && ".join([*mounts, f"cd {where}", 'exec "$@"'])
        return ["ip", "netns", "exec", h.netns, "unshare", "--mount", "--propagation",
                "private", "--", "sh", "-c", script, f"{PREFIX}-{h.name}", *argv]

    def run(self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None, *,
            cwd: Path | None = None, name: str | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` on ``host``; its output goes to :meth:`log_path`.

        The environment is :func:`base_env` with ``env`` over it, plus
        ``TMPDIR`` in the host's own directory. The process is in its own
        session and gets SIGTERM if this (the calling thread's) process dies.
        """
        h = self._host(host)
        label = name or Path(argv[0]).name
        log_path = self.run_dir / "logs" / f"{h.name}-{len(self._procs):02d}-{label}.log"
        full_env = base_env({"TMPDIR": str(self.run_dir / h.name / "tmp"), **(env or {})})
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(self.command(host, argv, cwd), env=full_env,
                                    stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, cwd=self.run_dir,
                                    start_new_session=True, preexec_fn=procs.die_with_parent)
        self._procs.append((h.name, proc, log_path))
        return proc

    def log_path(self, proc: subprocess.Popen[bytes]) -> Path:
        """The file that holds ``proc``'s output (only while the lab is open)."""
        for _, p, path in self._procs:
            if p is proc:
                return path
        raise KeyError(f"{proc.args!r} was not started by this lab")

    def log_tail(self, proc: subprocess.Popen[bytes], lines: int = 30) -> str:
        with contextlib.suppress(OSError, KeyError):
            text = self.log_path(proc).read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def call(self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None, *,
             timeout: float = 60.0, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on ``host`` to its end; output captured as text, not checked."""
        h = self._host(host)
        full_env = base_env({"TMPDIR": str(self.run_dir / h.name / "tmp"), **(env or {})})
        return subprocess.run(self.command(host, argv, cwd), env=full_env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              cwd=self.run_dir, start_new_session=True)

    def pids(self, host: str) -> list[int]:
        """Every live process on ``host`` (its network namespace)."""
        return [p for p in netns_pids(self._host(host).netns) if procs.pid_alive(p)]

    def kill_host(self, host: str, timeout_s: float = 15.0) -> list[int]:
        """SIGKILL every process of ``host``, as a power cut would; return their pids.

        The host's network stays: another process may start on it afterwards.
        """
        h = self._host(host)
        killed = _kill_pids(functools.partial(netns_pids, h.netns), timeout_s)
        for name, proc, _ in self._procs:
            if name == h.name:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)  # reap what this process started
        return killed

    # -- teardown ----------------------------------------------------------------------

    def close(self, raise_errors: bool = True) -> None:
        """Kill every process, delete every link and namespace and the run directory.

        Idempotent. Raises :class:`NetnsError` naming what stayed (unless
        ``raise_errors`` is false: setup failing already raises its own error).
        """
        if self._closed:
            return
        self._closed = True
        if not self.run_id:
            return
        errors = _remove_run(self.run_id, [h.netns for h in self.hosts.values()],
                             [*self._veths, *([self.bridge] if self.bridge else [])])
        for _, proc, _ in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        if errors:
            log(f"lab {self.run_id}: cleanup left {errors}")
            if raise_errors:
                raise NetnsError(f"lab {self.run_id}: cleanup left {errors}")
        else:
            log(f"lab {self.run_id}: removed")

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(raise_errors=exc[0] is None)
