"""What a checkpoint holds: a data part in a versioned Avro schema, and the graph.

The data part holds no user code: stream ids and kinds (the graph's shape and
fingerprint), pending batch times, the reliable-checkpoint files of state RDDs,
and the conf; it stays readable across releases and code changes. Next to it,
``graph`` holds the DStream graph with the user's functions, pickled with
PySpark's cloudpickle (``walstream.driver.dstream.graph_pickle``), opaque to the data part: it
is what ``getOrCreate`` restores without calling ``setupFunc``. It is empty
(None) when the graph could not be pickled (a warning says why); schema
version 1 files (before the graph part) read as None too.

``epoch`` is the lease epoch of the driver that wrote the checkpoint (issue 29,
hot standby): 0 without high availability, which is what every checkpoint of
schema versions 1 and 2 reads as. The checkpoint reader enforces it against the
fence files of the directory (``walstream.checkpoint.fence``).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

from walstream.avro_codec import VersionedCodec
from walstream.checkpoint.errors import CheckpointWriteError, CorruptCheckpointError
from walstream.errors import CorruptDataError

SCHEMA_V1: dict[str, Any] = {
    "type": "record",
    "name": "Checkpoint",
    "namespace": "walstream.checkpoint.v1",
    "fields": [
        {"name": "checkpoint_time_ms", "type": "long"},
        {"name": "written_wall_ms", "type": "long"},
        {"name": "app_id", "type": "string"},
        {"name": "batch_ms", "type": "long"},
        {"name": "zero_time_ms", "type": "long"},
        {"name": "fingerprint", "type": "string"},
        {"name": "graph_shape", "type": {"type": "array", "items": "string"}},
        {"name": "pending_times_ms", "type": {"type": "array", "items": "long"}},
        {"name": "state_rdds", "type": {"type": "array", "items": {
            "type": "record", "name": "StateRdd", "fields": [
                {"name": "stream", "type": "string"},
                {"name": "time_ms", "type": "long"},
                {"name": "path", "type": "string"}]}}},
        {"name": "conf", "type": {"type": "map", "values": "string"}},
    ],
}
SCHEMA_V2: dict[str, Any] = {
    **SCHEMA_V1,
    "namespace": "walstream.checkpoint.v2",
    "fields": [*SCHEMA_V1["fields"], {"name": "graph", "type": ["null", "bytes"],
                                      "default": None}],
}
SCHEMA_V3: dict[str, Any] = {
    **SCHEMA_V2,
    "namespace": "walstream.checkpoint.v3",
    "fields": [*SCHEMA_V2["fields"], {"name": "epoch", "type": "long", "default": 0}],
}
#: The largest checkpoint file decoded. Far above any checkpoint this project
#: writes (the data part is small; the pickled graph holds the user's functions),
#: it refuses a file that is not a checkpoint before its decode allocates.
MAX_CHECKPOINT_BYTES = 1024 * 1024 * 1024
CODEC = VersionedCodec("checkpoint", b"WSCP", {1: SCHEMA_V1, 2: SCHEMA_V2, 3: SCHEMA_V3},
                       max_bytes=MAX_CHECKPOINT_BYTES)


@dataclass(frozen=True)
class StateRdd:
    stream: str  # the stream's fingerprint entry, stable for the same setup code
    time_ms: int
    path: str


@dataclass(frozen=True)
class CheckpointData:
    checkpoint_time_ms: int
    written_wall_ms: int
    app_id: str
    batch_ms: int
    zero_time_ms: int
    fingerprint: str
    graph_shape: tuple[str, ...]
    pending_times_ms: tuple[int, ...]
    state_rdds: tuple[StateRdd, ...] = ()
    conf: dict[str, str] = field(default_factory=dict)
    graph: bytes | None = field(default=None, repr=False)
    #: The writer's lease epoch; 0 = no high availability.
    epoch: int = 0

    def encode(self) -> bytes:
        if self.epoch < 0:
            raise CheckpointWriteError(
                f"checkpoint {self.checkpoint_time_ms}: epoch {self.epoch} is negative")
        body = CODEC.encode({
            "checkpoint_time_ms": self.checkpoint_time_ms,
            "written_wall_ms": self.written_wall_ms,
            "app_id": self.app_id,
            "batch_ms": self.batch_ms,
            "zero_time_ms": self.zero_time_ms,
            "fingerprint": self.fingerprint,
            "graph_shape": list(self.graph_shape),
            "pending_times_ms": list(self.pending_times_ms),
            "state_rdds": [{"stream": s.stream, "time_ms": s.time_ms, "path": s.path}
                           for s in self.state_rdds],
            "conf": dict(self.conf),
            "graph": self.graph,
            "epoch": self.epoch,
        })
        # A CRC of the whole body: a torn or bit-flipped file fails before decoding.
        return body + zlib.crc32(body).to_bytes(4, "big")

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, where: str = "checkpoint",
               max_bytes: int = MAX_CHECKPOINT_BYTES) -> CheckpointData:
        """Decode a checkpoint file's bytes.

        Raises :class:`CorruptCheckpointError` for anything but a whole
        checkpoint of a known version (``UnknownSchemaVersionError``'s message
        kept): not bytes, shorter than an envelope, above ``max_bytes``
        (refused before the CRC is computed), a CRC mismatch or a body that
        does not decode.
        """
        if not isinstance(data, bytes | bytearray | memoryview):
            raise CorruptCheckpointError(f"{where}: a {type(data).__name__} is not bytes")
        if len(data) > max_bytes:
            raise CorruptCheckpointError(f"{where}: {len(data)} bytes (max {max_bytes}), "
                                         "not a checkpoint")
        data = bytes(data)
        if len(data) < 8:
            raise CorruptCheckpointError(f"{where}: {len(data)} bytes, too short")
        body, crc = data[:-4], int.from_bytes(data[-4:], "big")
        if zlib.crc32(body) != crc:
            raise CorruptCheckpointError(f"{where}: CRC mismatch (truncated or corrupt)")
        try:
            _, d = CODEC.decode(body, max_bytes=max_bytes)
        except CorruptDataError as exc:
            raise CorruptCheckpointError(f"{where}: {exc}") from exc
        epoch = d.get("epoch", 0)  # versions 1 and 2: written without high availability
        if epoch < 0:
            raise CorruptCheckpointError(f"{where}: epoch {epoch} is negative")
        return cls(
            d["checkpoint_time_ms"], d["written_wall_ms"], d["app_id"], d["batch_ms"],
            d["zero_time_ms"], d["fingerprint"], tuple(d["graph_shape"]),
            tuple(d["pending_times_ms"]),
            tuple(StateRdd(s["stream"], s["time_ms"], s["path"]) for s in d["state_rdds"]),
            dict(d["conf"]), d.get("graph"), epoch)
