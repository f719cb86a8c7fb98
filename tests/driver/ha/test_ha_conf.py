"""spark.walstream.ha.*: off unless enabled; timings parsed as Spark times and checked."""

from __future__ import annotations

import pytest

from walstream.driver.engine_config import EngineConfig
from walstream.driver.ha.ha_conf import HaConfig
from walstream.errors import ConfigError


def test_off_unless_enabled() -> None:
    assert HaConfig.from_spark_conf({}, "app") is None
    assert HaConfig.from_spark_conf({"spark.walstream.ha.enabled": "false"}, "app") is None
    cfg = EngineConfig.from_spark_conf({}, app_id="a", batch_interval_ms=1000,
                                       bootstrap_servers="b:1")
    assert cfg.ha is None


def test_enabled_with_defaults_and_spark_times() -> None:
    ha = HaConfig.from_spark_conf({"spark.walstream.ha.enabled": "TRUE"}, "app-1")
    assert ha == HaConfig("walstream.lease.app-1", 1.0, 0.2, 60.0)
    ha = HaConfig.from_spark_conf({"spark.walstream.ha.enabled": "true",
                                   "spark.walstream.ha.leaseTimeout": "2s",
                                   "spark.walstream.ha.renewPeriod": "250ms",
                                   "spark.walstream.ha.takeoverTimeout": "1min",
                                   "spark.walstream.ha.leaseTopic": "my.lease"}, "x")
    assert ha == HaConfig("my.lease", 2.0, 0.25, 60.0)
    assert ha.output_margin == 0.5  # a quarter of the lease timeout
    ha = HaConfig.from_spark_conf({"spark.walstream.ha.enabled": "true",
                                   "spark.walstream.ha.outputMargin": "300ms"}, "x")
    assert ha is not None and ha.output_margin == 0.3
    cfg = EngineConfig.from_spark_conf({"spark.walstream.ha.enabled": "true"}, app_id="a",
                                       batch_interval_ms=1000, bootstrap_servers="b:1")
    assert cfg.ha is not None and cfg.ha.lease_topic == "walstream.lease.a"


@pytest.mark.parametrize("conf", [
    {"spark.walstream.ha.enabled": "yes"},
    {"spark.walstream.ha.enabled": "true", "spark.walstream.ha.leaseTimeout": "300ms"},
    {"spark.walstream.ha.enabled": "true", "spark.walstream.ha.renewPeriod": "soon"},
    {"spark.walstream.ha.enabled": "true", "spark.walstream.ha.takeoverTimeout": "0s"},
    {"spark.walstream.ha.enabled": "true", "spark.walstream.ha.outputMargin": "0s"},
    # A leader renewing on time has at least leaseTimeout - renewPeriod (0.8 s) left.
    {"spark.walstream.ha.enabled": "true", "spark.walstream.ha.outputMargin": "800ms"},
])
def test_bad_settings_are_refused(conf: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        HaConfig.from_spark_conf(conf, "app")


def test_endpoint_keys_differ_per_epoch_with_a_spark_secret() -> None:
    cfg = EngineConfig.from_spark_conf(
        {"spark.authenticate": "true", "spark.authenticate.secret": "s3cret"}, app_id="a",
        batch_interval_ms=1000, bootstrap_servers="b:1")
    zero, one, two = (cfg.endpoint_credentials(e) for e in (0, 1, 2))
    assert zero.call_token == cfg.endpoint_credentials(0).call_token
    assert len({zero.call_token, one.call_token, two.call_token}) == 3
