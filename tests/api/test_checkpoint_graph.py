"""With checkpointing on, start() checks that the DStream graph can be pickled into
checkpoints, as Spark's does: a function that captures the SparkContext fails start()
with an error naming it; a queueStream (its RDDs live only in this driver) warns."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from walstream.checkpoint.errors import GraphNotCheckpointableError
from walstream.driver import StreamingContext

pytestmark = pytest.mark.spark


def test_transform_function_capturing_spark_context_fails_start_naming_it(
        ssc: StreamingContext, tmp_path: Any) -> None:
    """Spark's test_transform_function_serializer_failure."""
    sc = ssc.sparkContext
    ssc.checkpoint(str(tmp_path / "cp"))
    (tmp_path / "in").mkdir()

    def rdd_with_sc(rdd: Any) -> Any:
        return sc.parallelize([1]).union(rdd)  # the SparkContext cannot go to a checkpoint

    ssc.textFileStream(str(tmp_path / "in")).transform(rdd_with_sc).pprint()
    with pytest.raises(GraphNotCheckpointableError) as err:
        ssc.start()
    message = str(err.value)
    assert "rdd_with_sc" in message
    assert "SparkContext" in message
    assert StreamingContext.getActive() is None
    assert ssc._engine is None  # nothing was started
    assert err.value.function is not None and "rdd_with_sc" in err.value.function


def test_checkpointed_graph_of_picklable_functions_and_union_starts(
        ssc: StreamingContext, tmp_path: Any) -> None:
    """ssc.union's own function must not capture the SparkContext either."""
    ssc.checkpoint(str(tmp_path / "cp"))
    (tmp_path / "in").mkdir()
    a = ssc.textFileStream(str(tmp_path / "in"))
    ssc.union(a.map(str), a.map(len)).pprint()
    ssc.start()
    assert isinstance(ssc._pickled_graph(), bytes)


def test_checkpointed_queue_stream_starts_with_a_warning(
        ssc: StreamingContext, tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    """As Spark: a queueStream's RDDs cannot be checkpointed; start() warns and the
    checkpoints hold no graph (a restart calls setupFunc)."""
    ssc.checkpoint(str(tmp_path / "cp"))
    ssc.queueStream([[1]]).pprint()
    with caplog.at_level(logging.WARNING):
        ssc.start()
    assert "queueStream doesn't support checkpointing" in caplog.text
    assert ssc._graph_bytes is None
