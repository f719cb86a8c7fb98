"""Which Kafka cluster and which name an application's logs get.

The bootstrap servers: ``spark.walstream.kafka.bootstrapServers`` (conf), else
``KAFKA_BOOTSTRAP_SERVERS``, else a running embedded broker, else one started
detached (it outlives this driver, so a restarted driver finds its WALs). The
application id names every WAL and topic of the app: ``spark.walstream.appId``, else
one derived from the checkpoint directory (the same across restarts, which is what
lets a restart find its logs), else the app's name with a random suffix.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import uuid

log = logging.getLogger(__name__)

CONF_BOOTSTRAP = "spark.walstream.kafka.bootstrapServers"
CONF_APP_ID = "spark.walstream.appId"


def resolve_bootstrap(conf: dict[str, str]) -> str:
    from walstream import broker

    value = conf.get(CONF_BOOTSTRAP) or os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip()
    if value:
        return value
    running = broker.bootstrap_servers()
    if running:
        return running
    port = int(os.environ.get("WALSTREAM_BROKER_PORT", broker.DEFAULT_PORT))
    state = broker.start(port=port)
    log.warning("started the embedded Kafka broker at %s (stop it with `walstream broker "
                "stop`)", state.bootstrap)
    return state.bootstrap


def app_id_for(conf: dict[str, str], checkpoint_dir: str | None, app_name: str) -> str:
    """``spark.walstream.appId``, else a digest of the checkpoint directory, else the
    app's name with a random suffix (an app without checkpoints never restarts)."""
    if conf.get(CONF_APP_ID):
        return conf[CONF_APP_ID]
    if checkpoint_dir:
        where = checkpoint_dir if "://" in checkpoint_dir else os.path.abspath(checkpoint_dir)
        digest = hashlib.sha1(where.encode()).hexdigest()
        return f"app-{digest[:12]}"
    name = re.sub(r"[^A-Za-z0-9._-]", "-", app_name)[:60] or "app"
    return f"{name}-{uuid.uuid4().hex[:8]}"
