"""create_spark_context's settings: Spark's web UI is the app's choice (Spark's default
unless $WALSTREAM_SPARK_UI or the app's conf says otherwise)."""

from __future__ import annotations

import pytest

from walstream import worker_daemon
from walstream.driver.spark import SPARK_UI_ENV, spark_settings


def test_the_ui_is_left_to_spark_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SPARK_UI_ENV, raising=False)
    got = spark_settings("app", "local[2]")
    assert "spark.ui.enabled" not in got
    assert got["spark.app.name"] == "app" and got["spark.master"] == "local[2]"
    assert got["spark.ui.showConsoleProgress"] == "false"
    assert got[worker_daemon.CONF_KEY] == worker_daemon.MODULE


@pytest.mark.parametrize("value", ["false", "FALSE", "true"])
def test_the_environment_opts_out_or_in(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(SPARK_UI_ENV, value)
    assert spark_settings("app", "local[2]")["spark.ui.enabled"] == value.lower()


def test_the_apps_conf_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SPARK_UI_ENV, "false")
    got = spark_settings("app", "local[2]", {"spark.ui.enabled": "true",
                                             worker_daemon.CONF_KEY: "pyspark.daemon"})
    assert got["spark.ui.enabled"] == "true"
    assert got[worker_daemon.CONF_KEY] == "pyspark.daemon"
