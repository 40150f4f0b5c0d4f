"""Config entries as DescribeConfigs, CreateTopics and the CLI show them."""

from __future__ import annotations

from dataclasses import dataclass

from strom.broker.config import BROKER_CONFIG_KEYS
from strom.broker.state import BrokerState
from strom.storage import TOPIC_CONFIG_KEYS, TopicMetadata

# ConfigSource values of DescribeConfigs v1+.
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# ConfigType values of DescribeConfigs v3+.
CONFIG_TYPES = {"bool": 1, "boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7}

# Broker keys whose value is the default of a topic key: shown as synonyms, and the source of a
# topic value that was not overridden but was set in the broker's configuration.
TOPIC_KEY_BROKER_SYNONYM = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "index.interval.bytes": "log.index.interval.bytes",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
}


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    source: int
    config_type: int
    documentation: str | None
    synonyms: tuple[tuple[str, str | None, int], ...] = ()


def _kind(info: object) -> str:
    return str(getattr(info, "kind", getattr(info, "type", "string")))


def topic_config_entries(state: BrokerState, topic: TopicMetadata) -> list[ConfigEntry]:
    values = topic.config.to_properties()
    entries: list[ConfigEntry] = []
    for name in sorted(TOPIC_CONFIG_KEYS):
        info = TOPIC_CONFIG_KEYS[name]
        broker_key = TOPIC_KEY_BROKER_SYNONYM.get(name)
        broker_set = broker_key is not None and broker_key in state.config.values
        synonyms: list[tuple[str, str | None, int]] = []
        if name in topic.overrides:
            source = SOURCE_DYNAMIC_TOPIC
            synonyms.append((name, topic.overrides[name], SOURCE_DYNAMIC_TOPIC))
        elif broker_set:
            source = SOURCE_STATIC_BROKER
        else:
            source = SOURCE_DEFAULT
        if broker_set and broker_key is not None:
            synonyms.append((broker_key, state.config.values[broker_key], SOURCE_STATIC_BROKER))
        entries.append(
            ConfigEntry(
                name=name,
                value=values.get(name, str(getattr(info, "default", ""))),
                read_only=False,
                source=source,
                config_type=CONFIG_TYPES.get(_kind(info), 2),
                documentation=str(getattr(info, "doc", "")) or None,
                synonyms=tuple(synonyms),
            )
        )
    return entries


def broker_config_entries(state: BrokerState) -> list[ConfigEntry]:
    entries: list[ConfigEntry] = []
    for name in sorted(BROKER_CONFIG_KEYS):
        key = BROKER_CONFIG_KEYS[name]
        is_set = name in state.config.values
        value = state.config.values.get(name, key.default) or None
        source = SOURCE_STATIC_BROKER if is_set else SOURCE_DEFAULT
        entries.append(
            ConfigEntry(
                name=name,
                value=value,
                read_only=True,
                source=source,
                config_type=CONFIG_TYPES.get(key.kind, 2),
                documentation=key.doc,
                synonyms=((name, value, source),) if is_set else (),
            )
        )
    return entries
