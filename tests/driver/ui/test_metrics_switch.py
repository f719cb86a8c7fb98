"""spark.walstream.metrics.enabled=false: no metrics listener, no metered WAL, no
status server (the baseline the metrics' cost is measured against)."""

from __future__ import annotations

from walstream.driver.engine import StreamingEngine
from walstream.driver.engine_config import CONF_METRICS_ENABLED, EngineConfig
from walstream.driver.ui.metrics import EngineMetrics


def _config(conf: dict[str, str]) -> EngineConfig:
    return EngineConfig.from_spark_conf(conf, app_id="m", batch_interval_ms=100,
                                        bootstrap_servers="127.0.0.1:1")


def test_metrics_are_on_by_default_and_a_conf_key_turns_them_off() -> None:
    assert _config({}).metrics_enabled
    assert _config({CONF_METRICS_ENABLED: "true"}).metrics_enabled
    assert not _config({CONF_METRICS_ENABLED: "false"}).metrics_enabled
    assert not _config({CONF_METRICS_ENABLED: " FALSE "}).metrics_enabled


def test_an_engine_without_metrics_puts_no_metrics_listener_on_its_bus() -> None:
    on = StreamingEngine(None, _config({}), {}, lambda t: [])
    off = StreamingEngine(None, _config({CONF_METRICS_ENABLED: "false"}), {}, lambda t: [])
    try:
        assert any(isinstance(x, EngineMetrics) for x in on.bus._listeners)
        assert not any(isinstance(x, EngineMetrics) for x in off.bus._listeners)
    finally:
        on.stop()
        off.stop()
