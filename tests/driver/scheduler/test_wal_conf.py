"""The application's WAL options from its Spark conf, as the engine reads them."""

from __future__ import annotations

import pytest

from walstream.driver.engine_config import EngineConfig
from walstream.driver.scheduler.wal_conf import (
    COMPRESSION_KEY,
    TOPIC_PREFIX_KEY,
    wal_options_from_conf,
)
from walstream.errors import ConfigError
from walstream.wal.config import KafkaWalConfig


def _engine_wal_options(conf: dict[str, str]) -> dict[str, object]:
    return EngineConfig.from_spark_conf(conf, app_id="a", batch_interval_ms=1000,
                                        bootstrap_servers="x:1").wal_options


def test_engine_opens_its_wals_with_the_topic_prefix_of_the_conf() -> None:
    conf = {TOPIC_PREFIX_KEY: "team-a.wal."}
    assert _engine_wal_options(conf) == wal_options_from_conf(conf) == \
        {"topic_prefix": "team-a.wal."}
    KafkaWalConfig(**wal_options_from_conf(conf))  # a valid WAL option


@pytest.mark.parametrize("conf", [{}, {TOPIC_PREFIX_KEY: ""}])
def test_no_prefix_in_the_conf_keeps_the_wal_default(conf: dict[str, str]) -> None:
    assert _engine_wal_options(conf) == {}


def test_the_conf_names_the_wal_codec() -> None:
    conf = {COMPRESSION_KEY: " ZSTD "}
    assert _engine_wal_options(conf) == wal_options_from_conf(conf) == {"compression": "zstd"}
    assert KafkaWalConfig(**wal_options_from_conf(conf)).compression == "zstd"
    assert KafkaWalConfig().compression == "lz4"
    assert _engine_wal_options({}) == {}


def test_an_unknown_codec_is_named() -> None:
    with pytest.raises(ConfigError, match="unknown compression 'brotli'"):
        KafkaWalConfig(**wal_options_from_conf({COMPRESSION_KEY: "brotli"}))
