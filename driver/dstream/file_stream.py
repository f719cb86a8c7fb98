"""FileInputDStream (``textFileStream`` / ``binaryRecordsStream``) with logged file lists.

Spark keeps each batch's selected files in the DStream's checkpoint data so a
batch re-run after a driver crash reads the same files. Here the selection is
logged like receiver data, so it survives a SIGKILL at any step:

1. Before batch ``t`` is allocated, the driver lists the directory and selects
   the new files: not selected before, modified at or before ``t``, newer than
   the ignore threshold, names not starting with ``.`` or ``_`` (in-progress).
2. The sorted selection (possibly empty) is written to this stream's own Kafka
   WAL (``<app>-files-<stream>``); only after the write is acknowledged is it
   reported to the tracker as a block (``BlockAddition``, logged), whose handle
   points at that record.
3. Allocation (``BatchAllocation``, logged) assigns the block to batch ``t``;
   ``compute(t)`` reads the file list back by handle. A re-run of ``t`` after a
   restart therefore reads exactly the files the first run selected.
4. A restarted driver rebuilds its "already selected" set from the file lists
   still in the tracker, and ignores unlisted files modified at or before the
   batch preceding the oldest remembered list: such files were selected by a
   batch that is already cleaned (step 5). Files present when a new
   application first starts are ignored (Spark's ``newFilesOnly``); their names
   are pickled with the graph, so a restart still ignores them even when their
   modification time is newer than that threshold.
5. Cleanup (after the checkpoint that no longer needs them) drops old lists
   from the tracker and this WAL together with the receivers' blocks.

As in Spark, files must appear atomically (write elsewhere, then rename into the
directory) with a current modification time; a file moved in with an old
modification time while the driver is down may be ignored.
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import TYPE_CHECKING, Any

from walstream.avro_codec import VersionedCodec
from walstream.driver.dstream.driver_read_inputs import DriverReadInputDStream
from walstream.receiver.block_info import ReceivedBlockInfo
from walstream.wal import KafkaWriteAheadLog

if TYPE_CHECKING:
    from walstream.driver.dstream.streaming_context import StreamingContext

log = logging.getLogger(__name__)

FILE_LIST_SCHEMA_V1: dict[str, Any] = {
    "type": "record",
    "name": "FileList",
    "namespace": "walstream.driver.v1",
    "fields": [
        {"name": "stream_id", "type": "int"},
        {"name": "batch_time_ms", "type": "long"},
        {"name": "files", "type": {"type": "array", "items": "string"}},
    ],
}

FILE_LIST_CODEC = VersionedCodec("file list", b"WSFL", {1: FILE_LIST_SCHEMA_V1})


class FileInputDStream(DriverReadInputDStream):
    """New files in a directory; each batch's selection is logged before it runs."""

    def __init__(self, ssc: StreamingContext, directory: str,
                 record_length: int | None = None) -> None:
        super().__init__(ssc, ssc._batch_ms, [],
                         "binaryRecords" if record_length else "textFile")
        self.stream_id = ssc._next_receiver_id()
        self.directory = directory
        self.record_length = record_length
        self._selected: set[str] | None = None  # None until the first batch of a run
        self._ignore_until_ms = -1  # files modified at or before this are ignored
        # Files present at the application's first start (never new). Pickled with
        # the graph, so a restart keeps the first run's set, not today's listing.
        self._initial: set[str] | None = None
        self._wal: KafkaWriteAheadLog | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.update(_wal=None, _selected=None)  # rebuilt from the tracker (step 4)
        return state

    # -- directory -----------------------------------------------------------------

    def _candidates(self) -> list[tuple[int, str]]:
        out = []
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        for name in names:
            if name.startswith((".", "_")):
                continue
            path = os.path.join(self.directory, name)
            try:
                if os.path.isfile(path):
                    out.append((int(os.path.getmtime(path) * 1000), path))
            except OSError:
                continue  # removed between listdir and stat
        return sorted(out)

    def _initialize(self, zero_ms: int) -> None:
        # Files present now, at the first start of the application, are not new
        # (Spark's newFilesOnly). A restart must not list again: the directory now
        # holds files that arrived while the driver was down, which are new. A graph
        # restored from a checkpoint keeps the first run's set; a graph rebuilt by
        # setupFunc over a data-only checkpoint has none and relies on step 4's
        # thresholds alone.
        if self._ssc._recovered is None:
            self._initial = {p for _, p in self._candidates()}
        elif self._initial is None:
            self._initial = set()
        super()._initialize(zero_ms)

    # -- the log -------------------------------------------------------------------

    def _file_wal(self) -> KafkaWriteAheadLog:
        if self._wal is None:
            engine = self._ssc._engine
            assert engine is not None
            cfg = engine.config
            self._wal = KafkaWriteAheadLog(cfg.bootstrap_servers,
                                           f"{cfg.app_id}-files-{self.stream_id}",
                                           **cfg.wal_options)
        return self._wal

    def _files_of(self, info: ReceivedBlockInfo) -> list[str]:
        _, d = FILE_LIST_CODEC.decode(self._file_wal().read(info.handle))
        return list(d["files"])

    def _restore(self) -> None:
        """Step 4: what earlier runs of this application selected."""
        engine = self._ssc._engine
        assert engine is not None
        tracker = engine.tracker
        infos = list(tracker.get_unallocated_blocks(self.stream_id))
        for t in tracker.allocated_batch_times():
            infos.extend(tracker.get_blocks_of_batch_and_stream(t, self.stream_id))
        lists = [FILE_LIST_CODEC.decode(self._file_wal().read(i.handle))[1] for i in infos]
        self._selected = {f for d in lists for f in d["files"]} | (self._initial or set())
        last = tracker.last_allocated_batch_time_ms
        if lists:
            # Unlisted files from before the oldest remembered list were selected by
            # a batch that is cleaned already.
            self._ignore_until_ms = min(int(d["batch_time_ms"]) for d in lists) - self._slide_ms
        elif last is not None:
            # Every list is cleaned: batch ``last`` listed the directory at or after
            # ``last``, so it or an earlier batch selected every file modified by then.
            self._ignore_until_ms = last

    def before_allocate(self, t: int) -> None:
        """Steps 1 and 2: select batch ``t``'s files, log them, report the block."""
        engine = self._ssc._engine
        assert engine is not None
        if self._selected is None:
            self._restore()
        assert self._selected is not None
        last = engine.tracker.last_allocated_batch_time_ms
        if last is not None and t <= last:
            return  # a re-run of a batch whose files are logged already: read those
        new = [p for mtime, p in self._candidates()
               if p not in self._selected and self._ignore_until_ms < mtime <= t]
        record = FILE_LIST_CODEC.encode(
            {"stream_id": self.stream_id, "batch_time_ms": t, "files": sorted(new)})
        handle = self._file_wal().write(record, t)
        # Unique per record (a list logged again for the same t after a crash must
        # not replace the first one, whose files would then be lost).
        info = ReceivedBlockInfo(self.stream_id,
                                 f"files-{self.stream_id}-{t}-{uuid.uuid4().hex[:12]}",
                                 len(new), handle)
        if engine.tracker.add_block(info):
            self._selected.update(new)

    def clean(self, thresh_ms: int) -> None:
        """Step 5: drop the lists of batches older than ``thresh_ms``."""
        if self._wal is not None:
            self._wal.clean(thresh_ms, wait_for_completion=False)

    def close(self) -> None:
        wal, self._wal = self._wal, None
        if wal is not None:
            wal.close()

    # -- batches ---------------------------------------------------------------------

    def compute(self, t: int) -> Any:
        """Step 3: the files logged for ``t`` (the same ones on a re-run)."""
        engine = self._ssc._engine
        assert engine is not None
        sc = self._ssc.sparkContext
        files = [f for info in engine.tracker.get_blocks_of_batch_and_stream(t, self.stream_id)
                 for f in self._files_of(info)]
        if not files:
            return sc.emptyRDD()
        if self.record_length:
            return sc.union([sc.binaryRecords(p, self.record_length) for p in files])
        return sc.textFile(",".join(files))
