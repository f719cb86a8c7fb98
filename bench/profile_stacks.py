"""The peer profile's stacks: py-spy's raw output parsed, and each stack put into a part.

The parts (the rows of the profile's table) and the roles of the app's Python
processes; :class:`Rule`, the stack classification rules (:data:`RULES`) and the
native threads' table (:data:`NATIVE_THREADS`); :func:`classify` and
:func:`native_part`; :func:`parse_frame` and :func:`parse_raw` for py-spy's
``--format raw`` output. Used by ``bench.peer_profile``, ``bench.profile_cpu``
and ``bench.profile_svg``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bench.peer_apps import ROOT

# -- parts and rules ---------------------------------------------------------------

RECEIVER = "receiver: socket read, line splitting"
BLOCKS = "receiver: block building and encoding"
PRODUCE = "receiver: WAL produce"
BROKER = "broker (Tansu, /proc)"
TRACKER = "driver: tracker and gRPC"
JOBGEN = "driver: job generation"
READ = "tasks: block read and decode"
USER = "user's functions"
SPARK = "Spark, Python side (py4j; pyspark worker, shuffle, serializers)"
JVM = "Spark JVM (/proc)"
OTHER = "other Python"
UNATTRIBUTED = "Python, unattributed"

#: The table's rows, in order (a part with no CPU still gets its row).
PARTS = (RECEIVER, BLOCKS, PRODUCE, BROKER, TRACKER, JOBGEN, READ, USER, SPARK, JVM,
         OTHER, UNATTRIBUTED)

DRIVER_ROLE = "driver"
RECEIVER_ROLE = "receiver worker"
TASKS_ROLE = "task workers"
ROLES = (DRIVER_ROLE, RECEIVER_ROLE, TASKS_ROLE)


@dataclass(frozen=True)
class Rule:
    """A frame of ``file`` (and of a function matching ``func``) in a process of
    ``side`` puts its stack into ``part``.

    ``file`` ending in ``.py`` is a path suffix (``receiver/block.py``); ending in
    ``/`` a folder anywhere in the path (``pyspark/``). ``func`` is a regular
    expression the function's own name (its qualified name's last part) must match
    in full; empty: any. ``side`` is ``driver`` or ``worker`` (any other process of
    the app); empty: both. ``library`` rules apply only to stacks with no frame
    that a project rule matches.
    """

    part: str
    file: str
    func: str = ""
    side: str = ""
    library: bool = False

    def matches(self, func: str, path: str, side: str) -> bool:
        if self.side and self.side != side:
            return False
        p = "/" + path.lstrip("/")
        if self.file.endswith("/"):
            if "/" + self.file not in p:
                return False
        elif not p.endswith("/" + self.file):
            return False
        if not self.func:
            return True
        # A comprehension or nested function inside ``decode_items`` counts as
        # ``decode_items`` too: its own name (``<listcomp>``) or its outermost one.
        names = {func.rsplit(".", 1)[-1], func.split(".<locals>.", 1)[0].rsplit(".", 1)[-1]}
        return any(re.fullmatch(self.func, n) is not None for n in names)


#: Every stack classification rule, in order. :func:`classify` walks a stack from
#: its leaf towards its root, and the first frame that a project rule (library=False)
#: matches decides (of the rules matching that frame, the first in this table); a
#: stack with no such frame is decided the same way by the library rules; a stack
#: neither matches is "other Python". Files of ``wal/`` that both the writer and the
#: reader use (framing, segments, handles) have no rule: their caller decides.
RULES: tuple[Rule, ...] = (
    # The word count's own code: the lambdas run in the tasks, _record is its
    # foreachRDD on the driver; the batch recorder (a listener) is the benchmark's.
    Rule(USER, "bench/peer_app.py", r"<lambda>|_record"),
    Rule(OTHER, "bench/peer_app.py", r"onBatchCompleted"),
    # The receiver task (a long-running task in one Python worker).
    Rule(RECEIVER, "receiver/socket_receiver.py"),
    Rule(READ, "receiver/items.py", r"_?decode\w*"),
    Rule(READ, "receiver/block.py", r"decode|from_dict|block_items|_split_text"),
    Rule(BLOCKS, "receiver/items.py"),
    Rule(BLOCKS, "receiver/block.py"),
    Rule(BLOCKS, "receiver/text_run.py"),
    Rule(BLOCKS, "receiver/block_generator.py"),
    Rule(BLOCKS, "receiver/supervisor.py"),
    Rule(BLOCKS, "receiver/block_handler.py"),
    Rule(BLOCKS, "receiver/rate_limiter.py"),
    Rule(PRODUCE, "wal/kafka_log.py", side="worker"),
    Rule(TRACKER, "receiver/driver_client.py"),
    # The batch tasks' reads.
    Rule(READ, "driver/dstream/block_rdd.py", r"_read_blocks"),
    Rule(READ, "wal/reader.py"),
    # The driver: block tracking (AddBlock over gRPC, the driver's WAL of tracker
    # events) and job generation.
    Rule(TRACKER, "wal/", side="driver"),
    Rule(TRACKER, "driver/scheduler/received_block_tracker.py"),
    Rule(TRACKER, "driver/receiver_tracker/tracker.py"),
    Rule(TRACKER, "driver/receiver_tracker/endpoint.py"),
    Rule(TRACKER, "driver/scheduler/tracker_state.py"),
    Rule(TRACKER, "driver/receiver_tracker/endpoint_auth.py"),
    Rule(TRACKER, "driver/receiver_tracker/endpoint_limits.py"),
    Rule(TRACKER, "driver/receiver_tracker/commands.py"),
    Rule(JOBGEN, "driver/scheduler/job_generator.py"),
    Rule(JOBGEN, "driver/scheduler/job_scheduler.py"),
    Rule(JOBGEN, "driver/dstream/graph.py"),
    Rule(JOBGEN, "driver/dstream/dstream.py"),
    Rule(JOBGEN, "driver/dstream/dstream_kinds.py"),
    Rule(JOBGEN, "driver/dstream/receiver_input_stream.py"),
    Rule(JOBGEN, "driver/dstream/block_rdd.py"),
    Rule(JOBGEN, "driver/scheduler/batch_info.py"),
    Rule(JOBGEN, "driver/scheduler/recurring_timer.py"),
    Rule(JOBGEN, "driver/scheduler/rate_controller.py"),
    # Libraries, for stacks without any frame above.
    Rule(BLOCKS, "fastavro/", side="worker", library=True),
    Rule(PRODUCE, "confluent_kafka/", side="worker", library=True),
    Rule(TRACKER, "confluent_kafka/", side="driver", library=True),
    Rule(TRACKER, "grpc/", library=True),
    Rule(SPARK, "py4j/", library=True),
    Rule(SPARK, "pyspark/", library=True),
)

#: Native threads of the Python processes (no Python frames: py-spy does not see
#: them), by the prefix of their name (``/proc/PID/task/TID/comm``) and the role of
#: their process; the first match decides. Empty role: any.
NATIVE_THREADS: tuple[tuple[str, str, str], ...] = (
    ("rdk:", RECEIVER_ROLE, PRODUCE),  # the receiver's librdkafka producer
    ("rdk:", TASKS_ROLE, READ),  # the tasks' librdkafka consumers
    ("rdk:", DRIVER_ROLE, TRACKER),  # the driver's WAL producer
    ("grpc", "", TRACKER),  # gRPC core (AddBlock client and server)
    ("default-execu", "", TRACKER),
    ("resolver-exec", "", TRACKER),
    ("event_engine", "", TRACKER),
)


def parse_frame(frame: str) -> tuple[str, str]:
    """``(function, path)`` of a py-spy frame ``func (path:line)`` (or ``func (path)``)."""
    func, sep, rest = frame.rpartition(" (")
    if not sep:
        return frame, ""
    path = rest[:-1] if rest.endswith(")") else rest
    head, colon, line = path.rpartition(":")
    if colon and line.isdigit():
        path = head
    return func, path


def side_of(role: str) -> str:
    return "driver" if role == DRIVER_ROLE else "worker"


def short_path(path: str) -> str:
    """A frame's file, shortened: relative to the repository or to site-packages."""
    root = str(ROOT) + "/"
    if path.startswith(root):
        return path[len(root):]
    for marker in ("/site-packages/", ".zip/", "/lib/python3"):
        i = path.rfind(marker)
        if i >= 0:
            rest = path[i + len(marker):]
            return ("stdlib:" + rest.split("/", 1)[-1]) if marker == "/lib/python3" else rest
    return path


