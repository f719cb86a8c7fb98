"""``spark.walstream.ha.*``: whether a driver runs highly available, and its lease timing.

With ``spark.walstream.ha.enabled=true`` the same application started twice, with
the same checkpoint directory and app id, gives a leader and a hot standby
(:mod:`walstream.driver.ha.high_availability`). Without it nothing changes: no
lease, the driver WAL keeps its plain name, and every record carries epoch 0.

* ``spark.walstream.ha.leaseTimeout`` (default ``1s``): how long a standby waits
  without a renewal before it claims the lease.
* ``spark.walstream.ha.renewPeriod`` (default ``200ms``): how often the leader renews;
  at least two renewals must fit in one timeout.
* ``spark.walstream.ha.takeoverTimeout`` (default ``60s``): the bound on each step
  of a takeover (fencing the sinks, reading the driver WAL to its end).
* ``spark.walstream.ha.outputMargin`` (default a quarter of ``leaseTimeout``): an
  output operation of a batch starts only while the lease stays valid at least this
  long; less than ``leaseTimeout`` minus ``renewPeriod``, which a leader renewing on
  time always has.
* ``spark.walstream.ha.leaseTopic`` (default ``walstream.lease.<appId>``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from walstream.driver.durations import conf_time_ms
from walstream.errors import ConfigError

CONF_ENABLED = "spark.walstream.ha.enabled"
CONF_LEASE_TIMEOUT = "spark.walstream.ha.leaseTimeout"
CONF_RENEW_PERIOD = "spark.walstream.ha.renewPeriod"
CONF_TAKEOVER_TIMEOUT = "spark.walstream.ha.takeoverTimeout"
CONF_LEASE_TOPIC = "spark.walstream.ha.leaseTopic"
CONF_OUTPUT_MARGIN = "spark.walstream.ha.outputMargin"


@dataclass(frozen=True)
class HaConfig:
    """A highly available driver's settings (see the module docstring)."""

    lease_topic: str
    lease_timeout_s: float = 1.0
    renew_period_s: float = 0.2
    takeover_timeout_s: float = 60.0
    #: None: a quarter of ``lease_timeout_s``.
    output_margin_s: float | None = None

    def __post_init__(self) -> None:
        if not self.lease_topic:
            raise ConfigError(f"{CONF_LEASE_TOPIC} must not be empty")
        if not 0 < self.renew_period_s * 2 <= self.lease_timeout_s:
            raise ConfigError(
                f"{CONF_RENEW_PERIOD} ({self.renew_period_s} s) must be positive and fit "
                f"twice in {CONF_LEASE_TIMEOUT} ({self.lease_timeout_s} s)")
        if self.takeover_timeout_s <= 0:
            raise ConfigError(f"{CONF_TAKEOVER_TIMEOUT} must be positive")
        if self.output_margin_s is None:
            object.__setattr__(self, "output_margin_s", self.lease_timeout_s / 4)
        assert self.output_margin_s is not None
        if not 0 < self.output_margin_s < self.lease_timeout_s - self.renew_period_s:
            raise ConfigError(
                f"{CONF_OUTPUT_MARGIN} ({self.output_margin_s} s) must be positive and under "
                f"{CONF_LEASE_TIMEOUT} minus {CONF_RENEW_PERIOD} "
                f"({self.lease_timeout_s - self.renew_period_s:.3f} s): a leader renewing on "
                "time must be able to run its outputs")

    @property
    def output_margin(self) -> float:
        """:attr:`output_margin_s`, resolved (seconds)."""
        assert self.output_margin_s is not None
        return self.output_margin_s

    @classmethod
    def from_spark_conf(cls, conf: Mapping[str, str], app_id: str) -> HaConfig | None:
        """The settings when ``spark.walstream.ha.enabled`` is true, else None."""
        enabled = conf.get(CONF_ENABLED, "false").strip().lower()
        if enabled not in ("true", "false"):
            raise ConfigError(f"{CONF_ENABLED} must be true or false, not {enabled!r}")
        if enabled == "false":
            return None

        def seconds(key: str, default_ms: int) -> float:
            raw = conf.get(key)
            return (default_ms if raw is None else conf_time_ms(raw, key, bare_unit_ms=1)) / 1000

        return cls(lease_topic=conf.get(CONF_LEASE_TOPIC) or f"walstream.lease.{app_id}",
                   lease_timeout_s=seconds(CONF_LEASE_TIMEOUT, 1000),
                   renew_period_s=seconds(CONF_RENEW_PERIOD, 200),
                   takeover_timeout_s=seconds(CONF_TAKEOVER_TIMEOUT, 60_000),
                   output_margin_s=(seconds(CONF_OUTPUT_MARGIN, 0)
                                    if conf.get(CONF_OUTPUT_MARGIN) is not None else None))
