"""A class-data-sharing (AppCDS) archive of the Spark driver JVM's classes.

Why: a driver restarted after a SIGKILL spends most of the time before its first
batch starting Spark's JVM, and most of that is loading and verifying the
thousands of classes Spark's jars hold. Java 13+ can map them from an archive written by an
earlier run instead (``-XX:SharedArchiveFile``), which takes most of that time off
the start of a SparkContext (docs/decisions/driver-jvm-class-archive.md). Spark's
own streaming has nothing like it.

The protocol, followed step by step below:

1. ``walstream jvm-archive`` (run by ``make setup`` and the Dockerfile) starts a
   SparkContext in a child process with ``-XX:ArchiveClassesAtExit=TEMP``, runs
   Python jobs, stops it and waits for the JVM: the JVM writes the archive at its
   normal exit, never at a kill.
2. The temp archive is then tried once with ``-Xshare:on`` (a JVM that cannot map
   it fails instead of starting without it); only then are its size and key
   written beside it and the archive renamed into place. A truncated archive
   makes Java 17 die of SIGBUS rather than ignore it, so nothing but a complete,
   tried file ever carries the final name.
3. Before PySpark launches the driver JVM (``getOrCreate``,
   ``walstream.driver.spark.create_spark_context``, or :func:`use_archive` by hand),
   :func:`use_archive` names the archive in ``spark.driver.defaultJavaOptions``
   of a properties file handed to spark-submit through ``PYSPARK_SUBMIT_ARGS``
   (kept in a 0700 directory of this user and reused only when it is this
   user's, 0600 and holds exactly what would be written: its options run in
   the driver JVM).
   That is the lowest-priority place Spark has for driver JVM options: the
   user's ``--conf`` and ``spark.driver.extraJavaOptions`` still apply, and an
   administrator's ``spark-defaults.conf`` is still loaded. It does nothing when
   ``PYSPARK_SUBMIT_ARGS`` is already set (the user's launch), when a JVM is
   already running, when ``WALSTREAM_JVM_ARCHIVE=off``, or when the archive's
   size differs from the one recorded (half-copied).
4. The JVM checks the archive itself (``-Xshare:auto``): one made for another
   JDK or another classpath is ignored and the JVM starts as without it. The
   file name still carries a key of the Java binary, the pyspark version and
   its jars, so an upgrade looks for (and ``jvm-archive`` writes) a new one.

Durability: none is needed; the archive is a cache. Losing it costs start time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from walstream.errors import JvmArchiveError, PrerequisiteError

log = logging.getLogger(__name__)

ENV_SWITCH = "WALSTREAM_JVM_ARCHIVE"  # "off" turns use and creation off
ENV_DIR = "WALSTREAM_JVM_ARCHIVE_DIR"
SUBMIT_ARGS = "PYSPARK_SUBMIT_ARGS"
DEFAULT_JAVA_OPTIONS = "spark.driver.defaultJavaOptions"
# -Xlog:cds=off: a mismatched archive is a normal event (another JDK), not a warning
# on the application's stdout.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
CREATE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ArchiveKey:
    """What an archive is valid for: one Java binary and one Spark classpath."""

    java: str
    pyspark_version: str
    jars_digest: str

    def file_name(self) -> str:
        raw = f"{self.java}\0{self.pyspark_version}\0{self.jars_digest}".encode()
        return f"spark-{self.pyspark_version}-{hashlib.sha1(raw).hexdigest()[:16]}.jsa"


def _java_binary() -> Path:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not os.path.exists(found):
        raise PrerequisiteError("java not found (JAVA_HOME or PATH): PySpark needs Java 17+")
    return Path(os.path.realpath(found))


def _spark_home() -> Path:
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def current_key() -> ArchiveKey:
    """The key of this machine's Java and Spark (cheap: stats, one directory listing)."""
    import pyspark

    java = _java_binary()
    st = java.stat()
    jars = sorted(os.listdir(_spark_home() / "jars"))
    digest = hashlib.sha1("\n".join(jars).encode()).hexdigest()[:16]
    return ArchiveKey(java=f"{java}:{st.st_size}:{int(st.st_mtime)}",
                      pyspark_version=str(pyspark.__version__), jars_digest=digest)


