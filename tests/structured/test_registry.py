"""walstream.register refuses an interpreter path the driver cannot start."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from walstream.structured.errors import SourceOptionError
from walstream.structured.registry import check_planner_python


def test_an_archive_path_that_does_not_resolve_on_the_driver_is_a_clear_error(
        tmp_path: Path) -> None:
    # The client-mode spark-submit of the cluster README, from a directory without
    # the unpacked archive: Spark would fail the query later with "Cannot run program".
    with pytest.raises(SourceOptionError, match=r"'\./environment/bin/python'.*cannot run"):
        check_planner_python("./environment/bin/python", cwd=str(tmp_path))


def test_an_archive_path_that_resolves_on_the_driver_is_accepted(tmp_path: Path) -> None:
    os.symlink(sys.prefix, tmp_path / "environment")
    check_planner_python("./environment/bin/python", cwd=str(tmp_path))


def test_a_relative_path_to_a_file_that_is_not_executable_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    with pytest.raises(SourceOptionError):
        check_planner_python("bin/python", cwd=str(tmp_path))


@pytest.mark.parametrize("exec_", ["python3", sys.executable, "/nonexistent/bin/python"])
def test_names_on_path_and_absolute_paths_are_left_to_spark(exec_: str, tmp_path: Path) -> None:
    check_planner_python(exec_, cwd=str(tmp_path))
