from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from walstream.wal import KafkaWriteAheadLog


@pytest.fixture
def wal_factory(
    bootstrap: str, unique_name: Callable[[str], str]
) -> Iterator[Callable[..., KafkaWriteAheadLog]]:
    """Open Kafka WALs with unique names; close them (and delete their topics) after."""
    opened: list[KafkaWriteAheadLog] = []

    def make(name: str | None = None, **options: Any) -> KafkaWriteAheadLog:
        options.setdefault("write_timeout_s", 20.0)
        options.setdefault("read_timeout_s", 20.0)
        log = KafkaWriteAheadLog(bootstrap, name or unique_name("wal"), **options)
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()
    if opened:
        cleaner = KafkaWriteAheadLog(bootstrap, opened[0].name)
        for log in opened:
            cleaner.name = log.name
            cleaner._clean_now(2**42)
        cleaner.close()
