"""Config entries as DescribeConfigs, CreateTopics and the CLI show them.

A topic's value comes from its own override, else from the broker key that is its default (set
dynamically for this broker, dynamically cluster-wide, statically, or Kafka's default, in that
order of precedence); a broker key's value from the highest of those layers. The source and the
synonyms reported say which, with Kafka's ConfigSource codes.
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.broker.config import BROKER_CONFIG_KEYS, DYNAMIC_BROKER_CONFIG_KEYS, ConfigLayer
from strom.broker.state import BrokerState
from strom.storage import TOPIC_CONFIG_KEYS, TopicMetadata

# ConfigSource values of DescribeConfigs v1+.
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_DYNAMIC_BROKER = int(ConfigLayer.DYNAMIC_BROKER)
SOURCE_DYNAMIC_DEFAULT_BROKER = int(ConfigLayer.DYNAMIC_DEFAULT)
SOURCE_STATIC_BROKER = int(ConfigLayer.STATIC)
SOURCE_DEFAULT = int(ConfigLayer.DEFAULT)

# ConfigType values of DescribeConfigs v3+.
CONFIG_TYPES = {"bool": 1, "boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7}

# Broker keys whose value is the default of a topic key, in Kafka's order of precedence (a set
# log.retention.ms wins over log.retention.hours): shown as synonyms, and the source of a topic
# value that was not overridden.
TOPIC_KEY_BROKER_SYNONYMS: dict[str, tuple[str, ...]] = {
    "segment.bytes": ("log.segment.bytes",),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "retention.bytes": ("log.retention.bytes",),
    "cleanup.policy": ("log.cleanup.policy",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms",),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "max.message.bytes": ("message.max.bytes",),
    "message.timestamp.type": ("log.message.timestamp.type",),
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


def _broker_synonyms(state: BrokerState, broker_keys: tuple[str, ...]) -> list[tuple[str, str | None, int]]:
    return [
        (broker_key, value or None, int(layer))
        for broker_key in broker_keys
        for layer, value in state.config.layers(broker_key)
    ]


def topic_config_entries(state: BrokerState, topic: TopicMetadata) -> list[ConfigEntry]:
    values = topic.config.to_properties()
    entries: list[ConfigEntry] = []
    for name in sorted(TOPIC_CONFIG_KEYS):
        info = TOPIC_CONFIG_KEYS[name]
        synonyms: list[tuple[str, str | None, int]] = []
        if name in topic.overrides:
            synonyms.append((name, topic.overrides[name], SOURCE_DYNAMIC_TOPIC))
        synonyms += _broker_synonyms(state, TOPIC_KEY_BROKER_SYNONYMS.get(name, ()))
        entries.append(
            ConfigEntry(
                name=name,
                value=values.get(name, str(getattr(info, "default", ""))),
                read_only=False,
                source=synonyms[0][2] if synonyms else SOURCE_DEFAULT,
                config_type=CONFIG_TYPES.get(_kind(info), 2),
                documentation=str(getattr(info, "doc", "")) or None,
                synonyms=tuple(synonyms),
            )
        )
    return entries


def broker_config_entries(state: BrokerState) -> list[ConfigEntry]:
    """Every broker key with the value in force on this broker (DescribeConfigs on "<node id>")."""
    config = state.config
    entries: list[ConfigEntry] = []
    for name in sorted(BROKER_CONFIG_KEYS):
        key = BROKER_CONFIG_KEYS[name]
        entries.append(
            ConfigEntry(
                name=name,
                value=config.raw(name) or None,
                read_only=name not in DYNAMIC_BROKER_CONFIG_KEYS,
                source=int(config.layer(name)),
                config_type=CONFIG_TYPES.get(key.kind, 2),
                documentation=key.doc,
                synonyms=tuple((name, value or None, int(layer)) for layer, value in config.layers(name)),
            )
        )
    # Kafka's dynamic keys strom does not use, where set: shown as Kafka shows them.
    for name in sorted((set(config.dynamic_broker) | set(config.dynamic_default)) - set(BROKER_CONFIG_KEYS)):
        layers = [
            (layer, values[name])
            for layer, values in (
                (SOURCE_DYNAMIC_BROKER, config.dynamic_broker),
                (SOURCE_DYNAMIC_DEFAULT_BROKER, config.dynamic_default),
            )
            if name in values
        ]
        entries.append(_unused_entry(name, layers))
    return entries


def _unused_entry(name: str, layers: list[tuple[int, str]]) -> ConfigEntry:
    """A Kafka key strom does not use, set dynamically: its value in the highest layer."""
    source, value = layers[0]
    return ConfigEntry(
        name=name,
        value=value or None,
        read_only=False,
        source=source,
        config_type=CONFIG_TYPES["string"],
        documentation="Kafka's key; strom keeps it and does not use it.",
        synonyms=tuple((name, layer_value or None, layer) for layer, layer_value in layers),
    )


def cluster_default_config_entries(state: BrokerState) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults only, as Kafka answers DescribeConfigs on BROKER ""."""
    entries: list[ConfigEntry] = []
    for name, value in sorted(state.config.dynamic_default.items()):
        if name not in BROKER_CONFIG_KEYS:
            entries.append(_unused_entry(name, [(SOURCE_DYNAMIC_DEFAULT_BROKER, value)]))
            continue
        key = BROKER_CONFIG_KEYS[name]
        entries.append(
            ConfigEntry(
                name=name,
                value=value or None,
                read_only=False,
                source=SOURCE_DYNAMIC_DEFAULT_BROKER,
                config_type=CONFIG_TYPES.get(key.kind, 2),
                documentation=key.doc,
                synonyms=((name, value or None, SOURCE_DYNAMIC_DEFAULT_BROKER),),
            )
        )
    return entries
