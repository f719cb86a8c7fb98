"""``walstream`` is the user's entry point: PySpark's names, loaded on first use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> None:
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_importing_walstream_loads_no_driver_and_no_spark() -> None:
    """Executors import walstream (errors, codecs); they must not pay for the driver."""
    _run("import sys, walstream, walstream.errors, walstream.avro_codec\n"
         "loaded = [m for m in sys.modules\n"
         "          if m.split('.')[0] == 'pyspark' or m.startswith('walstream.driver')]\n"
         "assert not loaded, loaded")


def test_walstream_exports_the_same_objects_as_driver() -> None:
    import walstream
    import walstream.driver as driver
    from walstream import KafkaUtils, StreamingContext

    assert StreamingContext is driver.StreamingContext
    assert KafkaUtils is driver.KafkaUtils
    for name in walstream.__all__:
        assert getattr(walstream, name) is not None
    assert set(walstream.__all__) <= set(dir(walstream))


def test_an_unknown_name_is_an_attribute_error() -> None:
    import walstream

    with pytest.raises(AttributeError, match="no_such_name"):
        walstream.no_such_name  # noqa: B018
