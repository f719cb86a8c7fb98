"""Receiver settings from the Spark conf, as the engine hands them to its receivers."""

from __future__ import annotations

import pytest

from walstream.driver.engine_config import EngineConfig
from walstream.errors import ConfigError
from walstream.receiver.block_generator import MAX_BLOCK_BYTES, BlockGeneratorConfig

KEY = "spark.walstream.receiver.maxBlockBytes"


def _engine(conf: dict[str, str]) -> EngineConfig:
    return EngineConfig.from_spark_conf(conf, app_id="a", batch_interval_ms=1000,
                                        bootstrap_servers="x:1")


@pytest.mark.parametrize(("raw", "expected"), [
    ("1048576", 1048576), ("4096b", 4096), ("16k", 16 * 1024), ("32m", 32 * 1024 * 1024),
    (" 8MB ", 8 * 1024 * 1024), ("248m", MAX_BLOCK_BYTES),
])
def test_max_block_bytes_conf_key_reaches_the_receivers_generator_config(
    raw: str, expected: int,
) -> None:
    cfg = _engine({KEY: raw, "spark.streaming.blockInterval": "50ms"})
    gen = cfg.generator_config()
    assert gen.max_block_bytes == expected
    assert gen.block_interval_ms == 50  # the other receiver settings are kept


def test_without_the_key_receivers_keep_the_generator_default() -> None:
    assert _engine({}).generator_config() == BlockGeneratorConfig(200, 10)


@pytest.mark.parametrize(
    "raw", ["0", "-5", "lots", "12q", "", f"{MAX_BLOCK_BYTES + 1}", "1g", "1t"])
def test_an_invalid_max_block_bytes_is_refused_naming_the_key_and_the_limit(raw: str) -> None:
    with pytest.raises(ConfigError, match=KEY.replace(".", r"\.")) as info:
        _engine({KEY: raw})
    assert str(MAX_BLOCK_BYTES) in str(info.value)


def test_engine_config_built_directly_validates_max_block_bytes() -> None:
    with pytest.raises(ConfigError, match="max_block_bytes"):
        EngineConfig("a", 1000, "x:1", max_block_bytes=0)
