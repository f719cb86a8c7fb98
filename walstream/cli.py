"""The ``walstream`` command line.

``walstream broker start [--durable] [--port N]`` prints the bootstrap address as
its last line; ``walstream broker status``; ``walstream broker stop``;
``walstream inspect CHECKPOINT_DIR [--kafka-conf KEY=VALUE ...] [--kafka-conf-file F]
[--progress auto|bar|lines|none]`` prints what a restart would recover (the replay's
progress on stderr); ``walstream package --out PATH`` builds the
executors' environment archive (walstream/packaging.py); ``walstream jvm-archive``
writes the driver JVM's class archive (walstream/jvm_archive.py);
``walstream status [URL] [--checkpoint DIR]`` prints a running driver's status
page as tables (walstream/status_view.py).
Errors this project raises on purpose print as one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from walstream import broker
from walstream.errors import ConfigError, WalStreamError


def _home(args: argparse.Namespace) -> Path:
    return Path(args.home) if args.home else broker.default_home()


def _broker_start(args: argparse.Namespace) -> int:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "").strip():
        print("KAFKA_BOOTSTRAP_SERVERS is set: using that cluster, starting nothing")
        print(os.environ["KAFKA_BOOTSTRAP_SERVERS"].strip())
        return 0
    port = args.port
    if port is None and os.environ.get("WALSTREAM_BROKER_PORT"):
        raw = os.environ["WALSTREAM_BROKER_PORT"]
        if not raw.isdigit() or not 0 < int(raw) < 65536:
            raise ConfigError(f"WALSTREAM_BROKER_PORT must be a port number, got {raw!r}")
        port = int(raw)
    state = broker.start(_home(args), port=port, durable=args.durable)
    kind = "durable (s3 over moto)" if state.durable else "in-memory"
    print(f"embedded broker running: pid {state.pid}, {kind}, log {state.log_path}")
    print(state.bootstrap)
    return 0


def _broker_status(args: argparse.Namespace) -> int:
    state = broker.read_state(_home(args))
    if state is None:
        print("embedded broker: not running")
        return 1
    alive = state.broker_alive()
    store = ""
    if state.durable:
        store = f", S3 store pid {state.store_pid} {'up' if state.store_alive() else 'DOWN'}"
    print(f"embedded broker: {'running' if alive else 'DEAD'} pid {state.pid}{store}")
    print(state.bootstrap)
    return 0 if alive else 1


def _broker_stop(args: argparse.Namespace) -> int:
    stopped = broker.stop(_home(args))
    print("embedded broker stopped" if stopped else "embedded broker: nothing to stop")
    return 0


def kafka_conf_of(args: argparse.Namespace) -> dict[str, str]:
    """``--kafka-conf-file`` (``KEY=VALUE`` lines, ``#`` comments), then each
    ``--kafka-conf KEY=VALUE`` over it; librdkafka keys, checked as
    ``spark.walstream.kafka.*`` keys are."""
    from walstream.kafka_settings import PREFIX, parse_assignments, settings_from_conf

    items: list[str] = []
    if args.kafka_conf_file:
        try:
            text = Path(args.kafka_conf_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--kafka-conf-file: {exc}") from exc
        items += [line.strip() for line in text.splitlines()
                  if line.strip() and not line.lstrip().startswith("#")]
    items += args.kafka_conf or []
    given = parse_assignments(items)
    return settings_from_conf({PREFIX + k: v for k, v in given.items()})


def _inspect(args: argparse.Namespace) -> int:
    from walstream.driver.dstream.checkpoint_inspect import main_inspect

    # The cluster: --bootstrap, else the one the checkpoint's conf names (as the
    # restarted app would use), else the environment or the embedded broker.
    print(main_inspect(args.checkpoint_dir, args.bootstrap,
                       lambda: broker.bootstrap_servers(_home(args)), kafka_conf_of(args),
                       progress=args.progress, progress_stream=sys.stderr))
    return 0


def _package(args: argparse.Namespace) -> int:
    from walstream.packaging import build

    path = build(Path(args.out), args.python_prefix)
    print(f"executor environment: {path}")
    print(f"spark-submit --archives {path}#environment "
          "--conf spark.pyspark.python=./environment/bin/python ...")
    return 0


def _jvm_archive(args: argparse.Namespace) -> int:
    from walstream import jvm_archive

    if args.if_missing and jvm_archive.usable_archive() is not None:
        return 0
    try:
        path, without, with_archive = jvm_archive.create()
    except jvm_archive.JvmArchiveError as exc:
        if args.optional:
            print(f"walstream: warning: {exc}; drivers start without it", file=sys.stderr)
            return 0
        raise
    print(f"JVM class archive written: {path}; SparkContext ready in {without:.1f} s "
          f"without it, {with_archive:.1f} s with it")
    return 0


def _status(args: argparse.Namespace) -> int:
    from walstream import status_view

    if args.url:
        url = args.url
    elif args.checkpoint:
        url = status_view.find_url(Path(args.checkpoint))
    else:
        url = status_view.find_url(_home(args))
    status = status_view.fetch_status(url)
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print(status_view.format_status(status, batches=args.batches))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="walstream", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("broker", help="manage the embedded Kafka-protocol broker (Tansu)")
    bsub = b.add_subparsers(dest="action", required=True)
    for name, fn, help_ in (
        ("start", _broker_start, "start detached (idempotent); prints the bootstrap address"),
        ("status", _broker_status, "show whether it runs; exit 1 when not"),
        ("stop", _broker_stop, "stop the broker and its store, and wait for them"),
    ):
        p = bsub.add_parser(name, help=help_)
        p.add_argument("--home", help="state directory (default $WALSTREAM_HOME or ~/.walstream)")
        p.set_defaults(fn=fn)
        if name == "start":
            p.add_argument("--port", type=int, default=None, help="listen port (default 19092)")
            p.add_argument(
                "--durable", action="store_true", help="survive a SIGKILL of the broker"
            )
    i = sub.add_parser("inspect", help="print, as JSON, what a restart from a checkpoint "
                                       "would recover")
    i.add_argument("checkpoint_dir")
    i.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the checkpoint "
                                       "conf's, else env, else embedded)")
    i.add_argument("--home", help="embedded broker state directory")
    i.add_argument("--kafka-conf", action="append", metavar="KEY=VALUE",
                   help="a librdkafka setting of the cluster (SASL, TLS, ...), repeatable; "
                        "the checkpoint holds no secret")
    i.add_argument("--kafka-conf-file", metavar="PATH",
                   help="librdkafka settings, one KEY=VALUE per line")
    i.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto",
                   help="the replay's progress on stderr: a bar on a terminal and plain "
                        "lines otherwise (auto, the default), or bar, lines, none")
    i.set_defaults(fn=_inspect)
    pk = sub.add_parser("package", help="build the environment archive executors run in "
                                        "(spark-submit --archives PATH#environment)")
    pk.add_argument("--out", required=True, help="the archive to write (.tar.gz)")
    pk.add_argument("--python-prefix", default=None,
                    help="where Python is installed on the worker hosts (default: this "
                         "interpreter's installation)")
    pk.set_defaults(fn=_package)
    j = sub.add_parser("jvm-archive", help="write the class-data-sharing archive that makes "
                                          "a driver's JVM start ~1.3 s sooner")
    j.add_argument("--optional", action="store_true",
                   help="a failure is a warning (exit 0): the archive is only a speed-up")
    j.add_argument("--if-missing", action="store_true",
                   help="do nothing when a usable archive for this Java and Spark exists")
    j.set_defaults(fn=_jvm_archive)
    st = sub.add_parser("status", help="print a running driver's status (its status page) "
                                       "as tables")
    st.add_argument("url", nargs="?", help="the driver's status page URL (default: the one "
                                           "its status.json names)")
    st.add_argument("--checkpoint", metavar="DIR",
                    help="find the driver of this checkpoint directory")
    st.add_argument("--home", help="where a driver without checkpoints left status.json "
                                   "(default $WALSTREAM_HOME or ~/.walstream)")
    st.add_argument("--batches", type=int, default=10, help="batches to list (default 10)")
    st.add_argument("--json", action="store_true", help="print the status as JSON")
    st.set_defaults(fn=_status)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.fn(args))
    except WalStreamError as exc:
        print(f"walstream: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
