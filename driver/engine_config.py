"""EngineConfig: what a StreamingEngine is built from, and how a Spark conf
(``spark.streaming.*`` and ``spark.walstream.*``) maps onto it.

A config is checked when it is made (``__post_init__``): a bad batch interval,
app id, block size or allocation retry setting raises ConfigError there, before
any engine is built from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from walstream.driver.dstream.block_rdd import max_partitions_from_conf
from walstream.driver.durations import conf_time_ms
from walstream.driver.ha.ha_conf import HaConfig
from walstream.driver.receiver_tracker.endpoint_conf import (
    LOOPBACK,
    EndpointTls,
    endpoint_addresses,
    endpoint_tls,
    spark_auth_secret,
)
from walstream.driver.receiver_tracker.receiver_conf import (
    check_max_block_bytes,
    max_block_bytes_from_conf,
)
from walstream.driver.scheduler.job_generator import (
    DEFAULT_ALLOCATE_BACKOFF_MS,
    DEFAULT_ALLOCATE_RETRIES,
)
from walstream.driver.scheduler.wal_conf import wal_options_from_conf
from walstream.driver.ui.status_server import ui_address
from walstream.errors import ConfigError
from walstream.receiver.block_generator import BlockGeneratorConfig
from walstream.rpc.auth import EndpointCredentials

#: Retries of a batch whose driver-side inputs (a direct stream's offset probe)
#: failed with a retriable error, and the first wait between them in ms (doubling);
#: then the context stops and awaitTermination raises the error.
CONF_ALLOCATE_RETRIES = "spark.walstream.generator.allocateRetries"
CONF_ALLOCATE_BACKOFF = "spark.walstream.generator.allocateRetryBackoff"
CONF_METRICS_ENABLED = "spark.walstream.metrics.enabled"


@dataclass(frozen=True)
class EngineConfig:
    """``app_id`` names the WALs (``<app_id>-driver``, ``<app_id>-receiver-<n>``), so a
    restarted driver with the same id finds its logs again."""

    app_id: str
    batch_interval_ms: int
    bootstrap_servers: str
    remember_ms: int = 0
    concurrent_jobs: int = 1
    block_interval_ms: int = 200
    block_queue_size: int = 10
    max_rate: float = 0.0
    backpressure: bool = False
    backpressure_initial_rate: float = 0.0
    pid: dict[str, str] = field(default_factory=dict)
    # What receivers dial, and what the endpoint listens on ("": endpoint_host);
    # driver/receiver_tracker/endpoint_conf.py says how a Spark conf sets them.
    endpoint_host: str = LOOPBACK  # from_spark_conf: the conf's (endpoint_conf.py)
    endpoint_port: int = 0
    endpoint_bind_host: str = ""
    relaunch_delay_s: float = 1.0
    # Its ``client_config`` is the application's Kafka settings, secrets included.
    wal_options: dict[str, Any] = field(default_factory=dict, repr=False)
    allocate_retries: int = DEFAULT_ALLOCATE_RETRIES
    allocate_backoff_ms: int = DEFAULT_ALLOCATE_BACKOFF_MS
    max_block_bytes: int = BlockGeneratorConfig.max_block_bytes
    # The application secret the endpoint's keys derive from (Spark's, when
    # spark.authenticate sets one; None: generated at start), and its TLS material.
    endpoint_secret: bytes | None = field(default=None, repr=False)
    endpoint_tls: EndpointTls | None = field(default=None, repr=False)
    # The status server (driver/ui/status_server.py): port -1 is none, 0 any free one;
    # ``status_dir`` holds its state file while it runs ("": none).
    ui_host: str = LOOPBACK
    ui_port: int = -1
    status_dir: str = ""
    # spark.walstream.metrics.enabled=false: no metrics listener, no metered WAL and
    # no status server (the baseline of what the metrics cost).
    metrics_enabled: bool = True
    # spark.walstream.ha.enabled=true: a lease decides leader and hot standby
    # (driver/ha/high_availability.py); None: a driver on its own, as without HA.
    ha: HaConfig | None = None
    # spark.walstream.blockRdd.maxPartitions: the most partitions a receiver stream's
    # batch has (driver/dstream/block_rdd.py); None: Spark's default parallelism, 0: one a block.
    block_rdd_max_partitions: int | None = None

    def __post_init__(self) -> None:
        check_max_block_bytes(self.max_block_bytes)
        if self.batch_interval_ms <= 0:
            raise ConfigError("batch interval must be > 0")
        if not self.app_id:
            raise ConfigError("app_id must not be empty")
        if self.allocate_retries < 0 or self.allocate_backoff_ms < 0:
            raise ConfigError(f"{CONF_ALLOCATE_RETRIES} and {CONF_ALLOCATE_BACKOFF} must "
                              "not be negative")

    @classmethod
    def from_spark_conf(cls, conf: dict[str, str], **kw: Any) -> EngineConfig:
        """Spark's streaming conf names (spark.streaming.*) mapped onto the engine."""
        def ms(key: str, default: int) -> int:
            raw = conf.get(key)
            return default if raw is None else conf_time_ms(raw, key, bare_unit_ms=1)

        kw.setdefault("concurrent_jobs", int(conf.get("spark.streaming.concurrentJobs", 1)))
        kw.setdefault("block_interval_ms", ms("spark.streaming.blockInterval", 200))
        kw.setdefault("block_queue_size", int(conf.get("spark.streaming.blockQueueSize", 10)))
        kw.setdefault("max_rate", float(conf.get("spark.streaming.receiver.maxRate", 0)))
        kw.setdefault("backpressure", conf.get("spark.streaming.backpressure.enabled",
                                               "false").lower() == "true")
        kw.setdefault("backpressure_initial_rate",
                      float(conf.get("spark.streaming.backpressure.initialRate", 0)))
        kw.setdefault("pid", {k: v for k, v in conf.items()
                              if k.startswith("spark.streaming.backpressure.pid.")})
        kw.setdefault("allocate_retries",
                      int(conf.get(CONF_ALLOCATE_RETRIES, DEFAULT_ALLOCATE_RETRIES)))
        kw.setdefault("allocate_backoff_ms",
                      ms(CONF_ALLOCATE_BACKOFF, DEFAULT_ALLOCATE_BACKOFF_MS))
        kw.setdefault("wal_options", wal_options_from_conf(conf))  # also `walstream inspect`'s
        addresses = endpoint_addresses(conf)
        kw.setdefault("endpoint_host", addresses.advertised_host)
        kw.setdefault("endpoint_bind_host", addresses.bind_host)
        kw.setdefault("endpoint_port", addresses.port)
        kw.setdefault("max_block_bytes",
                      max_block_bytes_from_conf(conf, BlockGeneratorConfig.max_block_bytes))
        kw.setdefault("endpoint_secret", spark_auth_secret(conf))
        kw.setdefault("endpoint_tls", endpoint_tls(conf))
        ui = ui_address(conf)
        kw.setdefault("ui_host", ui[0] if ui else LOOPBACK)
        kw.setdefault("ui_port", ui[1] if ui else -1)
        kw.setdefault("metrics_enabled",
                      conf.get(CONF_METRICS_ENABLED, "true").strip().lower() != "false")
        kw.setdefault("block_rdd_max_partitions", max_partitions_from_conf(conf))
        kw.setdefault("ha", HaConfig.from_spark_conf(conf, str(kw.get("app_id", ""))))
        return cls(**kw)

    def endpoint_credentials(self, epoch: int = 0) -> EndpointCredentials:
        """The endpoint's keys: derived from :attr:`endpoint_secret` for this
        application's id (and, above epoch 0, its lease epoch: the receivers of an
        earlier leader hold keys the new leader's endpoint refuses), or from a secret
        generated now (one per engine start)."""
        if self.endpoint_secret:
            context = self.app_id if epoch == 0 else f"{self.app_id}#epoch{epoch}"
            return EndpointCredentials.from_secret(self.endpoint_secret, context)
        return EndpointCredentials.generate()

    def generator_config(self) -> BlockGeneratorConfig:
        """Every receiver's block generator settings."""
        return BlockGeneratorConfig(self.block_interval_ms, self.block_queue_size,
                                    max_block_bytes=self.max_block_bytes)
