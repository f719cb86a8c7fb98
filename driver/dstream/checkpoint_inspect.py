"""``walstream inspect CHECKPOINT_DIR``: what a restart would recover, as JSON.

Reads the newest valid checkpoint and replays the driver WAL it names, read
only (nothing is written or cleaned). Guarantee: the ``tracker`` and
``positions`` shown are what a ``getOrCreate`` restart's tracker rebuilds,
because they come from the same replay, not a copy of it:

* the WAL is opened as the engine opens it: ``<app_id>-driver`` with the
  application's WAL options (:func:`walstream.driver.scheduler.wal_conf.wal_options_from_conf`) read
  from the checkpoint's conf, which is the conf a restored context runs with;
* the events are replayed by
  :class:`~walstream.driver.scheduler.received_block_tracker.ReceivedBlockTracker`'s
  own recovery, so an undecodable event is skipped and counted
  (``corrupt_events``) exactly as a restart skips it, never an abort here;
  with high availability, the same fencing cut applies: ``fence_epoch`` is the
  newest leader's epoch whose ``EpochStarted`` the log holds (0: none), and
  ``fenced_events`` counts the older leaders' events after a cut, which changed
  nothing.

The Kafka cluster is the one given, else the checkpoint conf's
``spark.walstream.kafka.bootstrapServers`` (what the restarted app would use),
else ``default_bootstrap()`` (the environment or the embedded broker). The
checkpoint holds no secret, so a secured cluster's settings are given here
(``kafka_conf``: librdkafka keys, as ``spark.walstream.kafka.*`` would give
them), over the checkpoint's own; secrets are redacted in the output.

While it replays, ``progress`` shows how far it got on a stream of its own
(standard error from the command line, so the JSON on standard output stays as
it is): ``bar``, a progress bar (tqdm: the WAL's Kafka records read of their
total from the end offsets, with the events so far, when the WAL tells them, else
events so far, rate, elapsed); ``lines``,
a plain line at most every ``PROGRESS_LINE_INTERVAL_S`` and one at the end;
``auto``, a bar on a terminal and lines otherwise; ``none`` (the default of the
functions here), nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import IO, Any

from walstream.checkpoint.errors import CheckpointError
from walstream.checkpoint.files import read_latest
from walstream.driver.scheduler.driver_wal import open_driver_wal
from walstream.driver.scheduler.received_block_tracker import ReceivedBlockTracker
from walstream.driver.scheduler.wal_conf import wal_options_from_conf
from walstream.kafka_settings import PREFIX, redacted
from walstream.progress import ProgressReporter, ProgressSnapshot

# driver.streaming_context.CONF_BOOTSTRAP, named here so that inspect does not
# import the Spark-facing context module.
CONF_BOOTSTRAP = "spark.walstream.kafka.bootstrapServers"

PROGRESS_MODES = ("auto", "bar", "lines", "none")
#: How often ``lines`` progress writes a line; a bar is redrawn about every 0.1 s.
PROGRESS_LINE_INTERVAL_S = 5.0
BAR_INTERVAL_S = 0.1
_WHAT = "replaying the driver WAL"


def replay_progress(mode: str, stream: IO[str],
                    clock: Callable[[], float] | None = None) -> ProgressReporter | None:
    """The reporter ``mode`` asks for, writing to ``stream``; None for ``none``."""
    if mode not in PROGRESS_MODES:
        raise ValueError(f"progress mode {mode!r}: expected one of {PROGRESS_MODES}")
    if mode == "auto":
        mode = "bar" if stream.isatty() else "lines"
    clock = clock or time.monotonic
    if mode == "bar":
        return ProgressReporter(_BarSink(stream), BAR_INTERVAL_S, clock)
    if mode == "lines":
        return ProgressReporter(_line_sink(stream), PROGRESS_LINE_INTERVAL_S, clock)
    return None


def _line_sink(stream: IO[str]) -> Callable[[ProgressSnapshot, bool], None]:
    def write(snap: ProgressSnapshot, final: bool) -> None:
        if final:
            read = ("" if snap.extent is None else
                    f", {snap.extent.done:,} of {snap.extent.total:,} {snap.extent.unit}")
            print(f"walstream inspect: replayed the driver WAL: {snap.done:,} events in "
                  f"{snap.elapsed_s:.1f} s{read}", file=stream, flush=True)
        else:
            print(f"walstream inspect: {_WHAT}: {snap.describe()}", file=stream, flush=True)
    return write


class _BarSink:
    """A tqdm bar, opened at the first report and closed at the last: in WAL records of
    their known total (events so far beside them) when the first report has an extent,
    else in events."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.bar: Any = None
        self.in_extent = False

    def __call__(self, snap: ProgressSnapshot, final: bool) -> None:
        if self.bar is None:
            from tqdm import tqdm

            self.in_extent = snap.extent is not None
            total, unit = ((snap.extent.total, f" {snap.extent.unit}")
                           if snap.extent is not None else (snap.total, " events"))
            self.bar = tqdm(desc=_WHAT, total=total, unit=unit, file=self.stream,
                            dynamic_ncols=True, mininterval=BAR_INTERVAL_S)
        if self.in_extent:
            if snap.extent is not None:
                self.bar.update(snap.extent.done - self.bar.n)
            self.bar.set_postfix_str(f"{snap.done:,} events", refresh=False)
        else:
            self.bar.update(snap.done - self.bar.n)
        if final:
            self.bar.close()


