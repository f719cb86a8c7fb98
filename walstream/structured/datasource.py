"""The ``walstream`` data source and its stream reader (PySpark's Python Data
Source API).

Spark calls the reader's offset methods in a Python process its JVM starts for
the query, and its ``read`` in tasks. Every offset method is a call to the
source service in the user's driver process (:mod:`walstream.structured.service`), where the
receivers and the tracker live; ``read`` reads blocks from Kafka by handle.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
)

from walstream.structured.options import SourceOptions
from walstream.structured.rows import read_rows, schema_ddl
from walstream.structured.service import ServiceClient


class BlockPartition(InputPartition):
    """One task's blocks, ``(stream_id, block_id, handle)`` each, and how to read
    them."""

    def __init__(self, blocks: list[tuple[int, str, dict[str, Any]]], bootstrap_servers: str,
                 kafka_settings: dict[str, str]) -> None:
        super().__init__(len(blocks))
        self.blocks = blocks
        self.bootstrap_servers = bootstrap_servers
        self.kafka_settings = kafka_settings


def _limits(options: SourceOptions, limit: ReadLimit | None
            ) -> tuple[int | None, int | None]:
    """``(max blocks, max records)`` for one micro-batch. When Spark passes
    ``ReadAllAvailable`` (a trigger that must read everything) the options' limits
    are ignored, as Spark requires."""
    if isinstance(limit, ReadAllAvailable):
        return None, None
    max_blocks, max_records = options.max_blocks_per_trigger, options.max_records_per_trigger
    if isinstance(limit, ReadMaxRows):
        max_records = min(limit.max_rows, max_records or limit.max_rows)
    if isinstance(limit, ReadMaxFiles):
        max_blocks = min(limit.max_files, max_blocks or limit.max_files)
    return max_blocks, max_records


class WalstreamStreamReader(DataSourceStreamReader):
    """Offsets are the tracker's allocations (:mod:`walstream.structured.offsets`)."""

    def __init__(self, options: SourceOptions, raw_options: dict[str, str],
                 service_file: str) -> None:
        self.source_options = options
        self._raw = dict(raw_options)
        self._service_file = service_file
        self._client: ServiceClient | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Pickled for the tasks: a client holds the service's token, which tasks do
        # not need.
        return {**self.__dict__, "_client": None}

    def _call(self, op: str, **fields: Any) -> Any:
        if self._client is None:
            self._client = ServiceClient(self._service_file, self.source_options.name,
                                         self._raw)
        return self._client.call(op, **fields)

    def initialOffset(self) -> dict:
        return dict(self._call("initial"))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        max_blocks, max_records = _limits(self.source_options, limit)
        return dict(self._call("latest", start=start, max_blocks=max_blocks,
                               max_records=max_records))

    def getDefaultReadLimit(self) -> ReadLimit:
        opts = self.source_options
        if opts.max_records_per_trigger is not None:
            return ReadMaxRows(opts.max_records_per_trigger)
        if opts.max_blocks_per_trigger is not None:
            return ReadMaxFiles(opts.max_blocks_per_trigger)
        return ReadAllAvailable()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        plan = self._call("partitions", start=start, end=end)
        return [BlockPartition([(int(s), str(b), dict(h)) for s, b, h in group],
                               plan["bootstrap_servers"], dict(plan["kafka_settings"]))
                for group in plan["partitions"]]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, BlockPartition)
        opts = self.source_options
        return read_rows(partition.blocks, partition.bootstrap_servers,
                         partition.kafka_settings, opts.decode, opts.keyed)

    def commit(self, end: dict) -> None:
        self._call("commit", end=end)

    def stop(self) -> None:
        if self._client is not None:
            try:
                self._call("stop")
            finally:
                self._client.close()


class WalstreamDataSource(DataSource):
    """``format("walstream")``; :func:`data_source_class` gives the registered one."""

    #: The source service's address file (:class:`walstream.structured.service.SourceService`).
    service_file = ""

    @classmethod
    def name(cls) -> str:
        return "walstream"

    def schema(self) -> str:
        return schema_ddl(SourceOptions.parse(dict(self.options)))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        raw = {str(k): str(v) for k, v in dict(self.options).items()}
        return WalstreamStreamReader(SourceOptions.parse(raw), raw, self.service_file)


def data_source_class(service_file: str) -> type[WalstreamDataSource]:
    """The class to register: :class:`WalstreamDataSource` bound to this driver's
    service. Made here, in a function, so that Spark's pickler ships it by value
    with the file's path to the reader's process."""

    class BoundWalstreamDataSource(WalstreamDataSource):
        pass

    BoundWalstreamDataSource.service_file = service_file
    return BoundWalstreamDataSource
