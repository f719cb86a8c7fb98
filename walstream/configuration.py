"""Every setting a user can give walstream: Spark conf keys and environment variables.

This list is the source of ``docs/CONFIGURATION.md``
(``python -m walstream.configuration > docs/CONFIGURATION.md``);
``tests/walstream/test_configuration.py`` fails when the page differs from it, and
when a ``spark.walstream.*`` key or a ``WALSTREAM_*`` variable appears in the code
without being listed here. Options of classes (``KafkaWalConfig``,
``BlockGeneratorConfig``, ``SupervisorConfig``, ...) are arguments of a
constructor, documented where the class is.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    """One setting: ``name`` (a conf key, or a pattern such as
    ``spark.walstream.kafka.<librdkafka key>``), its default, and what it does."""

    name: str
    default: str
    meaning: str
    section: str


KAFKA = "Kafka"
DRIVER = "Driver and batches"
RECOVERY = "Checkpoints and recovery"
HA = "High availability"
ENDPOINT = "Receiver endpoint and status page"
SPARK = "Spark's own keys walstream reads"
ENV = "Environment variables"

SETTINGS: tuple[Setting, ...] = (
    Setting("spark.walstream.kafka.bootstrapServers", "unset (`KAFKA_BOOTSTRAP_SERVERS`)",
            "the Kafka cluster for the WALs and the Kafka API", KAFKA),
    Setting("spark.walstream.kafka.<librdkafka key>", "unset",
            "a setting of every Kafka client the app creates (`security.protocol`, "
            "`sasl.mechanisms`, `sasl.username`, `sasl.password`, `ssl.ca.location`, ...): "
            "WALs, block reads, receivers and direct streams (under their `kafkaParams`), "
            "`KafkaSink`, `read_exactly_once`. Secrets (keys with `password`, `secret`, "
            "`token`) are redacted and never written into checkpoints; "
            "`<secret key>.file=PATH` and `<secret key>.env=NAME` read one from a file or "
            "an environment variable", KAFKA),
    Setting("spark.walstream.wal.topicPrefix", "`walstream.wal.`",
            "prefix of every WAL segment topic of the app (driver, receivers, file streams)",
            KAFKA),
    Setting("spark.walstream.wal.compression", "`lz4`",
            "codec of the WAL producers' batches (`none`, `gzip`, `snappy`, `lz4`, `zstd`); "
            "readers take any, so it may change between restarts", KAFKA),
    Setting("spark.walstream.appId", "from the checkpoint directory, else app name + random",
            "names the WAL topics; a restarted driver must get the same id", DRIVER),
    Setting("spark.walstream.receiver.maxBlockBytes", "`64m`",
            "cap of one receiver block's bytes (at most 248 MiB): a burst is cut into "
            "several blocks; a `store(list)` over it with source positions raises "
            "`BlockTooLargeError`", DRIVER),
    Setting("spark.walstream.blockRdd.maxPartitions", "`auto`",
            "the most partitions one receiver stream's batch has: `auto` is Spark's default "
            "parallelism, at most the task slots the receivers leave free; `0` is one "
            "partition per block, as in Spark", DRIVER),
    Setting("spark.walstream.generator.allocateRetries", "`3`",
            "how often a batch whose inputs cannot be prepared (a direct stream's offset "
            "probe while Kafka is down) is retried before the context stops; no batch is "
            "ever skipped", DRIVER),
    Setting("spark.walstream.generator.allocateRetryBackoff", "`200ms`",
            "the first wait between those retries, doubling up to 5 s", DRIVER),
    Setting("spark.walstream.warmUpWorkers", "`true`",
            "start the Python workers with a tiny job when the context starts", DRIVER),
    Setting("spark.walstream.driver.periodicGC.interval", "`5min`",
            "a full GC of the driver JVM this often, so Spark cleans finished batches' "
            "shuffle files (`0`: off; an app that sets `spark.cleaner.periodicGC.interval` "
            "gets none from walstream)", DRIVER),
    Setting("spark.walstream.metrics.enabled", "`true`",
            "collect the figures of the status page and `/metrics`", DRIVER),
    Setting("spark.walstream.log.format", "`text`",
            "`json`: the `walstream` logger writes one JSON object per line to stderr "
            "(`time`, `level`, `logger`, `message`, `exc`); levels stay the app's", DRIVER),
    Setting("spark.walstream.recovery.downtimePolicy", "`all`",
            "batches missed while the driver was down: `all`, `coalesce` (one), `skip`",
            RECOVERY),
    Setting("spark.walstream.recovery.upgrade", "`false` (`WALSTREAM_RECOVERY_UPGRADE`)",
            "restore a checkpoint into a changed graph with the same inputs and stateful "
            "operators", RECOVERY),
    Setting("spark.walstream.ha.enabled", "`false`",
            "the same app started twice on one checkpoint directory: a leader and a hot "
            "standby", HA),
    Setting("spark.walstream.ha.leaseTimeout", "`1s`",
            "how long a standby waits without a renewal before it claims the lease", HA),
    Setting("spark.walstream.ha.renewPeriod", "`200ms`",
            "how often the leader renews; at least two renewals fit in one timeout", HA),
    Setting("spark.walstream.ha.takeoverTimeout", "`60s`",
            "bound on each step of a takeover (fencing the sinks, reading the driver WAL)",
            HA),
    Setting("spark.walstream.ha.outputMargin", "a quarter of `leaseTimeout`",
            "an output operation starts only while the lease stays valid this long", HA),
    Setting("spark.walstream.ha.leaseTopic", "`walstream.lease.<appId>`",
            "the topic that holds the lease", HA),
    Setting("spark.walstream.endpoint.bindAddress",
            "`spark.driver.bindAddress`, else `spark.driver.host`",
            "where the receiver endpoint listens (loopback by default only under "
            "`local[...]`)", ENDPOINT),
    Setting("spark.walstream.endpoint.host", "`spark.driver.host`",
            "the address receivers dial", ENDPOINT),
    Setting("spark.walstream.endpoint.port", "any free", "the endpoint's port", ENDPOINT),
    Setting("spark.walstream.endpoint.ssl.enabled", "`false`",
            "serve the endpoint over TLS", ENDPOINT),
    Setting("spark.walstream.endpoint.ssl.keyFile", "unset", "the endpoint's private key",
            ENDPOINT),
    Setting("spark.walstream.endpoint.ssl.certFile", "unset",
            "the endpoint's certificate, naming the advertised host", ENDPOINT),
    Setting("spark.walstream.endpoint.ssl.trustFile", "the certificate",
            "what receivers trust; they get it in their task", ENDPOINT),
    Setting("spark.walstream.ui.port", "any free",
            "the status page, `/api/status` and `/metrics`; `-1` turns them off", ENDPOINT),
    Setting("spark.walstream.ui.host", "the endpoint's rule",
            "the status page's address", ENDPOINT),
    Setting("spark.streaming.blockInterval", "`200ms`",
            "how often a receiver cuts a block, as in Spark", SPARK),
    Setting("spark.streaming.blockQueueSize", "`10`",
            "blocks a receiver queues before its WAL writes, as in Spark", SPARK),
    Setting("spark.streaming.receiver.maxRate", "none", "records/s per receiver, as in Spark",
            SPARK),
    Setting("spark.streaming.concurrentJobs", "`1`", "batches run at once, as in Spark", SPARK),
    Setting("spark.streaming.backpressure.enabled", "`false`",
            "receivers' rates follow the batches' processing speed (PID), as in Spark", SPARK),
    Setting("spark.streaming.backpressure.initialRate", "none",
            "the first rate under backpressure, as in Spark", SPARK),
    Setting("spark.streaming.backpressure.pid.<proportional|integral|derived|minRate>",
            "Spark's", "the rate estimator's gains, as in Spark", SPARK),
    Setting("spark.python.daemon.module", "`walstream.worker_daemon`",
            "PySpark's worker daemon; walstream's imports the workers' modules before "
            "forking them; `pyspark.daemon` turns that off", SPARK),
    Setting("KAFKA_BOOTSTRAP_SERVERS", "unset",
            "use this Kafka cluster instead of the embedded broker", ENV),
    Setting("WALSTREAM_HOME", "`~/.walstream`", "the embedded broker's state and logs", ENV),
    Setting("WALSTREAM_BROKER_PORT", "`19092`", "port of `walstream broker start`", ENV),
    Setting("WALSTREAM_SPARK_MASTER", "`local[3]`",
            "Spark master of the contexts walstream creates (beats the saved one on a "
            "restart)", ENV),
    Setting("WALSTREAM_SPARK_UI", "Spark's (on)",
            "`false` turns Spark's web UI off in contexts walstream creates; the app's "
            "`spark.ui.enabled` wins", ENV),
    Setting("WALSTREAM_SPARK_LOG_LEVEL", "`ERROR`",
            "`SparkContext.setLogLevel` of the contexts walstream creates", ENV),
    Setting("WALSTREAM_RECOVERY_UPGRADE", "unset",
            "`true`: `spark.walstream.recovery.upgrade` when that key is unset", ENV),
    Setting("WALSTREAM_JVM_ARCHIVE", "on",
            "`off`: the driver JVM starts without the class archive", ENV),
    Setting("WALSTREAM_JVM_ARCHIVE_DIR", "`<venv>/var/walstream/jvm`",
            "where `walstream jvm-archive` writes the archive and the driver looks for it",
            ENV),
    Setting("WALSTREAM_KILL_POINT", "unset",
            "`name[:n]`: SIGKILL this process the n-th time it reaches a named step (chaos "
            "tests; names in `walstream/killpoints.py`)", ENV),
    Setting("WALSTREAM_KILL_POINT_FILE", "unset",
            "a path: writing `name[:n]` there arms a running application", ENV),
    Setting("WALSTREAM_RECOVERED_STATE_FILE", "unset",
            "a path: a restarted driver writes the block queues it recovered there before "
            "its first batch (chaos tests compare them with `walstream inspect`)", ENV),
)

SECTIONS = (KAFKA, DRIVER, RECOVERY, HA, ENDPOINT, SPARK, ENV)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """docs/CONFIGURATION.md, from :data:`SETTINGS`."""
    lines = ["# Configuration", "",
             "Spark conf keys go into the application's `SparkConf` or `spark-submit "
             "--conf`; environment variables into the driver's environment. Options of "
             "classes (`KafkaWalConfig`, `BlockGeneratorConfig`, `SupervisorConfig`, "
             "`EndpointLimits`) are constructor arguments, documented in their modules.", "",
             "Generated from `walstream/configuration.py` "
             "(`python -m walstream.configuration > docs/CONFIGURATION.md`); a test fails "
             "when the two differ.", ""]
    for section in SECTIONS:
        lines += [f"## {section}", "", "| setting | default | meaning |", "|---|---|---|"]
        lines += [f"| `{_cell(s.name)}` | {_cell(s.default)} | {_cell(s.meaning)} |"
                  for s in SETTINGS if s.section == section]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown())
