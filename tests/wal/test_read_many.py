"""WalReader.read_many on the session's broker: consecutive records (chunked ones
too) are read on without a new assign, other topics by fresh consumers, and what it
read is what read() reads; nothing is left fetching afterwards."""

from __future__ import annotations

from collections.abc import Callable

from walstream.wal import KafkaWriteAheadLog
from walstream.wal.handle import RecordHandle
from walstream.wal.reader import WalReader

WalFactory = Callable[..., KafkaWriteAheadLog]


def test_read_many_reads_runs_gaps_and_other_topics(wal_factory: WalFactory,
                                                    bootstrap: str) -> None:
    a = wal_factory(chunk_bytes=1024, max_record_bytes=1024 * 1024)
    b = wal_factory()
    big = bytes(range(256)) * 20  # 5 chunks
    data_a = [b"a0", big, b"a2", b"a3", b"a4"]
    handles_a = [a.write(d, 10 + i) for i, d in enumerate(data_a)]
    data_b = [b"b0", b"b1"]
    handles_b = [b.write(d, 20 + i) for i, d in enumerate(data_b)]
    assert handles_a[2].offset == handles_a[1].offset + handles_a[1].chunks == 6

    reader = WalReader(bootstrap, 20.0)
    try:
        # A run, a chunked record inside it, a gap (a3 left out), another topic,
        # then back to the first.
        wanted: list[RecordHandle] = [*handles_a[:3], handles_a[4], *handles_b, handles_a[0]]
        got = list(reader.read_many(wanted))
        assert [d for d, _ in got] == [*data_a[:3], data_a[4], *data_b, data_a[0]]
        assert [t for _, t in got] == [10, 11, 12, 14, 20, 21, 10]
        assert [reader.read(h)[0] for h in wanted] == [d for d, _ in got]
        for consumer in (reader._consumer, reader._slow_consumer):
            assert consumer is None or consumer.assignment() == []
        assert reader._left_at is None

        # Stopped half way (a task whose consumer of the items stopped early):
        # the next read still starts where its own handle says.
        partial = reader.read_many(handles_a)
        assert next(partial)[0] == data_a[0]
        partial.close()
        assert reader.read(handles_a[3])[0] == data_a[3]
    finally:
        reader.close()
