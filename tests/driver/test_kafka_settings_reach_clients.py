"""The application's Kafka settings reach every Kafka client the project creates.

Each test builds one client the way the product does and records the librdkafka
configuration it is created with (the client class is replaced by a recorder
that stops right there, so no broker is needed). The end-to-end proof, a whole
app behind a broker gate that refuses clients without the setting, is
``integration_tests/test_kafka_settings_gate.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.checkpoint.helpers import make_data
from walstream.driver.dstream import block_rdd as block_rdd_module
from walstream.driver.dstream import direct_stream
from walstream.driver.dstream.checkpoint_inspect import inspect_checkpoint
from walstream.driver.scheduler.wal_conf import kafka_settings_of, wal_options_from_conf
from walstream.driver.sink import kafka_sink
from walstream.kafka_settings import REDACTED
from walstream.receiver.kafka_receiver import KafkaReceiver
from walstream.wal import epoch_links, kafka_log, reader
from walstream.wal.kafka_log import KafkaWriteAheadLog

SETTINGS = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": "app", "sasl.password": "s3cret"}
CONF = {"spark.walstream.kafka." + k: v for k, v in SETTINGS.items()}
HANDLE = {"topic": "walstream.wal.app-receiver-0--0", "partition": 0, "offset": 0}


class ClientCreatedError(Exception):
    """Raised by a recorder once the client's configuration is recorded."""


class Recorder:
    """Stands in for Producer, Consumer and AdminClient: records each configuration."""

    def __init__(self) -> None:
        self.confs: list[dict[str, Any]] = []

    def __call__(self, conf: dict[str, Any]) -> Any:
        self.confs.append(dict(conf))
        raise ClientCreatedError(conf.get("group.id") or "client")

    def only(self) -> dict[str, Any]:
        assert len(self.confs) == 1, self.confs
        return self.confs[0]


def _has_settings(conf: dict[str, Any]) -> None:
    missing = {k: v for k, v in SETTINGS.items() if conf.get(k) != v}
    assert not missing, f"settings missing from {conf}: {missing}"


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def test_conf_keys_become_every_wal_clients_client_config() -> None:
    assert wal_options_from_conf(CONF)["client_config"] == SETTINGS
    assert kafka_settings_of(wal_options_from_conf(CONF)) == SETTINGS
    assert "client_config" not in wal_options_from_conf({"spark.app.name": "x"})


def test_wal_producer(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_log, "Producer", recorder)
    wal = KafkaWriteAheadLog("broker:9092", "app-driver", **wal_options_from_conf(CONF))
    with pytest.raises(ClientCreatedError):
        wal._producer_client()
    conf = recorder.only()
    _has_settings(conf)
    assert conf["acks"] == "all" and conf["enable.idempotence"] is True


def test_wal_admin_client(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_log, "AdminClient", recorder)
    wal = KafkaWriteAheadLog("broker:9092", "app-driver", **wal_options_from_conf(CONF))
    with pytest.raises(ClientCreatedError):
        wal._admin_client()
    _has_settings(recorder.only())


def test_wal_readers(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "Consumer", recorder)
    wal = KafkaWriteAheadLog("broker:9092", "app-driver", **wal_options_from_conf(CONF))
    for slow in (False, True):
        with pytest.raises(ClientCreatedError):
            wal._reader._get_consumer(slow)
    assert len(recorder.confs) == 2
    for conf in recorder.confs:
        _has_settings(conf)
        assert conf["auto.offset.reset"] == "error"  # a reader's own rule stays


def test_wal_settings_cannot_weaken_durability() -> None:
    from walstream.errors import ConfigError

    with pytest.raises(ConfigError, match="client_config may not override"):
        KafkaWriteAheadLog("broker:9092", "app-driver", client_config={"acks": "1"})


def test_block_reads_in_executor_tasks(recorder: Recorder,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "Consumer", recorder)
    part = {"handle": HANDLE, "lo": 0, "hi": None}
    rows: Iterator[Any] = block_rdd_module._read_blocks("broker:9092", 5.0, SETTINGS, [[part]])
    with pytest.raises(ClientCreatedError):
        next(rows)
    _has_settings(recorder.only())


def test_direct_stream_task_reads_take_settings_and_kafka_params(
        recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct_stream, "Consumer", recorder)
    params = {**SETTINGS, "fetch.min.bytes": "7"}
    rows = direct_stream._read_range("broker:9092", params, None, None, None,
                                     iter([("t", 0, 0, 5)]))
    with pytest.raises(ClientCreatedError):
        next(rows)
    conf = recorder.only()
    _has_settings(conf)
    assert conf["fetch.min.bytes"] == "7"
    assert conf["auto.offset.reset"] == "error" and conf["enable.auto.commit"] is False


def test_direct_stream_consumer_conf_order() -> None:
    """Defaults, then the application's settings, then kafkaParams (minus what the
    consumer sets itself), then the consumer's own rules."""
    conf = direct_stream.consumer_conf(
        "broker:9092", {"security.protocol": "SSL", "client.id": "app"},
        {"client.id": "stream", "auto.offset.reset": "smallest", "group.id": "theirs",
         "bootstrap.servers": "elsewhere:1"},
        {"group.id": "walstream-direct-probe"})
    assert conf["bootstrap.servers"] == "broker:9092"
    assert conf["security.protocol"] == "SSL"
    assert conf["client.id"] == "stream"
    assert conf["group.id"] == "walstream-direct-probe"
    assert "auto.offset.reset" not in conf


class _Engine:
    class config:  # noqa: N801 - stands for EngineConfig
        wal_options = wal_options_from_conf(CONF)


class _Context:
    _engine = _Engine()