def inspect_checkpoint(directory: str, bootstrap_servers: str | None,
                       default_bootstrap: Callable[[], str | None] = lambda: None,
                       kafka_conf: Mapping[str, str] | None = None,
                       progress: ProgressReporter | None = None) -> dict[str, Any]:
    """What a restart from ``directory`` would recover; ``progress`` follows the replay
    (default: the tracker's own log lines)."""
    data = read_latest(directory)
    if data is None:
        raise CheckpointError(f"no valid checkpoint in {directory}")
    bootstrap = bootstrap_servers or data.conf.get(CONF_BOOTSTRAP) or default_bootstrap()
    if not bootstrap:
        raise CheckpointError("no Kafka cluster: pass --bootstrap, set "
                              "KAFKA_BOOTSTRAP_SERVERS or start the embedded broker")
    conf = {**data.conf, **{PREFIX + k: v for k, v in (kafka_conf or {}).items()}}
    wal_options = wal_options_from_conf(conf)
    wal = open_driver_wal(bootstrap, data.app_id, wal_options)
    # The tracker's constructor replays the WAL with its recovery; with no stream
    # ids given, every stream the log names appears.
    tracker = ReceivedBlockTracker([], wal, replay_progress=progress)
    try:
        state = tracker.state().to_json()
        streams = sorted({int(s) for s in state["unallocated"]} |
                         {int(s) for per in state["allocated"].values() for s in per} |
                         set(tracker.streams_with_positions()))
        positions = {str(s): [r.__dict__ for r in tracker.positions(s)] for s in streams}
    finally:
        tracker.stop()
    return {
        "checkpoint_dir": str(directory),
        "checkpoint_time_ms": data.checkpoint_time_ms,
        "app_id": data.app_id,
        "batch_ms": data.batch_ms,
        "wal_options": {k: redacted(v) if k == "client_config" else v
                        for k, v in wal_options.items()},
        "pending_batches_ms": list(data.pending_times_ms),
        "state_rdds": [{"stream": s.stream, "time_ms": s.time_ms, "path": s.path}
                       for s in data.state_rdds],
        "tracker": state,
        "corrupt_events": tracker.corrupt_events,
        "fence_epoch": tracker.fence_epoch,
        "fenced_events": tracker.fenced_events,
        "positions": positions,
    }


def main_inspect(directory: str, bootstrap_servers: str | None,
                 default_bootstrap: Callable[[], str | None] = lambda: None,
                 kafka_conf: Mapping[str, str] | None = None,
                 progress: str = "none", progress_stream: IO[str] | None = None) -> str:
    """The JSON of :func:`inspect_checkpoint`; ``progress`` (a mode of
    :data:`PROGRESS_MODES`) is shown on ``progress_stream`` (default standard error)."""
    import sys

    reporter = replay_progress(progress, progress_stream or sys.stderr)
    return json.dumps(inspect_checkpoint(directory, bootstrap_servers, default_bootstrap,
                                         kafka_conf, reporter),
                      indent=2, sort_keys=True)
