"""PySpark's StreamingListenerTests: batch infos in order, with PySpark's shapes."""

from __future__ import annotations

import itertools

import pytest

from tests.api.helpers import BATCH, TIMEOUT, BatchInfoCollector, add_input_stream, collect
from walstream.driver import StreamingContext
from walstream.testing import wait_until

pytestmark = pytest.mark.spark


def test_batch_info_reports(ssc: StreamingContext) -> None:
    collector = BatchInfoCollector()
    ssc.addStreamingListener(collector)
    stream = ssc.queueStream([[1], [2], [3], [4]]).map(int)
    result = collect(ssc, stream, 4, block=False)
    ssc.start()
    wait_until(lambda: len(collector.batchInfosCompleted) >= 4 and len(result) >= 4,
               TIMEOUT, "4 completed batches", ssc=ssc)
    ssc.stop(False)  # delivers the queued events
    assert result == [[1], [2], [3], [4]]
    assert len(collector.streamingStarted) == 1

    submitted = collector.batchInfosSubmitted
    assert len(submitted) >= 4
    for info in submitted:
        assert info.batchTime() > 0
        assert info.submissionTime() >= info.batchTime()
        for op_id, op in info.outputOperationInfos().items():
            assert op.id() == op_id >= 0
            assert op.batchTime() == info.batchTime()
            assert op.name() and op.description()
            assert op.failureReason() is None
        # Not started yet: no delays (-1, as PySpark reports them).
        assert info.schedulingDelay() == -1
        assert info.processingDelay() == -1
        assert info.totalDelay() == -1
        assert info.numRecords() == 0  # queue streams report no input records (as Spark)

    assert len(collector.batchInfosStarted) >= 4
    for info in collector.batchInfosStarted:
        assert info.schedulingDelay() >= 0
        assert info.processingDelay() == -1
        assert info.totalDelay() == -1

    completed = collector.batchInfosCompleted
    assert len(completed) >= 4
    for info in completed:
        assert info.schedulingDelay() >= 0
        assert info.processingDelay() >= 0
        assert info.totalDelay() >= 0
        assert info.totalDelay() == info.schedulingDelay() + info.processingDelay()
        assert info.numRecords() == 0
        for op in info.outputOperationInfos().values():
            assert op.startTime() <= op.endTime()
            assert op.failureReason() is None
    times = [i.batchTime() for i in completed]
    assert times == sorted(times)
    assert {b - a for a, b in itertools.pairwise(times)} == {int(BATCH * 1000)}


def test_batch_info_accessors_have_pyspark_shapes(ssc: StreamingContext) -> None:
    collector = BatchInfoCollector()
    ssc.addStreamingListener(collector)
    add_input_stream(ssc)
    ssc.start()
    wait_until(lambda: len(collector.batchInfosCompleted) >= 1, TIMEOUT, "a batch", ssc=ssc)
    ssc.stop(False)
    submitted = collector.batchInfosSubmitted[0]
    assert submitted.schedulingDelay() == -1  # PySpark's StreamingListenerTests
    info = collector.batchInfosCompleted[0]
    assert info.batchTime().milliseconds() >= 0
    assert isinstance(info.streamIdToInputInfo(), dict)
    for op in info.outputOperationInfos().values():
        assert op.batchTime().milliseconds() >= 0
        assert op.id() >= 0
        assert op.name() is not None
        assert op.description() is not None


def test_listener_added_after_start_hears_later_batches(ssc: StreamingContext) -> None:
    add_input_stream(ssc)
    ssc.start()
    collector = BatchInfoCollector()
    ssc.addStreamingListener(collector)
    wait_until(lambda: len(collector.batchInfosCompleted) >= 2, TIMEOUT, "2 batches", ssc=ssc)
    ssc.stop(False)
