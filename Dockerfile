# walstream: Spark Streaming's receiver design with Kafka topics as write-ahead logs.
#
#   docker build -t walstream .
#   docker run --rm walstream --help
#   docker run --rm -e KAFKA_BOOTSTRAP_SERVERS=kafka:9092 walstream ...
#
# PySpark 4 needs a Java 17 runtime. The embedded Tansu broker (`walstream broker
# start`) listens on 127.0.0.1 only, so inside a container it serves that container
# alone; point KAFKA_BOOTSTRAP_SERVERS at a real cluster for anything shared.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SPARK_LOCAL_IP=127.0.0.1 \
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

# The project (pyproject.toml and the packages walstream, wal, receiver, driver,
# checkpoint); .dockerignore keeps tests, caches, the venv and .git out.
WORKDIR /src
COPY . .
RUN pip install --no-cache-dir . \
    && walstream --help >/dev/null \
    && walstream jvm-archive --optional

RUN groupadd --gid 10001 walstream \
    && useradd --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin walstream
USER 10001:10001
WORKDIR /home/walstream
ENV WALSTREAM_HOME=/home/walstream/.walstream

ENTRYPOINT ["walstream"]
CMD ["--help"]
