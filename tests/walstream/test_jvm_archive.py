"""When the driver JVM is pointed at the class archive, and when it is left alone."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path

import pytest

from walstream import jvm_archive
from walstream.jvm_archive import SUBMIT_ARGS, ArchiveKey


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No PYSPARK_SUBMIT_ARGS (restored afterwards, also when use_archive set it),
    an archive directory of the test's own and no administrator's defaults."""
    monkeypatch.setenv(SUBMIT_ARGS, "placeholder")  # records the original for undo
    monkeypatch.delenv(SUBMIT_ARGS)
    monkeypatch.delenv(jvm_archive.ENV_SWITCH, raising=False)
    monkeypatch.setenv(jvm_archive.ENV_DIR, str(tmp_path / "jvm"))
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    monkeypatch.setattr(jvm_archive.tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    from pyspark import SparkContext

    # PySpark keeps its gateway after sc.stop(): another test's JVM would hide ours.
    monkeypatch.setattr(SparkContext, "_gateway", None)
    return tmp_path


def _fake_archive(size: int = 64, recorded: int | None = None) -> Path:
    path = jvm_archive.archive_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    path.with_suffix(".json").write_text(json.dumps({"size": size if recorded is None
                                                     else recorded}))
    return path


def _properties() -> str:
    args = shlex.split(os.environ[SUBMIT_ARGS])
    assert args[0] == "--properties-file" and args[-1] == "pyspark-shell"
    assert "--load-spark-defaults" in args  # the admin's spark-defaults.conf still loads
    return Path(args[1]).read_text()


def test_key_names_one_archive_per_java_and_spark() -> None:
    a = ArchiveKey("/usr/bin/java:1:2", "4.3.0", "abc")
    assert a.file_name() == ArchiveKey("/usr/bin/java:1:2", "4.3.0", "abc").file_name()
    assert a.file_name().startswith("spark-4.3.0-") and a.file_name().endswith(".jsa")
    assert a.file_name() != ArchiveKey("/usr/bin/java:1:3", "4.3.0", "abc").file_name()
    assert a.file_name() != ArchiveKey("/usr/bin/java:1:2", "4.3.1", "abc").file_name()
    assert a.file_name() != ArchiveKey("/usr/bin/java:1:2", "4.3.0", "abd").file_name()


def test_current_key_is_this_machines_java_and_spark() -> None:
    key = jvm_archive.current_key()
    import pyspark

    assert key.pyspark_version == pyspark.__version__
    assert os.path.exists(key.java.split(":")[0])


def test_archive_in_place_is_named_in_the_drivers_default_java_options(clean_env: Path) -> None:
    path = _fake_archive()
    assert jvm_archive.use_archive() == path
    text = _properties()
    assert text.startswith(f"spark.driver.defaultJavaOptions -XX:SharedArchiveFile={path} "
                           "-Xshare:auto ")
    # Named after its content: a second start reuses the file instead of leaking one.
    first = os.environ[SUBMIT_ARGS]
    del os.environ[SUBMIT_ARGS]
    jvm_archive.use_archive()
    assert os.environ[SUBMIT_ARGS] == first
    assert len(list((clean_env / "tmp").iterdir())) == 1


def test_administrators_default_java_options_are_kept_after_ours(clean_env: Path) -> None:
    (clean_env / "conf").mkdir()
    (clean_env / "conf" / "spark-defaults.conf").write_text(
        "# site defaults\nspark.driver.defaultJavaOptions  -Dsite=1 -Xss4m\n"
        "spark.executor.memory 2g\n")
    path = _fake_archive()
    jvm_archive.use_archive()
    line = _properties().strip()
    assert line.startswith(f"spark.driver.defaultJavaOptions -XX:SharedArchiveFile={path}")
    assert line.endswith("-Dsite=1 -Xss4m")


def test_no_archive_changes_nothing(clean_env: Path) -> None:
    assert jvm_archive.use_archive() is None
    assert SUBMIT_ARGS not in os.environ


def test_archive_of_the_wrong_size_is_not_used(clean_env: Path) -> None:
    # A truncated archive makes Java 17 die of SIGBUS instead of ignoring it.
    _fake_archive(size=64, recorded=128)
    assert jvm_archive.usable_archive() is None
    assert jvm_archive.use_archive() is None
    assert SUBMIT_ARGS not in os.environ


def test_archive_without_its_size_record_is_not_used(clean_env: Path) -> None:
    path = _fake_archive()
    path.with_suffix(".json").unlink()
    assert jvm_archive.use_archive() is None


def test_users_own_submit_args_win(clean_env: Path) -> None:
    _fake_archive()
    os.environ[SUBMIT_ARGS] = "--driver-memory 2g pyspark-shell"
    assert jvm_archive.use_archive() is None
    assert os.environ[SUBMIT_ARGS] == "--driver-memory 2g pyspark-shell"


@pytest.mark.parametrize("value", ["off", "OFF", "0", "false"])
def test_switched_off(clean_env: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    _fake_archive()
    monkeypatch.setenv(jvm_archive.ENV_SWITCH, value)
    assert jvm_archive.use_archive() is None
    assert SUBMIT_ARGS not in os.environ
    with pytest.raises(jvm_archive.JvmArchiveError, match="off"):
        jvm_archive.create()


def test_running_jvm_is_left_alone(clean_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark import SparkContext

    _fake_archive()
    monkeypatch.setattr(SparkContext, "_gateway", object())
    assert jvm_archive.use_archive() is None
    assert SUBMIT_ARGS not in os.environ


def test_missing_java_is_a_debug_line_not_an_error(clean_env: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(clean_env / "no-such-jdk"))
    assert jvm_archive.use_archive() is None
    with pytest.raises(jvm_archive.PrerequisiteError, match="java not found"):
        jvm_archive.current_key()


# -- the properties file: private, never one another user planted ---------------------

OTHER_UID = 65534  # nobody
EVIL = "spark.driver.defaultJavaOptions -javaagent:/tmp/evil.jar\n"


def _used_properties() -> Path:
    args = shlex.split(os.environ[SUBMIT_ARGS])
    return Path(args[args.index("--properties-file") + 1])


def _old_shared_name(archive: Path) -> Path:
    """Where the properties file used to live: the shared temp directory, under a
    name anyone can compute (uid and the digest of the content)."""
    import hashlib

    text = (f"{jvm_archive.DEFAULT_JAVA_OPTIONS} -XX:SharedArchiveFile={archive} "
            f"-Xshare:auto {jvm_archive._QUIET}\n")
    digest = hashlib.sha1(text.encode()).hexdigest()[:16]
    return Path(jvm_archive.tempfile.gettempdir()) / \
        f"walstream-driver-{os.getuid()}-{digest}.conf"


def _assert_ours(props: Path, archive: Path) -> None:
    st = os.lstat(props)
    assert st.st_uid == os.geteuid()
    assert stat.S_IMODE(st.st_mode) == 0o600
    text = props.read_text()
    assert "-javaagent" not in text
    assert text.startswith(f"spark.driver.defaultJavaOptions -XX:SharedArchiveFile={archive} ")
    parent = os.lstat(props.parent)
    assert stat.S_ISDIR(parent.st_mode) and parent.st_uid == os.geteuid()
    assert stat.S_IMODE(parent.st_mode) == 0o700


def test_planted_properties_file_with_the_old_shared_name_is_never_used(
        clean_env: Path) -> None:
    archive = _fake_archive()
    planted = _old_shared_name(archive)
    planted.write_text(EVIL)
    os.chown(planted, OTHER_UID, OTHER_UID)
    assert jvm_archive.use_archive() == archive
    assert _used_properties() != planted
    _assert_ours(_used_properties(), archive)


def test_properties_file_lives_in_a_private_0700_directory(clean_env: Path) -> None:
    old = os.umask(0)  # a permissive umask must not widen it
    try:
        archive = _fake_archive()
        jvm_archive.use_archive()
    finally:
        os.umask(old)
    _assert_ours(_used_properties(), archive)


def _planted_in_the_private_dir(how: str) -> tuple[Path, Path]:
    """The properties file of a first start, then tampered with ``how``."""
    archive = _fake_archive()
    jvm_archive.use_archive()
    props = _used_properties()
    del os.environ[SUBMIT_ARGS]
    if how == "content":
        props.write_text(EVIL)
    elif how == "mode":
        os.chmod(props, 0o666)
    elif how == "owner":
        props.write_text(EVIL)
        os.chown(props, OTHER_UID, OTHER_UID)
    elif how == "symlink":
        evil = props.parent.parent / "evil.conf"
        evil.write_text(EVIL)
        props.unlink()
        props.symlink_to(evil)
    return archive, props


@pytest.mark.parametrize("how", ["content", "mode", "owner", "symlink"])
def test_properties_file_of_wrong_content_mode_or_owner_is_replaced(
        clean_env: Path, how: str) -> None:
    archive, _ = _planted_in_the_private_dir(how)
    assert jvm_archive.use_archive() == archive
    _assert_ours(_used_properties(), archive)
    assert not _used_properties().is_symlink()


@pytest.mark.parametrize("how", ["other-owner", "world-writable", "symlink"])
def test_properties_directory_not_private_to_this_user_is_never_trusted(
        clean_env: Path, how: str) -> None:
    archive, props = _planted_in_the_private_dir("none")
    private = props.parent
    if how == "other-owner":
        props.write_text(EVIL)
        os.chown(props, OTHER_UID, OTHER_UID)
        os.chown(private, OTHER_UID, OTHER_UID)
    elif how == "world-writable":
        os.chmod(private, 0o777)
    else:  # the directory's name is a symlink to a directory another user controls
        theirs = private.parent / "theirs"
        private.rename(theirs)
        (theirs / props.name).write_text(EVIL)
        os.chown(theirs, OTHER_UID, OTHER_UID)
        private.symlink_to(theirs)
    assert jvm_archive.use_archive() == archive
    _assert_ours(_used_properties(), archive)
    if how != "world-writable":  # a directory of ours is made private again
        assert _used_properties().parent != private
