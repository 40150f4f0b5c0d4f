from __future__ import annotations

import pytest

from strom.storage.config import TOPIC_CONFIG_KEYS, LogConfig
from strom.storage.errors import ConfigError


def test_properties_use_kafka_names_and_units() -> None:
    config = LogConfig.from_properties(
        {"segment.bytes": "1048576", "retention.ms": "-1", "cleanup.policy": "delete, compact"}
    )
    assert config.segment_bytes == 1_048_576
    assert config.retention_ms == -1
    assert config.cleanup_policy == "delete,compact"
    assert config.compacted and config.deletes


@pytest.mark.parametrize(
    ("raw", "kept", "compacted", "deletes"),
    [
        ("delete", "delete", False, True),
        ("compact", "compact", True, False),
        ("compact,delete", "compact,delete", True, True),
        (" delete , compact ", "delete,compact", True, True),  # Kafka keeps the order given
        ("delete,delete", "delete", False, True),
        ("", "", False, False),  # as Kafka: the empty list, neither retention nor compaction
    ],
)
def test_cleanup_policy_is_a_list_kept_in_its_order(
    raw: str, kept: str, compacted: bool, deletes: bool
) -> None:
    config = LogConfig.from_properties({"cleanup.policy": raw})
    assert (config.cleanup_policy, config.compacted, config.deletes) == (kept, compacted, deletes)
    assert config.to_properties()["cleanup.policy"] == kept


def test_from_properties_layers_over_a_base() -> None:
    base = LogConfig(retention_ms=1000, segment_ms=50)
    config = LogConfig.from_properties({"segment.ms": "60"}, base)
    assert (config.retention_ms, config.segment_ms) == (1000, 60)


def test_round_trip_through_properties() -> None:
    config = LogConfig(
        cleanup_policy="compact",
        message_timestamp_type="LogAppendTime",
        preallocate=True,
        min_cleanable_dirty_ratio=0.25,
    )
    assert LogConfig.from_properties(config.to_properties()) == config
    assert set(config.to_properties()) == set(TOPIC_CONFIG_KEYS)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "lots"),
        ("segment.bytes", "0"),
        ("retention.ms", "-2"),
        ("cleanup.policy", "forever"),
        ("cleanup.policy", "delete,forever"),
        ("message.timestamp.type", "Now"),
        ("preallocate", "maybe"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("no.such.key", "1"),
    ],
)
def test_bad_keys_and_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        LogConfig.from_properties({key: value})


def test_every_key_documents_its_default() -> None:
    defaults = LogConfig().to_properties()
    for key, info in TOPIC_CONFIG_KEYS.items():
        assert info.default == defaults[key]
        assert info.doc
        assert info.type in ("long", "int", "double", "boolean", "string", "list")
