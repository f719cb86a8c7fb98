"""One SparkContext per test module; streaming contexts per test, always stopped.

The SparkContext's conf names the session's broker
(``spark.walstream.kafka.bootstrapServers``), so no StreamingContext ever starts
a broker of its own. As PySpark's ``PySparkStreamingTestCase``, it sets
``spark.default.parallelism`` to 1 (tests that need more partitions ask for them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.api.helpers import BATCH
from walstream.driver import StreamingContext
from walstream.driver.app_conf import CONF_BOOTSTRAP
from walstream.driver.spark import create_spark_context
from walstream.testing.fixtures import KafkaBroker


@pytest.fixture(scope="module")
def sc(request: pytest.FixtureRequest, broker: KafkaBroker) -> Iterator[Any]:
    context = create_spark_context(f"api-{request.module.__name__.rsplit('.', 1)[-1]}",
                                   "local[3]", {CONF_BOOTSTRAP: broker.bootstrap,
                                                "spark.default.parallelism": "1"})
    assert context.getConf().get(CONF_BOOTSTRAP) == broker.bootstrap, \
        "a SparkContext from elsewhere is still running"
    try:
        yield context
    finally:
        active = StreamingContext.getActive()
        if active is not None:
            active.stop(stopSparkContext=False)
        context.stop()


@pytest.fixture
def make_ssc(sc: Any) -> Iterator[Callable[..., StreamingContext]]:
    """``make_ssc(batch=BATCH)``: a new StreamingContext, stopped (not its sc) after the test."""
    made: list[StreamingContext] = []

    def make(batch: float = BATCH) -> StreamingContext:
        ssc = StreamingContext(sc, batch)
        made.append(ssc)
        return ssc

    yield make
    for ssc in made:
        ssc.stop(stopSparkContext=False)
    assert StreamingContext.getActive() is None


@pytest.fixture
def ssc(make_ssc: Callable[..., StreamingContext]) -> StreamingContext:
    return make_ssc(BATCH)
