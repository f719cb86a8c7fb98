"""The graph part of a checkpoint: what cannot load says why; conf recovery; fallbacks."""

from __future__ import annotations

import pickle
import sys
import threading
import types
from pathlib import Path
from typing import Any

import pytest

from walstream.checkpoint.data import CheckpointData
from walstream.checkpoint.errors import GraphLoadError
from walstream.checkpoint.files import read_latest, write_checkpoint
from walstream.driver.dstream.graph import DStreamGraph
from walstream.driver.dstream.graph_pickle import dumps_graph, loads_graph
from walstream.driver.dstream.recovery import recovered_conf


def _data(graph: bytes | None) -> CheckpointData:
    return CheckpointData(checkpoint_time_ms=2000, written_wall_ms=1, app_id="app",
                          batch_ms=1000, zero_time_ms=0, fingerprint="f",
                          graph_shape=("receiver:x#0()",), pending_times_ms=(2000,),
                          graph=graph)


def test_graph_round_trips_through_the_checkpoint_file(tmp_path: Path) -> None:
    graph = DStreamGraph(1000)
    graph.remember_ms = 5000
    blob = dumps_graph(graph)
    assert blob is not None
    write_checkpoint(tmp_path, _data(blob))
    got = read_latest(tmp_path)
    assert got is not None and got.graph == blob
    restored = loads_graph(got.graph)
    assert (restored.batch_ms, restored.remember_ms) == (1000, 5000)


def test_graph_of_code_that_is_gone_says_why_and_how_to_proceed() -> None:
    mod = types.ModuleType("walstream_vanished_user_code")
    exec("class Thing:\n    pass\n", mod.__dict__)
    sys.modules[mod.__name__] = mod
    try:
        blob = pickle.dumps(mod.Thing())
    finally:
        del sys.modules[mod.__name__]
    with pytest.raises(GraphLoadError) as err:
        loads_graph(blob)
    message = str(err.value)
    assert "walstream_vanished_user_code" in message  # the cause
    assert "spark.walstream.recovery.upgrade=true" in message  # the way on
    assert "delete the checkpoint directory" in message


def test_something_else_than_a_graph_is_refused() -> None:
    with pytest.raises(GraphLoadError, match="not a DStream graph"):
        loads_graph(pickle.dumps({"a": 1}))


def test_unpicklable_graph_gives_none_and_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    graph: Any = DStreamGraph(1000)
    graph.streams.append(threading.Lock())  # as a closure over a lock would
    assert dumps_graph(graph) is None
    assert "setupFunc" in caplog.text


def test_version_1_checkpoints_read_with_no_graph(tmp_path: Path) -> None:
    from walstream.checkpoint.data import CODEC

    data = _data(None)
    body = CODEC.encode({k: v for k, v in {
        "checkpoint_time_ms": 2000, "written_wall_ms": 1, "app_id": "app", "batch_ms": 1000,
        "zero_time_ms": 0, "fingerprint": "f", "graph_shape": list(data.graph_shape),
        "pending_times_ms": [2000], "state_rdds": [], "conf": {}}.items()}, version=1)
    import zlib

    blob = body + zlib.crc32(body).to_bytes(4, "big")
    assert CheckpointData.decode(blob) == data


def test_conf_recovery_takes_master_host_and_ports_from_the_new_environment() -> None:
    saved = {"spark.master": "local[2]", "spark.app.name": "wc", "spark.app.id": "local-1",
             "spark.executor.memory": "1g", "spark.ui.port": "4040"}
    new = {"spark.master": "spark://10.0.0.5:7077", "spark.driver.host": "10.0.0.9",
           "spark.executor.memory": "8g"}
    got = recovered_conf(saved, new)
    assert got["spark.master"] == "spark://10.0.0.5:7077"  # the new master
    assert got["spark.driver.host"] == "10.0.0.9"
    assert got["spark.executor.memory"] == "1g"  # the application's own settings stay
    assert got["spark.app.name"] == "wc"
    assert "spark.app.id" not in got  # a new application attempt
    assert got["spark.ui.port"] == "4040"  # not set anew: the saved one


def test_a_restored_context_forks_its_workers_from_the_preloading_daemon() -> None:
    assert recovered_conf({"spark.app.name": "wc"}, {})["spark.python.daemon.module"] \
        == "walstream.worker_daemon"
    own = {"spark.python.daemon.module": "pyspark.daemon"}
    assert recovered_conf(own, {})["spark.python.daemon.module"] == "pyspark.daemon"
