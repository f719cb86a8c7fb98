"""The promise, shown: SIGKILL the driver mid-run, restart it with getOrCreate, lose nothing.

Runs ``walstream.testing.recovery_app`` (a deterministic receiver -> word count with
``updateStateByKey`` running totals, checkpointed) as its own process group,
kills the whole group (Python driver, JVM, workers) with SIGKILL mid-run,
starts it again (it recovers with ``StreamingContext.getOrCreate``) and ends with
one line comparing the final totals with the input, and the recovery time (from
the restart command to the first batch it completed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from walstream import broker, procs
from walstream.errors import WalStreamError
from walstream.status_view import find_url
from walstream.testing import wait_until
from walstream.testing.recovery_app import expected_counts

ROOT = Path(__file__).resolve().parents[1]


def start_app(ckpt: Path, out: Path, bootstrap: str, total: int, log: Path) -> subprocess.Popen[
    bytes
]:
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS=bootstrap, SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, PYTHONPATH=str(ROOT))
    env.pop("WALSTREAM_KILL_POINT", None)
    return subprocess.Popen([sys.executable, "-m", "walstream.testing.recovery_app", str(ckpt),
                             str(out), "--total", str(total), "--rate", "1000"],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=open(log, "ab"), start_new_session=True)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    procs.kill_group(proc.pid)
    proc.poll()


def totals(out: Path) -> dict[str, int]:
    try:
        return dict(json.loads((out / "totals.json").read_text()))
    except (OSError, ValueError):
        return {}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--total", type=int, default=10000, help="lines the generator produces")
    args = ap.parse_args(argv)
    expected = expected_counts(11, args.total)
    work = Path(tempfile.mkdtemp(prefix="walstream-recovery-demo-"))
    ckpt, out, log = work / "checkpoint", work / "out", work / "app.log"
    out.mkdir()

    def app_log() -> str:
        return f"demo: the app's log is {log}"

    def live_url() -> str | None:
        try:
            return find_url(ckpt)  # None while the file is missing or a dead driver's
        except WalStreamError:
            return None

    def show_status_page(which: str) -> None:
        """The running driver's status page, from the file it keeps beside its checkpoint."""
        try:
            wait_until(lambda: live_url() is not None, 60, "the status page", poll_s=0.1,
                       details=app_log)
            print(f"recovery demo: {which} driver's status page at {live_url()}", flush=True)
        except TimeoutError as exc:
            print(f"recovery demo: no status page ({exc})", flush=True)

    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    home = work / "broker"
    proc = None
    try:
        bootstrap = external or broker.start(home, port=procs.free_port()).bootstrap
        print(f"recovery demo: {args.total} lines -> word count with running totals "
              f"(checkpoint {ckpt})", flush=True)
        proc = start_app(ckpt, out, bootstrap, args.total, log)
        show_status_page("the")
        want = sum(expected.values())
        wait_until(lambda: 0.25 * want < sum(totals(out).values()), 180, "the first third",
                   poll_s=0.1, details=app_log)
        before = sum(totals(out).values())
        kill_group(proc)
        print(f"recovery demo: SIGKILL of the driver (Python, JVM, workers) with {before} of "
              f"{want} words counted", flush=True)
        restarted_wall = time.time()
        restarted = time.monotonic()
        proc = start_app(ckpt, out, bootstrap, args.total, log)
        show_status_page("the restarted")
        # Every completed batch rewrites totals.json (its last output operation).
        wait_until(lambda: (out / "totals.json").stat().st_mtime > restarted_wall, 180,
                   "the first batch completed after the restart", poll_s=0.1, details=app_log)
        recovery_s = time.monotonic() - restarted
        wait_until(lambda: (out / "done").exists(), 240, "the end of the stream", poll_s=0.1,
                   details=app_log)
        time.sleep(2)
    finally:
        if proc is not None:
            kill_group(proc)
        if not external:
            broker.stop(home)
    got = totals(out)
    lost = sum(max(0, n - got.get(w, 0)) for w, n in expected.items())
    doubled = sum(max(0, n - expected.get(w, 0)) for w, n in got.items())
    print(f"recovery demo: words in {sum(expected.values())}, counted {sum(got.values())}; "
          f"lost {lost}, doubled {doubled}; recovery {recovery_s:.1f}s (restart command to "
          f"first completed batch)", flush=True)
    return 0 if (lost, doubled) == (0, 0) and got == expected else 1


if __name__ == "__main__":
    sys.exit(main())
