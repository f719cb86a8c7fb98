"""spark.walstream.log.format=json: the project's loggers write one JSON object per
record (time, level, logger, message, exc), once; text leaves logging alone."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from walstream.errors import ConfigError
from walstream.log_format import CONF_KEY, PROJECT_LOGGERS, JsonFormatter, apply_log_format


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    saved = {n: (logging.getLogger(n).propagate, list(logging.getLogger(n).handlers),
                 logging.getLogger(n).level) for n in PROJECT_LOGGERS}
    yield
    apply_log_format({})
    for n, (propagate, handlers, level) in saved.items():
        logger = logging.getLogger(n)
        logger.propagate, logger.handlers, logger.level = propagate, handlers, level


def test_json_lines_for_the_projects_loggers_only_and_once(
        caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    assert apply_log_format({CONF_KEY: "json"}, out) == "json"
    assert apply_log_format({CONF_KEY: "JSON"}, out) == "json"  # idempotent: one handler
    logging.getLogger("driver").setLevel(logging.INFO)
    with caplog.at_level(logging.INFO):
        logging.getLogger("walstream.driver.scheduler.restart_log").info(
            "first batch %d after %.1f s", 7, 2.5)
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("walstream.wal.kafka_log").exception("write failed")
        logging.getLogger("someapp").warning("the app's own line")
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(d["level"], d["logger"], d["message"]) for d in lines] == [
        ("INFO", "walstream.driver.scheduler.restart_log", "first batch 7 after 2.5 s"),
        ("ERROR", "walstream.wal.kafka_log", "write failed"),
    ]
    assert lines[0]["exc"] is None
    assert "ValueError: boom" in lines[1]["exc"]
    assert set(lines[0]) == {"time", "level", "logger", "message", "exc"}
    assert lines[0]["time"].endswith("Z") and "T" in lines[0]["time"]
    # Not propagated: the root's handlers (caplog's here) do not write them again.
    assert [r.name for r in caplog.records] == ["someapp"]


def test_text_undoes_json_and_leaves_the_apps_logging_alone() -> None:
    out = io.StringIO()
    logging.getLogger("receiver").propagate = False  # the app's own choice
    apply_log_format({CONF_KEY: "json"}, out)
    assert apply_log_format({CONF_KEY: "text"}) == "text"
    assert apply_log_format({}) == "text"
    for n in PROJECT_LOGGERS:
        assert not [h for h in logging.getLogger(n).handlers
                    if isinstance(h.formatter, JsonFormatter)]
    assert logging.getLogger("driver").propagate
    assert not logging.getLogger("receiver").propagate  # as the app left it
    logging.getLogger("driver").warning("a text line")
    assert out.getvalue() == ""


def test_an_unknown_format_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"spark\.walstream\.log\.format='xml'"):
        apply_log_format({CONF_KEY: "xml"})