def test_direct_stream_driver_probe(recorder: Recorder,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(direct_stream, "Consumer", recorder)
    stream = direct_stream.DirectKafkaInputDStream.__new__(direct_stream.DirectKafkaInputDStream)
    stream.__setstate__({"_ssc": _Context(), "bootstrap": "broker:9092",
                         "params": {"auto.offset.reset": "smallest"}, "_consumer": None,
                         "_closed": False, "stream_id": 0})
    with pytest.raises(ClientCreatedError):
        stream._probe()
    conf = recorder.only()
    _has_settings(conf)
    assert conf["group.id"] == "walstream-direct-probe"


def test_kafka_receiver(recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    from walstream.receiver import kafka_receiver

    monkeypatch.setattr(kafka_receiver, "Consumer", recorder)
    rcv = KafkaReceiver("broker:9092", "group", {"t": 1}, {"client.id": "mine"})
    rcv._use_kafka_settings(SETTINGS)  # what the receiver task does before onStart
    with pytest.raises(ClientCreatedError):
        rcv.onStart()
    conf = recorder.only()
    _has_settings(conf)
    assert conf["client.id"] == "mine" and conf["enable.auto.commit"] is False


def test_a_receivers_settings_are_never_pickled() -> None:
    import pickle

    rcv = KafkaReceiver("broker:9092", "group", {"t": 1})
    rcv._use_kafka_settings(SETTINGS)
    again = pickle.loads(pickle.dumps(rcv))
    assert again.kafka_settings == {}
    assert b"s3cret" not in pickle.dumps(rcv)


def test_kafka_sink_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    import confluent_kafka

    recorder = Recorder()
    monkeypatch.setattr(confluent_kafka, "Producer", recorder)
    sink = kafka_sink.KafkaSink("broker:9092", "out", producer_config={"linger.ms": 1},
                                writer="w")
    with pytest.raises(ClientCreatedError):
        sink.write_partition(1000, 0, iter([b"x"]), kafka_settings=SETTINGS)
    conf = recorder.only()
    _has_settings(conf)
    assert conf["linger.ms"] == 1 and conf["acks"] == "all"


def test_kafka_sink_takes_the_running_contexts_settings() -> None:
    class Conf:
        def getAll(self) -> list[tuple[str, str]]:  # noqa: N802
            return [*CONF.items(), ("spark.app.name", "x")]

    class Context:
        def getConf(self) -> Conf:  # noqa: N802
            return Conf()

    assert kafka_sink.app_kafka_settings(Context()) == SETTINGS


def test_read_exactly_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import confluent_kafka

    recorder = Recorder()
    monkeypatch.setattr(confluent_kafka, "Consumer", recorder)
    with pytest.raises(ClientCreatedError):
        list(kafka_sink.read_exactly_once("broker:9092", "out", kafka_conf=SETTINGS))
    _has_settings(recorder.only())


def test_walstream_inspect(recorder: Recorder, monkeypatch: pytest.MonkeyPatch,
                           tmp_path: Any) -> None:
    """The checkpoint holds no secret: inspect's own settings open the WAL, and its
    output shows the settings with the password redacted."""
    from walstream.checkpoint.files import write_checkpoint

    monkeypatch.setattr(reader, "Consumer", recorder)
    monkeypatch.setattr(kafka_log, "AdminClient", recorder)
    # The driver WAL is an epoch chain: its view lists the chain's topics first.
    monkeypatch.setattr(epoch_links, "AdminClient", recorder)
    write_checkpoint(tmp_path / "cp", make_data(3000, conf={"spark.app.name": "x"}))
    with pytest.raises(ClientCreatedError):
        inspect_checkpoint(str(tmp_path / "cp"), "broker:9092", kafka_conf=SETTINGS)
    _has_settings(recorder.confs[0])


def test_walstream_inspect_output_redacts_secrets(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Any) -> None:
    from walstream.checkpoint.files import write_checkpoint
    from walstream.driver.dstream import checkpoint_inspect

    class Tracker:  # the replay, without a broker
        corrupt_events = 0
        fence_epoch = 0
        fenced_events = 0

        def __init__(self, ids: list[int], wal: Any, **options: Any) -> None:
            self.wal = wal

        def state(self) -> Any:
            class State:
                def to_json(self) -> dict[str, Any]:
                    return {"unallocated": {}, "allocated": {}}
            return State()

        def streams_with_positions(self) -> list[int]:
            return []

        def stop(self) -> None:
            self.wal.close()

    monkeypatch.setattr(checkpoint_inspect, "ReceivedBlockTracker", Tracker)
    write_checkpoint(tmp_path / "cp", make_data(3000, conf={"spark.app.name": "x"}))
    out = inspect_checkpoint(str(tmp_path / "cp"), "broker:9092", kafka_conf=SETTINGS)
    shown = out["wal_options"]["client_config"]
    assert shown["sasl.password"] == REDACTED
    assert shown["sasl.username"] == "app"
    assert "s3cret" not in checkpoint_inspect.json.dumps(out)


def test_no_config_object_shows_a_secret_in_its_repr() -> None:
    from walstream.driver.engine_config import EngineConfig
    from walstream.receiver.task import ReceiverTaskSpec

    options = wal_options_from_conf(CONF)
    wal = KafkaWriteAheadLog("broker:9092", "app-driver", **options)
    engine_cfg = EngineConfig.from_spark_conf(CONF, app_id="app", batch_interval_ms=1000,
                                              bootstrap_servers="broker:9092")
    spec = ReceiverTaskSpec(0, KafkaReceiver("broker:9092", "g", {"t": 1}), "driver:1",
                            "broker:9092", "app-receiver-0", wal_options=options)
    for shown in (repr(wal.config), repr(engine_cfg), repr(spec)):
        assert "s3cret" not in shown, shown
    assert engine_cfg.wal_options["client_config"] == SETTINGS
