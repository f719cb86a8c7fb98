"""Fixtures of the driver's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.driver.generator_harness import Harness


@pytest.fixture
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.close()
