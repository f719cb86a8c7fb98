"""Python workers fork from walstream's daemon, which has imported their modules."""

from __future__ import annotations

from typing import Any

import pytest

from walstream import worker_daemon

pytestmark = pytest.mark.spark


def test_a_task_runs_in_a_worker_forked_from_the_preloading_daemon(sc: Any) -> None:
    assert sc.getConf().get(worker_daemon.CONF_KEY) == worker_daemon.MODULE

    def what_the_worker_had(_: Any) -> list[tuple[bool, str]]:
        import os
        import sys

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().replace(b"\0", b" ").decode()
        # This function (pickled by value) names none of them: only the daemon
        # could have imported them.
        return [("walstream.receiver.task" in sys.modules
                 and "walstream.driver.dstream.block_rdd" in sys.modules,
                 parent)]

    got = sc.parallelize([0, 1, 2], 3).mapPartitions(what_the_worker_had).collect()
    assert len(got) == 3
    for preloaded, parent in got:
        assert worker_daemon.MODULE in parent
        assert preloaded
