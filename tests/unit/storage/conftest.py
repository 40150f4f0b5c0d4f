"""Fixtures for the storage tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from strom.storage.config import LogConfig
from strom.storage.partition_log import PartitionLog

OpenLog = Callable[..., PartitionLog]


@pytest.fixture
def open_log(tmp_path: Path) -> Iterator[OpenLog]:
    """Factory: open_log(config, recover_all=...) opens the log of tmp_path/topic-0."""
    opened: list[PartitionLog] = []

    def factory(config: LogConfig | None = None, *, recover_all: bool = True) -> PartitionLog:
        log = PartitionLog.open(
            tmp_path / "topic-0", "topic", 0, config or LogConfig(), recover_all=recover_all
        )
        opened.append(log)
        return log

    yield factory
    for log in opened:
        log.close()