def archive_dir() -> Path:
    """``$WALSTREAM_JVM_ARCHIVE_DIR``, else beside the installed packages (the venv):
    the archive belongs to that pyspark install and goes with it."""
    explicit = os.environ.get(ENV_DIR, "").strip()
    return Path(explicit) if explicit else Path(sys.prefix) / "var" / "walstream" / "jvm"


def switched_off() -> bool:
    return os.environ.get(ENV_SWITCH, "").strip().lower() in ("off", "0", "false", "no")


def archive_path(key: ArchiveKey | None = None) -> Path:
    return archive_dir() / (key or current_key()).file_name()


def usable_archive(key: ArchiveKey | None = None) -> Path | None:
    """The archive for ``key`` when it exists whole (its size as recorded), else None."""
    path = archive_path(key)
    meta = path.with_suffix(".json")
    try:
        recorded = json.loads(meta.read_text())["size"]
        size = path.stat().st_size
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if size != recorded:
        log.warning("JVM class archive %s is %d bytes, %s were written: not used", path,
                    size, recorded)
        return None
    return path


def _admin_default_java_options() -> str:
    """``spark.driver.defaultJavaOptions`` from the spark-defaults.conf spark-submit
    would load, so ours are prepended to an administrator's, not put in their place."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or str(_spark_home() / "conf")
    try:
        text = (Path(conf_dir) / "spark-defaults.conf").read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if parts and parts[0] == DEFAULT_JAVA_OPTIONS and len(parts) == 2:
            return parts[1].strip()
    return ""


def _private_dir() -> Path:
    """``<tempdir>/walstream-<euid>``: a directory only this user can enter, 0700.

    The properties file names JVM options the driver starts with; whoever can
    write it can run code in the driver (``-javaagent``). The directory is
    created 0700; one found under that name is used only when it is a real
    directory of this user (not a symlink), and is then made 0700 again before
    anything in it is trusted. Otherwise (another user took the name) a new
    private directory of this process is used instead.
    """
    uid = os.geteuid()
    path = Path(tempfile.gettempdir()) / f"walstream-{uid}"
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == uid:
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.chmod(path, 0o700)  # ours: no other user may change entries from now on
        return path
    log.warning("%s is not a private directory of this user (owner uid %d%s): keeping the "
                "driver's JVM options in a new one", path, st.st_uid,
                ", a symlink" if stat.S_ISLNK(st.st_mode) else "")
    return Path(tempfile.mkdtemp(prefix=f"walstream-{uid}-"))


def _holds_exactly(path: Path, content: bytes) -> bool:
    """``path`` is a regular file of this user, mode 0600, holding ``content``."""
    try:
        st = os.lstat(path)
        if not (stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
                and stat.S_IMODE(st.st_mode) == 0o600):
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            return f.read(len(content) + 1) == content
    except OSError:
        return False


def _write_properties(java_options: str) -> Path:
    """A spark-submit properties file with ``java_options`` first in the driver's
    default options, in :func:`_private_dir`. Named after its content so repeated
    starts reuse it instead of leaking files, but reused only when it is this
    user's, 0600 and holds exactly that content; otherwise it is replaced
    atomically (a temp file made 0600, then renamed), never read half-written."""
    admin = _admin_default_java_options()
    text = f"{DEFAULT_JAVA_OPTIONS} {java_options} {admin}".rstrip() + "\n"
    digest = hashlib.sha1(text.encode()).hexdigest()[:16]
    where = _private_dir()
    path = where / f"walstream-driver-{os.getuid()}-{digest}.conf"
    if not _holds_exactly(path, text.encode()):
        fd, name = tempfile.mkstemp(prefix=".walstream-driver-", suffix=".tmp", dir=where)
        try:
            with os.fdopen(fd, "w") as f:
                os.fchmod(f.fileno(), 0o600)
                f.write(text)
            os.replace(name, path)  # also over a symlink or another user's file
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(name)
            raise
    return path


def _submit_args(properties: Path) -> str:
    # --load-spark-defaults: a --properties-file alone would hide spark-defaults.conf.
    return f"--properties-file {properties} --load-spark-defaults pyspark-shell"


def use_archive() -> Path | None:
    """Step 3: make the next driver JVM PySpark launches in this process map the
    archive. Returns the archive used, or None (and changes nothing)."""
    if switched_off() or os.environ.get(SUBMIT_ARGS) is not None:
        return None
    if "pyspark" in sys.modules:
        from pyspark import SparkContext

        if SparkContext._gateway is not None:  # the JVM runs already: too late
            return None
    try:
        path = usable_archive()
    except (PrerequisiteError, OSError) as exc:  # no Java: PySpark will say so itself
        log.debug("no JVM class archive: %s", exc)
        return None
    if path is None:
        log.info("no JVM class archive for this Java and Spark (run `walstream jvm-archive` "
                 "for a faster driver start)")
        return None
    try:
        props = _write_properties(f"-XX:SharedArchiveFile={path} -Xshare:auto {_QUIET}")
    except OSError as exc:  # the archive only saves start time: start without it
        log.warning("JVM class archive not used: cannot write the driver's properties "
                    "file: %s", exc)
        return None
    os.environ[SUBMIT_ARGS] = _submit_args(props)
    return path


def _run_child(mode: str, archive: Path, timeout_s: float) -> float:
    """Run this module in a child with the archive being written (``dump``) or tried
    (``try``); the child's seconds to a ready SparkContext."""
    option = (f"-XX:ArchiveClassesAtExit={archive}" if mode == "dump"
              else f"-XX:SharedArchiveFile={archive} -Xshare:on")
    props = _write_properties(f"{option} {_QUIET}")
    env = {k: v for k, v in os.environ.items() if k != SUBMIT_ARGS}
    env[SUBMIT_ARGS] = _submit_args(props)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the child's master is local[2]
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        done = subprocess.run([sys.executable, "-m", __name__], env=env,
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise JvmArchiveError(f"{mode} of the JVM class archive took over {timeout_s} s") \
            from exc
    finally:
        props.unlink(missing_ok=True)  # names a temp archive: of no use again
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise JvmArchiveError(f"{mode} of the JVM class archive failed (exit "
                              f"{done.returncode}): " + " | ".join(tail))
    return float(done.stdout.strip().splitlines()[-1])


def create(timeout_s: float = CREATE_TIMEOUT_S) -> tuple[Path, float, float]:
    """Steps 1-2: write, try and install the archive for this Java and Spark.

    Returns (path, seconds to a SparkContext while writing, seconds with it mapped).
    """
    if switched_off():
        raise JvmArchiveError(f"{ENV_SWITCH}=off: not writing a JVM class archive")
    key = current_key()
    final = archive_path(key)
    final.parent.mkdir(parents=True, exist_ok=True)
    temp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    try:
        without = _run_child("dump", temp, timeout_s)  # step 1
        if not temp.exists() or temp.stat().st_size == 0:
            raise JvmArchiveError(f"the JVM exited without writing {temp}")
        with_archive = _run_child("try", temp, timeout_s)  # step 2: it maps, or fails
        meta = {"size": temp.stat().st_size, "java": key.java,
                "pyspark": key.pyspark_version, "jars": key.jars_digest,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        # The size record first: an archive under the final name without its record
        # is never used (usable_archive), one with a wrong size neither.
        meta_temp = temp.with_suffix(".json.tmp")
        meta_temp.write_text(json.dumps(meta))
        os.replace(meta_temp, final.with_suffix(".json"))
        os.replace(temp, final)
    finally:
        temp.unlink(missing_ok=True)
    return final, without, with_archive


def _child() -> int:
    """A SparkContext and the kinds of jobs a batch runs, then a clean JVM exit."""
    from pyspark import SparkConf, SparkContext

    t0 = time.monotonic()
    sc = SparkContext(conf=SparkConf().setMaster("local[2]").setAppName("walstream-jvm-archive")
                      .set("spark.ui.enabled", "false"))
    ready = time.monotonic() - t0
    sc.setLogLevel("ERROR")
    words = sc.parallelize([f"w{i % 7} x" for i in range(1000)], 2)
    words.flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b).collect()
    sc.union([words, words]).count()
    proc = SparkContext._gateway.proc  # type: ignore[union-attr]
    sc.stop()
    # The JVM exits (and writes the archive) when its stdin closes; wait for it, or
    # the parent could see a half-written file.
    if proc is not None:
        proc.stdin.close()
        proc.wait(timeout=CREATE_TIMEOUT_S)
    print(f"{ready:.3f}")
    return 0


if __name__ == "__main__":
    # Only ever run by _run_child; people use `walstream jvm-archive` (walstream/cli.py).
    sys.exit(_child())
