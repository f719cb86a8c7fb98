"""A Kafka broker and a Spark standalone cluster on separate hosts (network namespaces).

:class:`MultiHostCluster` builds a :class:`~walstream.testing.netns.NetLab` with the
hosts ``broker``, ``master``, ``worker1`` .. ``workerN`` and ``driver`` and starts:

* on ``broker``: the embedded Tansu broker, listening on and advertising the
  host's own address (``broker_bootstrap``), memory storage;
* on ``master``: a Spark standalone master (``spark_master_url``);
* ``drivers`` (``driver`` by default; two for a driver and its hot standby) see the
  repository and submit;
* on each worker: a Spark standalone worker with ``worker_cores`` cores (1 by
  default), registered at the master; :meth:`start_worker` starts it again
  after :meth:`kill_host` (a host back from a power cut).

Master and workers are hidden hosts: they see neither the repository nor the
virtualenv, only Spark itself at ``spark_home`` (pyspark's folder, bound
read-only at the same path on every host) and the installed Java and Pythons
(the interpreter the driver's virtualenv was made from among them, as on hosts
where the same Python is installed), so an executor runs only Python code
shipped to it (``--archives``). ``broker`` and
``driver`` see the repository; the driver submits with :meth:`spark_submit`.
:meth:`close` (also on a failed start) kills every process of every host and
removes the network, as :class:`NetLab` does.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from walstream.testing.netns import Host, NetLab, log
from walstream.testing.waiting import wait_until

BROKER_PORT = 9092
MASTER_PORT = 7077
MASTER_UI_PORT = 8080
WORKER_UI_PORT = 8081
POLL_S = 0.3  # the pause between probes of a starting service

_ALIVE_WORKERS = (
    "import json, sys, urllib.request\n"
    "try:\n"
    "    with urllib.request.urlopen(sys.argv[1], timeout=3) as r:\n"
    "        print(int(json.load(r).get('aliveworkers', 0)))\n"
    "except (OSError, ValueError):\n"
    "    print(0)\n"
)
_KAFKA_READY = (
    "import sys\n"
    "from walstream.broker import kafka_ready\n"
    "sys.exit(0 if kafka_ready(sys.argv[1], float(sys.argv[2])) else 1)\n"
)


def _exited(procs: Mapping[str, subprocess.Popen[bytes]]) -> Callable[[], str | None]:
    """An ``abort`` for :func:`wait_until`: the reason once one of ``procs`` has exited."""
    def reason() -> str | None:
        for name, p in procs.items():
            if p.poll() is not None:
                return f"the {name} process exited with {p.returncode}"
        return None
    return reason


class MultiHostCluster:
    """Broker, Spark master, ``workers`` workers and a driver host; see the module.

    ``on_step(lab, step)`` is called after each setup step, the network's and the
    cluster's (``"broker"``, ``"spark master"``, ``"spark workers"``, ``"ready"``).
    """

    def __init__(self, workers: int = 2, *, worker_cores: int = 1, worker_memory: str = "1g",
                 daemon_memory: str = "256m", start_timeout_s: float = 120.0,
                 on_step: Callable[[NetLab, str], None] | None = None,
                 drivers: Sequence[str] = ("driver",)) -> None:
        import pyspark

        if workers < 1 or worker_cores < 1:
            raise ValueError("a cluster needs a worker, and a worker a core")
        self._pyspark_dir = Path(pyspark.__file__).resolve().parent
        self.worker_names = [f"worker{i + 1}" for i in range(workers)]
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self._on_step = on_step
        self.started_s = 0.0
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.driver_names = list(drivers)
        started = time.monotonic()
        self.lab = NetLab(["broker", "master", *self.worker_names, *self.driver_names],
                          hidden=["master", *self.worker_names],
                          binds={"spark-home": self._pyspark_dir}, on_step=on_step)
        try:
            self._start(start_timeout_s)
        except BaseException:
            self.lab.close(raise_errors=False)
            raise
        self.started_s = time.monotonic() - started
        log(f"cluster up in {self.started_s:.1f}s: master {self.spark_master_url}, "
            f"broker {self.broker_bootstrap}, workers {self.worker_names}")

    # -- addresses ---------------------------------------------------------------------

    @property
    def hosts(self) -> dict[str, Host]:
        return self.lab.hosts

    def ip(self, host: str) -> str:
        return self.lab.hosts[host].ip

    @property
    def spark_master_url(self) -> str:
        return f"spark://{self.ip('master')}:{MASTER_PORT}"

    @property
    def broker_bootstrap(self) -> str:
        return f"{self.ip('broker')}:{BROKER_PORT}"

    @property
    def spark_home(self) -> Path:
        """Spark (pyspark's folder) as every host sees it."""
        return self.lab.bind_path("spark-home")

    # -- processes ---------------------------------------------------------------------

    def run(self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None, *,
            cwd: Path | None = None, name: str | None = None) -> subprocess.Popen[bytes]:
        """Start ``argv`` on ``host`` (:meth:`NetLab.run`)."""
        return self.lab.run(host, argv, env, cwd=cwd, name=name)

    def call(self, host: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
             timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on ``host`` to its end (:meth:`NetLab.call`)."""
        return self.lab.call(host, argv, env, timeout=timeout)

    def kill_host(self, host: str) -> list[int]:
        """SIGKILL every process of ``host`` (:meth:`NetLab.kill_host`)."""
        killed = self.lab.kill_host(host)
        log(f"killed host {host}: {len(killed)} processes")
        return killed

    def spark_env(self, host: str) -> dict[str, str]:
        """The environment of a Spark process on ``host``: its address, its own dirs."""
        d = self.lab.host_dir(host)
        return {"SPARK_HOME": str(self.spark_home), "SPARK_LOCAL_IP": self.ip(host),
                "SPARK_LOCAL_DIRS": str(d / "tmp"), "SPARK_LOG_DIR": str(d / "logs"),
                "SPARK_WORKER_DIR": str(d / "work"), "SPARK_DAEMON_MEMORY": self.daemon_memory}

    def submit_conf(self, host: str = "driver", **overrides: str) -> dict[str, str]:
        """Spark settings for an app run by the driver host ``host``: its address, small
        memory, one executor per worker with all its cores, wait for all of them before
        the first job."""
        ip = self.ip(host)
        conf = {
            "spark.driver.host": ip,
            "spark.driver.bindAddress": ip,
            "spark.driver.memory": "512m",
            "spark.executor.memory": "512m",
            "spark.executor.cores": str(self.worker_cores),
            "spark.cores.max": str(len(self.worker_names) * self.worker_cores),
            "spark.ui.enabled": "false",
            "spark.pyspark.driver.python": sys.executable,
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        }
        conf.update(overrides)
        return conf

    def spark_submit(self, app: Path, args: Sequence[str] = (), *,
                     conf: Mapping[str, str] | None = None, archives: Sequence[str] = (),
                     py_files: Sequence[str] = (), env: Mapping[str, str] | None = None,
                     cwd: Path | None = None, host: str = "driver") -> subprocess.Popen[bytes]:
        """``spark-submit`` ``app`` from the driver host ``host`` to the master (client
        mode), in ``cwd`` when given.

        ``conf`` goes over :meth:`submit_conf`; its output is in
        ``lab.log_path(proc)``.
        """
        argv = [str(self.spark_home / "bin" / "spark-submit"), "--master",
                self.spark_master_url, "--deploy-mode", "client"]
        for key, value in {**self.submit_conf(host), **(conf or {})}.items():
            argv += ["--conf", f"{key}={value}"]
        if archives:
            argv += ["--archives", ",".join(archives)]
        if py_files:
            argv += ["--py-files", ",".join(py_files)]
        argv += [str(app), *args]
        return self.run(host, argv, {**self.spark_env(host), **(env or {})},
                        cwd=cwd, name="spark-submit")

    # -- probes, from the driver host --------------------------------------------------

    def port_open(self, ip: str, port: int, from_host: str = "driver") -> bool:
        res = self.call(from_host, ["bash", "-c", f"exec 3<>/dev/tcp/{ip}/{port}"], timeout=10)
        return res.returncode == 0

    def alive_workers(self) -> int:
        """The master's count of alive workers, from its web UI (0 while it does not answer)."""
        url = f"http://{self.ip('master')}:{MASTER_UI_PORT}/json/"
        res = self.call("driver", [sys.executable, "-c", _ALIVE_WORKERS, url], timeout=15)
        try:
            return int(res.stdout.strip() or 0)
        except ValueError:
            return 0

    def broker_ready(self, timeout_s: float = 30.0) -> bool:
        """Whether the broker answers a Kafka metadata request from the driver host."""
        res = self.call("driver", [sys.executable, "-c", _KAFKA_READY, self.broker_bootstrap,
                                   str(timeout_s)], timeout=timeout_s + 15)
        return res.returncode == 0

    # -- start and stop ----------------------------------------------------------------

    def _run_worker(self, name: str) -> None:
        if name not in self.worker_names:
            raise KeyError(f"no worker {name!r}; workers: {self.worker_names}")
        self.procs[name] = self.run(
            name, [str(self.spark_home / "bin" / "spark-class"),
                   "org.apache.spark.deploy.worker.Worker", "--host", self.ip(name),
                   "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                   "--work-dir", str(self.lab.host_dir(name) / "work"),
                   "--webui-port", str(WORKER_UI_PORT), self.spark_master_url],
            self.spark_env(name), name="worker")

    def start_worker(self, name: str, timeout_s: float = 60.0) -> None:
        """Start worker ``name``'s Spark worker again (after :meth:`kill_host`) and wait
        until the master counts every worker alive."""
        if self.procs.get(name) is not None and self.procs[name].poll() is None:
            raise RuntimeError(f"the Spark worker of {name} is running")
        self._run_worker(name)
        n = len(self.worker_names)
        wait_until(lambda: self.alive_workers() >= n, timeout_s,
                   f"{name} to register again at {self.spark_master_url}", poll_s=POLL_S,
                   abort=_exited({name: self.procs[name]}), details=self._details)
        log(f"worker {name} started again")

    def _step(self, name: str) -> None:
        if self._on_step is not None:
            self._on_step(self.lab, name)

    def _details(self) -> str:
        return "\n".join(f"--- {name}:\n{self.lab.log_tail(p, 15)}"
                         for name, p in self.procs.items())

    def _start(self, timeout_s: float) -> None:
        from walstream.broker import tansu_binary

        url = f"tcp://{self.broker_bootstrap}"
        self.procs["broker"] = self.run(
            "broker", [str(tansu_binary()), "broker", "--listener-url", url,
                       "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"],
            name="tansu")
        self._step("broker")
        spark_class = str(self.spark_home / "bin" / "spark-class")
        master_ip = self.ip("master")
        self.procs["master"] = self.run(
            "master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", master_ip,
                       "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)],
            self.spark_env("master"), name="master")
        self._step("spark master")
        deadline = time.monotonic() + timeout_s
        wait_until(lambda: self.port_open(master_ip, MASTER_PORT), timeout_s,
                   f"the Spark master at {self.spark_master_url}", poll_s=POLL_S,
                   abort=_exited({"master": self.procs["master"]}), details=self._details)
        for w in self.worker_names:
            self._run_worker(w)
        self._step("spark workers")
        if not self.broker_ready(max(5.0, deadline - time.monotonic())):
            raise RuntimeError(f"the broker at {self.broker_bootstrap} did not answer Kafka "
                               f"requests from the driver host\n{self._details()}")
        n = len(self.worker_names)
        wait_until(lambda: self.alive_workers() >= n, max(5.0, deadline - time.monotonic()),
                   f"{n} workers to register at {self.spark_master_url}", poll_s=POLL_S,
                   abort=_exited(dict(self.procs)), details=self._details)
        self._step("ready")

    def close(self, raise_errors: bool = True) -> None:
        """Kill every process of every host and remove the network (idempotent)."""
        self.lab.close(raise_errors=raise_errors)

    def __enter__(self) -> MultiHostCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(raise_errors=exc[0] is None)
