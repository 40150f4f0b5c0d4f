from __future__ import annotations

from pathlib import Path

import pytest

from strom.base.clock import ManualClock
from strom.storage.config import LogConfig
from strom.storage.errors import (
    ConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicError,
)
from strom.storage.log_manager import LogManager, validate_topic_name

from .helpers import T0_MS, append, make_batch, read_all


def manager(tmp_path: Path, default_config: LogConfig | None = None) -> LogManager:
    logs = LogManager(tmp_path / "data", default_config or LogConfig(), ManualClock())
    logs.load()
    return logs


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("orders", True),
        ("a.b_c-D9", True),
        ("", False),
        (".", False),
        ("..", False),
        ("a/b", False),
        ("é", False),
        ("x" * 249, True),
        ("x" * 250, False),
    ],
)
def test_topic_name_rules(name: str, ok: bool) -> None:
    assert (validate_topic_name(name) is None) == ok


def test_create_topic_opens_partitions_and_survives_restart(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    metadata = logs.create_topic("orders", 3, {"retention.ms": "1000"})
    assert metadata.config.retention_ms == 1000
    assert logs.topic_by_id(metadata.topic_id) == metadata
    log = logs.log("orders", 2)
    assert log is not None and log.config.retention_ms == 1000
    append(log, make_batch([b"x", b"y"]))
    assert logs.log("orders", 3) is None
    logs.close()

    reopened = LogManager(tmp_path / "data", LogConfig(), ManualClock())
    assert reopened.load() == []
    assert reopened.topic_names() == ["orders"]
    restored = reopened.topic("orders")
    assert restored is not None
    assert restored.topic_id == metadata.topic_id
    assert restored.overrides == {"retention.ms": "1000"}
    reopened_log = reopened.log("orders", 2)
    assert reopened_log is not None and reopened_log.log_end_offset == 2
    reopened.close()


def test_load_without_clean_shutdown_recovers_and_says_so(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    logs.create_topic("events", 1)
    log = logs.log("events", 0)
    assert log is not None
    append(log, make_batch([b"a"]))
    log.flush()  # the process dies here: no close, no marker
    again = LogManager(tmp_path / "data", LogConfig(), ManualClock())
    messages = again.load()
    assert any("no clean shutdown marker" in message for message in messages)
    recovered = again.log("events", 0)
    assert recovered is not None and read_all(recovered) == [(0, None, b"a")]
    again.close()


def test_create_topic_refusals_create_nothing(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    logs.create_topic("a.b", 1)
    with pytest.raises(TopicExistsError):
        logs.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        logs.create_topic("a_b", 1)
    with pytest.raises(InvalidTopicError):
        logs.create_topic("bad name", 1)
    with pytest.raises(InvalidPartitionsError):
        logs.create_topic("zero", 0)
    with pytest.raises(ConfigError, match=r"segment\.bytes"):
        logs.create_topic("configured", 1, {"segment.bytes": "x"})
    checked = logs.create_topic("dry", 2, validate_only=True)
    assert checked.partitions == 2
    assert logs.topic_names() == ["a.b"]
    assert not (tmp_path / "data" / "dry-0").exists()
    logs.close()


def test_delete_topic_removes_files(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    metadata = logs.create_topic("gone", 2)
    assert (tmp_path / "data" / "gone-1").is_dir()
    logs.delete_topic("gone")
    assert logs.topic("gone") is None and logs.topic_by_id(metadata.topic_id) is None
    assert not (tmp_path / "data" / "gone-1").exists()
    with pytest.raises(UnknownTopicError):
        logs.delete_topic("gone")
    recreated = logs.create_topic("gone", 1)
    assert recreated.topic_id != metadata.topic_id
    logs.close()


def test_create_partitions_only_grows(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    logs.create_topic("grow", 1)
    logs.create_partitions("grow", 3)
    assert logs.log("grow", 2) is not None
    with pytest.raises(InvalidPartitionsError):
        logs.create_partitions("grow", 3)
    with pytest.raises(UnknownTopicError):
        logs.create_partitions("nope", 3)
    logs.close()
    reopened = manager(tmp_path)
    grown = reopened.topic("grow")
    assert grown is not None and grown.partitions == 3
    reopened.close()


def test_alter_topic_config_replaces_overrides_and_applies_them(tmp_path: Path) -> None:
    logs = manager(tmp_path, LogConfig(retention_ms=5000))
    logs.create_topic("tuned", 1, {"segment.ms": "100"})
    logs.alter_topic_config("tuned", {"cleanup.policy": "compact"})
    log = logs.log("tuned", 0)
    assert log is not None
    assert log.config.compacted
    assert log.config.segment_ms == LogConfig().segment_ms  # the old override is gone
    assert log.config.retention_ms == 5000  # broker default still underneath
    with pytest.raises(ConfigError):
        logs.alter_topic_config("tuned", {"cleanup.policy": "sometimes"})
    logs.close()
    reopened = manager(tmp_path, LogConfig(retention_ms=5000))
    tuned = reopened.topic("tuned")
    assert tuned is not None and tuned.overrides == {"cleanup.policy": "compact"}
    reopened.close()


def test_housekeeping_and_flush_selection(tmp_path: Path) -> None:
    batch = make_batch([b"h" * 100])
    logs = manager(tmp_path)
    logs.create_topic(
        "old", 1, {"segment.bytes": str(len(batch)), "retention.ms": "1000", "flush.messages": "2"}
    )
    logs.create_topic("quiet", 1)
    old = logs.log("old", 0)
    assert old is not None
    for _ in range(3):
        append(old, batch)
    assert logs.logs_needing_flush(T0_MS) == [old]
    events = logs.run_housekeeping(T0_MS + 5000)
    assert events == [f"retention on old-0: deleted {2 * len(batch)} bytes, log start offset now 2"]
    assert old.log_start_offset == 2
    logs.close()
