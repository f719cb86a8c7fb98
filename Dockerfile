# walstream: Spark Streaming's receiver design with Kafka topics as write-ahead logs.
#
#   docker build -t walstream .
#   docker run --rm walstream --help
#   docker run --rm -e KAFKA_BOOTSTRAP_SERVERS=kafka:9092 walstream ...
#
# One image for every role of a cluster:
#   driver:   docker run --network host --entrypoint spark-submit walstream \
#               --master spark://HOST:7077 app.py
#   executor: docker run --network host --entrypoint spark-class walstream \
#               org.apache.spark.deploy.worker.Worker spark://HOST:7077
# Spark comes with PySpark (its jars and launch scripts), and the project is
# installed for the image's python3, so executors started from this image need no
# `walstream package` archive. PySpark 4 needs a Java 17 runtime. The embedded
# Tansu broker (`walstream broker start`) listens on 127.0.0.1 by default, so inside
# a container it serves that container alone; point KAFKA_BOOTSTRAP_SERVERS (or
# spark.walstream.kafka.bootstrapServers) at a real cluster for anything shared.
# SPARK_LOCAL_IP is left unset: a local[...] master uses loopback by itself, and a
# cluster's driver and workers must use an address the others reach.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYSPARK_PYTHON=python3

# Debian slim drops /usr/share/man; the JRE's postinst wants man1 for its alternatives.
# procps: Spark's launch scripts call `ps`. Not version-pinned on purpose (DL3008):
# Debian drops superseded versions from its archive, so pins would break rebuilds.
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/* \
    && java -version

# The project (pyproject.toml and the package walstream, with the folders wal,
# receiver, driver and checkpoint linked under it); .dockerignore keeps tests,
# caches, the venv and .git out.
WORKDIR /src
COPY . .
RUN pip install --no-cache-dir . \
    && walstream --help >/dev/null \
    && ln -s "$(python3 -c 'import pyspark, os; print(os.path.dirname(pyspark.__file__))')" /opt/spark \
    && walstream jvm-archive --optional

RUN groupadd --gid 10001 walstream \
    && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin walstream
USER 10001:10001
WORKDIR /home/walstream
ENV WALSTREAM_HOME=/home/walstream/.walstream \
    SPARK_HOME=/opt/spark \
    SPARK_WORKER_DIR=/home/walstream/spark-work \
    PATH=/opt/spark/bin:$PATH

ENTRYPOINT ["walstream"]
CMD ["--help"]
