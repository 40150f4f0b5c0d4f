"""LogManager.set_default_config: dynamic broker defaults reach every topic without an override,
at once, without writing a file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from strom.base.clock import ManualClock
from strom.storage.config import LogConfig
from strom.storage.log_manager import LogManager


def test_new_defaults_apply_to_topics_without_an_override(tmp_path: Path) -> None:
    logs = LogManager(tmp_path / "data", LogConfig(), ManualClock())
    logs.load()
    logs.create_topic("plain", 2)
    logs.create_topic("own", 1, {"retention.ms": "1000"})
    topic_files = sorted((tmp_path / "data").rglob("*.json"))
    written = {path: path.stat().st_mtime_ns for path in topic_files}

    changed = logs.set_default_config(replace(LogConfig(), retention_ms=60_000))

    assert changed == ["plain"]
    assert [logs.log("plain", p).config.retention_ms for p in (0, 1)] == [60_000, 60_000]  # type: ignore[union-attr]
    assert logs.topic("plain").config.retention_ms == 60_000  # type: ignore[union-attr]
    assert logs.log("own", 0).config.retention_ms == 1000  # type: ignore[union-attr]
    assert {path: path.stat().st_mtime_ns for path in topic_files} == written
    logs.create_partitions("plain", 3)
    logs.create_topic("later", 1)
    assert logs.log("plain", 2).config.retention_ms == 60_000  # type: ignore[union-attr]
    assert logs.log("later", 0).config.retention_ms == 60_000  # type: ignore[union-attr]
    logs.close()