def classify(frames: Sequence[str], side: str) -> tuple[str, str]:
    """``(part, detail)`` of one stack (frames root first, leaf last) sampled in a
    process of ``side`` (``driver`` or ``worker``), by :data:`RULES`.

    ``detail`` names what decided: the matched frame's file, or for "other Python"
    the leaf-most frame outside the standard library (else the leaf's file).
    """
    parsed = [parse_frame(f) for f in reversed(frames)]  # leaf first
    for library in (False, True):
        for func, path in parsed:
            for rule in RULES:
                if rule.library == library and rule.matches(func, path, side):
                    return rule.part, short_path(path)
    for _, path in parsed:
        short = short_path(path)
        if path and not short.startswith("stdlib:"):
            return OTHER, short
    return OTHER, short_path(parsed[0][1]) if parsed else "(no frames)"


def native_part(comm: str, role: str) -> str | None:
    """The part of a native thread named ``comm`` in a process of ``role``, if any."""
    for prefix, want, part in NATIVE_THREADS:
        if comm.startswith(prefix) and want in ("", role):
            return part
    return None


# -- py-spy's raw output -----------------------------------------------------------

_PROCESS = re.compile(r'process (\d+):"(.*?)";', re.DOTALL)
_THREAD = re.compile(r"thread \(([^)]*)\)(?:: ([^;]*))?;?")


@dataclass(frozen=True)
class Sample:
    """One collapsed stack of py-spy's raw output and its sample count."""

    pid: int
    tid: int | None  # the native thread id (None when py-spy gave none)
    thread: str
    frames: tuple[str, ...]  # root first
    count: int
    cmdline: str = ""


def parse_raw(text: str, root_pid: int) -> list[Sample]:
    """The samples of py-spy's ``--format raw`` output recorded with ``--threads``
    (and ``--subprocesses``: each stack starts with its chain of process frames; the
    last one is the process sampled). A process's command line may hold line
    breaks: a line that starts no record continues the one before while that one
    has no sample count yet. Malformed records are skipped."""
    records: list[str] = []
    for line in text.splitlines():
        if (records and not line.startswith(("process ", "thread "))
                and not re.search(r" \d+$", records[-1])):
            records[-1] += "\n" + line
        else:
            records.append(line)
    out = []
    for record in records:
        stack, _, n = record.rpartition(" ")
        if not n.isdigit():
            continue
        pid, cmdline = root_pid, ""
        while m := _PROCESS.match(stack):
            pid, cmdline = int(m.group(1)), m.group(2)
            stack = stack[m.end():]
        tid: int | None = None
        thread = ""
        if m := _THREAD.match(stack):
            raw_tid, thread = m.group(1), m.group(2) or ""
            tid = int(raw_tid) if raw_tid.isdigit() else None
            stack = stack[m.end():]
        frames = tuple(f for f in stack.split(";") if f)
        out.append(Sample(pid, tid, thread, frames, int(n), cmdline))
    return out
