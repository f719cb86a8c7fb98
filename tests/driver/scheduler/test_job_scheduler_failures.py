"""A failed job's batch is not completed: it stays pending (listed by every later
checkpoint, so a restart re-runs it), its completion (checkpoint, then cleanup) is
never handled, and its error reaches ``awaitTermination``."""

from __future__ import annotations

import pytest

from tests.driver.generator_harness import Harness, block
from tests.driver.helpers import WAIT_S
from walstream.driver.errors import JobFailedError
from walstream.driver.scheduler.job_scheduler import Job
from walstream.testing import wait_until

pytestmark = pytest.mark.timeout(30)


def test_failed_job_batch_stays_pending_and_is_never_cleaned_up() -> None:
    failed: list[int] = []

    def generate(t: int) -> list[Job]:
        def run() -> None:
            if not failed:
                failed.append(t)
                raise ValueError(f"output of {t} failed")
        return [Job(t, 0, "save", run)]

    h = Harness(generate=generate)
    try:
        assert h.tracker.add_block(block(0, 5))
        h.gen.start()
        err = h.scheduler.await_error(WAIT_S)
        assert isinstance(err, JobFailedError) and isinstance(err.__cause__, ValueError)
        t = failed[0]
        # Later batches complete and are cleaned up after; the failed one never is.
        wait_until(lambda: any(c > t for c in h.cleaned))
        assert t not in h.cleaned
        assert t in h.scheduler.pending_times()
        assert t in h.gen.pending_times()  # what every later checkpoint lists as pending
        assert h.tracker.get_blocks_of_batch(t)[0], "the failed batch's blocks are gone"
        # A failed batch is not waited for by a graceful stop (it never completes).
        assert h.scheduler.wait_idle(WAIT_S)
    finally:
        h.close()


def test_a_failed_batch_is_one_error_line_naming_each_failed_job(
        caplog: pytest.LogCaptureFixture) -> None:
    failed: list[int] = []

    def generate(t: int) -> list[Job]:
        def boom(name: str) -> Job:
            def run() -> None:
                raise ValueError(f"{name} of {t} failed")
            return Job(t, 0 if name == "save" else 1, name, run)

        if failed:
            return [Job(t, 0, "save", lambda: None)]
        failed.append(t)
        return [boom("save"), boom("print")]

    h = Harness(generate=generate)
    try:
        with caplog.at_level("WARNING", logger="walstream.driver.scheduler.job_scheduler"):
            h.gen.start()
            assert h.scheduler.await_error(WAIT_S) is not None
            t = failed[0]
            wait_until(lambda: any(r.levelname == "ERROR" for r in caplog.records))
            wait_until(lambda: t in h.scheduler.pending_times())
            h.scheduler.wait_idle(WAIT_S)
    finally:
        h.close()
    errors = [r.getMessage() for r in caplog.records
              if r.name == "walstream.driver.scheduler.job_scheduler"
              and r.levelname in ("ERROR", "WARNING")]
    assert len(errors) == 1, errors
    assert f"batch {t} failed" in errors[0]
    assert f"save of {t} failed" in errors[0] and f"print of {t} failed" in errors[0]
