"""``walstream inspect --kafka-conf KEY=VALUE --kafka-conf-file PATH``: a secured
cluster's settings, given on the command line because checkpoints hold no secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from walstream.cli import build_parser, kafka_conf_of, main


def _args(*argv: str) -> object:
    return build_parser().parse_args(["inspect", "cp", *argv])


def test_file_then_flags(tmp_path: Path) -> None:
    conf = tmp_path / "client.properties"
    conf.write_text("# the cluster\nsecurity.protocol=SASL_SSL\nsasl.username = app\n"
                    "sasl.password=from-file\n\n")
    got = kafka_conf_of(_args("--kafka-conf-file", str(conf),  # type: ignore[arg-type]
                              "--kafka-conf", "sasl.password=from-flag",
                              "--kafka-conf", "ssl.ca.location=/ca.pem"))
    assert got == {"security.protocol": "SASL_SSL", "sasl.username": "app",
                   "sasl.password": "from-flag", "ssl.ca.location": "/ca.pem"}


@pytest.mark.parametrize("argv,message", [
    (["--kafka-conf", "nokey"], "KEY=VALUE"),
    (["--kafka-conf", "bootstrap.servers=x:1"], "bootstrapServers"),
    (["--kafka-conf", "Not.A.Key=1"], "not a librdkafka setting"),
    (["--kafka-conf-file", "/no/such/file"], "--kafka-conf-file"),
])
def test_bad_settings_exit_2_with_one_line(argv: list[str], message: str,
                                           capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    assert main(["inspect", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("walstream: error:") and message in err
    assert len(err.splitlines()) == 1
