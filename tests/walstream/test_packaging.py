"""``walstream package``: an archive executors run from, with no repository or venv.

The archive is built once, unpacked into a fresh directory (as Spark unpacks
``--archives``), and its Python imports what executors run, from a directory
outside the repository with an environment that names neither the repository
nor the driver's virtualenv. PySpark comes from a directory that holds only it,
as a worker's path holds ``$SPARK_HOME/python`` and py4j.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from walstream.cli import main
from walstream.errors import WalStreamError
from walstream.packaging import build, pinned_requirements

REPO = Path(__file__).resolve().parents[2]
EXECUTOR_IMPORTS = ("walstream.receiver.task", "walstream.receiver.driver_client",
                    "walstream.wal.reader", "walstream.wal.kafka_log",
                    "walstream.driver.dstream.block_rdd", "walstream.driver.dstream.direct_stream",
                    "walstream.driver.sink.kafka_sink", "walstream.structured.rows",
                    "walstream.structured.datasource", "walstream.rpc.messages",
                    "confluent_kafka", "fastavro", "grpc", "pyarrow")
#: Spark's own executor-side modules that need more than PySpark: the Python data
#: source reader a ``format("walstream")`` query's block reads run in (pyarrow).
SPARK_EXECUTOR_IMPORTS = ("pyspark.sql.worker.plan_data_source_read",)


#: What an example run from the repository root may leave inside a package folder.
PLANTED = (REPO / "walstream" / "structured" / "ckpt-of-an-example",
           REPO / "driver" / "data.json")


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pkg") / "env.tar.gz"
    checkpoint, data = PLANTED
    checkpoint.mkdir()
    try:
        (checkpoint / "checkpoint-1000").write_bytes(b"state")
        data.write_text("{}")
        assert main(["package", "--out", str(out)]) == 0
    finally:
        (checkpoint / "checkpoint-1000").unlink()
        checkpoint.rmdir()
        data.unlink()
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    where = tmp_path_factory.mktemp("executor") / "environment"
    with tarfile.open(out) as tar:
        names = tar.getnames()
        tar.extractall(where, filter="tar")
    assert not [n for n in names if "/site-packages/pyspark/" in n], "PySpark is packed"
    assert not [n for n in names if "/walstream/testing/" in n], "the test kit is packed"
    ours = [n for n in names if "/site-packages/" in n and n.split("/site-packages/")[1]
            .split("/")[0] == "walstream"]
    assert not [n for n in names if "/site-packages/" in n and n.split("/site-packages/")[1]
                .split("/")[0] in ("wal", "receiver", "driver", "checkpoint", "structured")], \
        "a package is packed under its bare folder name"
    assert [n for n in ours if "/walstream/driver/" in n], "the driver is not packed"
    assert [n for n in ours if "/structured/" in n], "structured is not packed"
    assert not [n for n in ours if n.endswith(("ckpt-of-an-example", "data.json",
                                               "checkpoint-1000"))], "data is packed"
    assert all(n.endswith(".py") or "." not in n.rsplit("/", 1)[-1] for n in ours), [
        n for n in ours if not n.endswith(".py")][:5]
    return where


def test_the_executor_side_imports_from_the_archive_alone(unpacked: Path,
                                                          tmp_path: Path) -> None:
    import py4j
    import pyspark

    spark_python = tmp_path / "spark-python"  # $SPARK_HOME/python and its py4j
    spark_python.mkdir()
    (spark_python / "pyspark").symlink_to(Path(pyspark.__file__).parent)
    (spark_python / "py4j").symlink_to(Path(py4j.__file__).parent)
    code = ("import importlib, sys\n"
            f"for name in {EXECUTOR_IMPORTS!r}:\n"
            "    module = importlib.import_module(name)\n"
            "    where = getattr(module, '__file__', '') or ''\n"
            f"    assert where.startswith({str(unpacked)!r}), (name, where)\n"
            f"for name in {SPARK_EXECUTOR_IMPORTS!r}:\n"
            "    importlib.import_module(name)\n"
            f"assert not [p for p in sys.path if p.startswith({str(REPO)!r})], sys.path\n"
            "print('ok')\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(spark_python)}
    done = subprocess.run([str(unpacked / "bin" / "python"), "-c", code], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_archive_pins_what_runs_here() -> None:
    import importlib.metadata

    pins = dict(p.split("==") for p in pinned_requirements())
    for name in ("confluent-kafka", "fastavro", "grpcio", "pyarrow"):
        assert pins[name] == importlib.metadata.version(name)
    assert "typing-extensions" in pins  # grpcio's own requirement comes along
    assert "pyspark" not in pins


def test_an_archive_name_other_than_tar_gz_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WalStreamError, match=r"\.tar\.gz"):
        build(tmp_path / "env.zip")
    assert not os.listdir(tmp_path)
