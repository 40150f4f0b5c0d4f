"""Group configs (KIP-848): per-group overrides of the consumer group protocol's session timeout
and heartbeat interval, under Kafka's names. Pure: which keys there are, what a value may be, and
what a group's value is; the broker keeps them (a file on a single node, ZooKeeper in a cluster).

A group config applies to one group, whether the group exists yet or not. Its value must lie
within the broker's bounds (``group.consumer.min/max.*``); a value kept from before the bounds
changed is held to them when used. A group without an override gets the broker's
``group.consumer.session.timeout.ms`` / ``group.consumer.heartbeat.interval.ms``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from strom.coordinator.config import CoordinatorConfig

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
# Kafka's group configs of share and streams groups, which strom does not have.
NOT_OFFERED_PREFIXES = ("share.", "streams.", "errors.deadletterqueue.")


@dataclass(frozen=True)
class GroupConfigKey:
    name: str
    doc: str
    default_key: str  # the broker key whose value a group without an override gets

    def default(self, config: CoordinatorConfig) -> int:
        if self.name == SESSION_TIMEOUT:
            return config.consumer_group_session_timeout_ms
        return config.consumer_group_heartbeat_interval_ms

    def bounds(self, config: CoordinatorConfig) -> tuple[tuple[str, int], tuple[str, int]]:
        """(name, value) of the smallest and the largest value the broker allows."""
        if self.name == SESSION_TIMEOUT:
            return (
                ("group.consumer.min.session.timeout.ms", config.consumer_group_min_session_timeout_ms),
                ("group.consumer.max.session.timeout.ms", config.consumer_group_max_session_timeout_ms),
            )
        return (
            ("group.consumer.min.heartbeat.interval.ms", config.consumer_group_min_heartbeat_interval_ms),
            ("group.consumer.max.heartbeat.interval.ms", config.consumer_group_max_heartbeat_interval_ms),
        )

    def held(self, value: int, config: CoordinatorConfig) -> int:
        """``value`` held within the broker's bounds as they are now."""
        (_, low), (_, high) = self.bounds(config)
        return min(max(value, low), high)


GROUP_CONFIG_KEYS: dict[str, GroupConfigKey] = {
    key.name: key
    for key in (
        GroupConfigKey(
            HEARTBEAT_INTERVAL,
            "The heartbeat interval given to the members of a consumer group.",
            "group.consumer.heartbeat.interval.ms",
        ),
        GroupConfigKey(
            SESSION_TIMEOUT,
            "The timeout to detect client failures when using the consumer group protocol.",
            "group.consumer.session.timeout.ms",
        ),
    )
}


class GroupConfigError(ValueError):
    """A group config key strom does not have, or a value it cannot take; the message says which."""


def check_group_configs(
    values: Mapping[str, str], config: CoordinatorConfig, *, within_bounds: bool = True
) -> dict[str, int]:
    """``values`` (Kafka's names, values as text) checked, as ints: keys strom has, whole numbers,
    and (``within_bounds``: a change being made) within the broker's bounds. Values kept from
    before are checked without the bounds, which may have moved since (they are held to them
    when used)."""
    checked: dict[str, int] = {}
    for name, text in values.items():
        key = GROUP_CONFIG_KEYS.get(name)
        if key is None:
            if name.startswith(NOT_OFFERED_PREFIXES):
                raise GroupConfigError(
                    f"group config {name}: strom has consumer groups only (no share or streams groups)"
                )
            raise GroupConfigError(
                f"unknown group config {name!r} (strom has {', '.join(sorted(GROUP_CONFIG_KEYS))})"
            )
        try:
            value = int(text.strip())
        except (AttributeError, ValueError):
            raise GroupConfigError(f"invalid value {text!r} for group config {name}: expected int") from None
        (low_name, low), (high_name, high) = key.bounds(config)
        if within_bounds and value < low:
            raise GroupConfigError(f"{name} must be at least {low_name} ({low}), not {value}")
        if within_bounds and value > high:
            raise GroupConfigError(f"{name} must be at most {high_name} ({high}), not {value}")
        checked[name] = value
    return checked
