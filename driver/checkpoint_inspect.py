"""``walstream inspect CHECKPOINT_DIR``: what a restart would recover, as JSON.

Reads the newest valid checkpoint and replays the driver WAL it names, read
only (nothing is written or cleaned). Guarantee: the ``tracker`` and
``positions`` shown are what a ``getOrCreate`` restart's tracker rebuilds,
because they come from the same replay, not a copy of it:

* the WAL is opened as the engine opens it: ``<app_id>-driver`` with the
  application's WAL options (:func:`driver.wal_conf.wal_options_from_conf`) read
  from the checkpoint's conf, which is the conf a restored context runs with;
* the events are replayed by :class:`~driver.received_block_tracker.ReceivedBlockTracker`'s
  own recovery, so an undecodable event is skipped and counted
  (``corrupt_events``) exactly as a restart skips it, never an abort here.

The Kafka cluster is the one given, else the checkpoint conf's
``spark.walstream.kafka.bootstrapServers`` (what the restarted app would use),
else ``default_bootstrap()`` (the environment or the embedded broker). The
checkpoint holds no secret, so a secured cluster's settings are given here
(``kafka_conf``: librdkafka keys, as ``spark.walstream.kafka.*`` would give
them), over the checkpoint's own; secrets are redacted in the output.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from checkpoint.errors import CheckpointError
from checkpoint.files import read_latest
from driver.received_block_tracker import ReceivedBlockTracker
from driver.wal_conf import wal_options_from_conf
from wal import BatchedWriteAheadLog, KafkaWriteAheadLog
from walstream.kafka_settings import PREFIX, redacted

# driver.streaming_context.CONF_BOOTSTRAP, named here so that inspect does not
# import the Spark-facing context module.
CONF_BOOTSTRAP = "spark.walstream.kafka.bootstrapServers"


def inspect_checkpoint(directory: str, bootstrap_servers: str | None,
                       default_bootstrap: Callable[[], str | None] = lambda: None,
                       kafka_conf: Mapping[str, str] | None = None) -> dict[str, Any]:
    data = read_latest(directory)
    if data is None:
        raise CheckpointError(f"no valid checkpoint in {directory}")
    bootstrap = bootstrap_servers or data.conf.get(CONF_BOOTSTRAP) or default_bootstrap()
    if not bootstrap:
        raise CheckpointError("no Kafka cluster: pass --bootstrap, set "
                              "KAFKA_BOOTSTRAP_SERVERS or start the embedded broker")
    conf = {**data.conf, **{PREFIX + k: v for k, v in (kafka_conf or {}).items()}}
    wal_options = wal_options_from_conf(conf)
    wal = BatchedWriteAheadLog(KafkaWriteAheadLog(bootstrap, f"{data.app_id}-driver",
                                                  **wal_options))
    # The tracker's constructor replays the WAL with its recovery; with no stream
    # ids given, every stream the log names appears.
    tracker = ReceivedBlockTracker([], wal)
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
        "positions": positions,
    }


def main_inspect(directory: str, bootstrap_servers: str | None,
                 default_bootstrap: Callable[[], str | None] = lambda: None,
                 kafka_conf: Mapping[str, str] | None = None) -> str:
    return json.dumps(inspect_checkpoint(directory, bootstrap_servers, default_bootstrap,
                                         kafka_conf),
                      indent=2, sort_keys=True)
