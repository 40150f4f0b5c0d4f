"""``strom configs describe|alter``: the configs of a topic, a broker, every broker's default, or
a group, like kafka-configs (DescribeConfigs, IncrementalAlterConfigs).

``--topic T`` is kafka-configs' ``--entity-type topics --entity-name T``; ``--broker N`` its
``--entity-type brokers --entity-name N``; ``--broker-defaults`` its ``--entity-type brokers
--entity-default`` (the cluster-wide dynamic default, the broker resource named ""); ``--group G``
its ``--entity-type groups --entity-name G`` (the consumer group protocol's session timeout and
heartbeat interval of one group).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.cli.common import add_command, add_command_group, open_admin
from strom.cli.output import CliError, Report, Table, UsageError, write_report

if TYPE_CHECKING:
    from strom.client.admin import Admin, ConfigEntry, ConfigResource

__all__ = [
    "CONFIG_SOURCE_NAMES",
    "Target",
    "alter_resource_configs",
    "configs_report",
    "parse_config_list",
    "register",
]

# DescribeConfigs v1+ config sources (Kafka's numbering); v0 has only the is_default flag.
CONFIG_SOURCE_NAMES = {
    1: "topic",
    2: "dynamic-broker",
    3: "dynamic-default-broker",
    4: "static-broker",
    5: "default",
    6: "dynamic-broker-logger",
    7: "client-metrics",
    8: "group",
}


@dataclass(frozen=True)
class Target:
    """What the configs belong to, and which config source means "set on it"."""

    kind: str  # "topic" | "broker" | "broker-defaults" | "group"
    name: str

    @property
    def set_source(self) -> int:
        return {"topic": 1, "broker": 2, "broker-defaults": 3, "group": 8}[self.kind]

    def describe(self) -> str:
        if self.kind == "topic":
            return f"topic {self.name!r}"
        if self.kind == "broker":
            return f"broker {self.name}"
        if self.kind == "group":
            return f"group {self.name!r}"
        return "the brokers' defaults"

    def resource(self) -> ConfigResource:
        from strom.client.admin import ConfigResource, ConfigResourceType

        kinds = {"topic": ConfigResourceType.TOPIC, "group": ConfigResourceType.GROUP}
        return ConfigResource(kinds.get(self.kind, ConfigResourceType.BROKER), self.name)


def is_set_on(entry: ConfigEntry, target: Target) -> bool:
    """Whether ``entry`` is set on the target itself (not inherited or a default)."""
    if entry.source in CONFIG_SOURCE_NAMES:
        return entry.source == target.set_source
    return not entry.is_default  # DescribeConfigs v0


def _add_target_arguments(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--topic", metavar="NAME", help="a topic's configs")
    target.add_argument("--broker", metavar="ID", help="one broker's configs")
    target.add_argument(
        "--broker-defaults",
        action="store_true",
        help="the cluster-wide dynamic defaults every broker takes (kafka-configs --entity-default)",
    )
    target.add_argument(
        "--group",
        metavar="ID",
        help="a group's configs (consumer.session.timeout.ms, consumer.heartbeat.interval.ms)",
    )


def register(commands: Any) -> None:
    subcommands = add_command_group(
        commands, "configs", help_text="describe and change the configs of topics, brokers and groups"
    )
    describe = add_command(
        subcommands,
        "describe",
        help_text="show the configs set on a topic, broker or group (--all: every config)",
        run=_describe,
    )
    _add_target_arguments(describe)
    describe.add_argument(
        "--all", action="store_true", help="every config with its value and source, not only those set"
    )

    alter = add_command(
        subcommands,
        "alter",
        help_text="set or delete configs of a topic, broker or group, leaving the others alone",
        description=(
            "Set or delete configs of a topic, broker or group with IncrementalAlterConfigs: configs "
            "not named keep their values. A deleted config returns to what the topic, broker or group "
            "inherits (a broker's value, or the default). Unknown config names are refused."
        ),
        run=_alter,
        output=False,
    )
    _add_target_arguments(alter)
    alter.add_argument(
        "--add-config",
        action="append",
        default=[],
        metavar="K=V[,K2=V2]",
        help="configs to set; a list value in brackets: cleanup.policy=[compact,delete] (repeatable)",
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="K[,K2]",
        help="configs to delete (repeatable)",
    )
    alter.add_argument(
        "--validate-only", action="store_true", help="ask the broker to check the change without making it"
    )


# -- pure helpers --------------------------------------------------------------------------------------


def parse_config_list(text: str) -> list[tuple[str, str]]:
    """kafka-configs' ``k1=v1,k2=[a,b]``: assignments separated by commas outside brackets; a
    bracketed value is a list, given to the broker comma separated (``a,b``)."""
    items: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"{text!r}: ']' without '['")
        if char == "," and depth == 0:
            items.append("".join(current))
            current = []
            continue
        current.append(char)
    if depth != 0:
        raise ValueError(f"{text!r}: '[' without ']'")
    items.append("".join(current))
    assignments: list[tuple[str, str]] = []
    for item in items:
        if not item.strip():
            continue
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ValueError(f"expected KEY=VALUE, got {item!r}")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = ",".join(part.strip() for part in value[1:-1].split(","))
        assignments.append((key.strip(), value))
    return assignments


def _parse_names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def configs_report(target: Target, entries: Mapping[str, ConfigEntry], show_all: bool) -> Report:
    """The configs of one target as JSON and a table (pure: tests build it by hand)."""
    rows = [
        {
            "name": entry.name,
            "value": None if entry.is_sensitive else entry.value,
            "source": CONFIG_SOURCE_NAMES.get(entry.source, "default" if entry.is_default else "unknown"),
            "set": is_set_on(entry, target),
            "read_only": entry.read_only,
            "sensitive": entry.is_sensitive,
        }
        for entry in sorted(entries.values(), key=lambda each: each.name)
        if show_all or is_set_on(entry, target)
    ]
    value = {"resource": target.kind, "name": target.name, "configs": rows}
    table = Table(
        ["CONFIG", "VALUE", "SOURCE", "READ-ONLY"],
        [
            [
                row["name"],
                "(sensitive)" if row["sensitive"] else row["value"],
                row["source"],
                row["read_only"],
            ]
            for row in rows
        ],
        title=f"Configs of {target.describe()}"
        + ("" if show_all else " (set on it; --all shows every config)"),
    )
    report = Report(value, [table] if rows else [])
    if not rows:
        report.notes.append(f"no configs set on {target.describe()} (--all shows every config)")
    return report


def _check_known(names: list[str], known: set[str], target: Target) -> None:
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise CliError(f"{target.describe()} has no config {name!r}{hint}")


def alter_resource_configs(
    admin: Admin,
    target: Target,
    sets: list[tuple[str, str]],
    deletes: list[str],
    validate_only: bool = False,
) -> list[str]:
    """Check every name against the target's configs (DescribeConfigs lists them all), then apply
    the changes with IncrementalAlterConfigs. Returns what was done, one line each."""
    from strom.client.admin import AlterConfigOperation

    both = {key for key, _ in sets} & set(deletes)
    if both:
        raise UsageError(f"both set and deleted: {', '.join(sorted(both))}")
    resource = target.resource()
    current = admin.describe_configs([resource])[resource]
    known = set(current)
    if target.kind == "broker-defaults":
        # The cluster-wide default describes only what is set on it (as in Kafka): the names a
        # broker knows come from a live broker's own configs.
        from strom.client.admin import ConfigResource, ConfigResourceType

        node = ConfigResource(ConfigResourceType.BROKER, str(admin.describe_cluster().brokers[0].node_id))
        known |= set(admin.describe_configs([node])[node])
    _check_known([key for key, _ in sets] + deletes, known, target)
    changes: list[tuple[str, AlterConfigOperation, str | None]] = [
        (key, AlterConfigOperation.SET, value) for key, value in sets
    ]
    changes += [(key, AlterConfigOperation.DELETE, None) for key in deletes]
    admin.incremental_alter_configs({resource: changes}, validate_only=validate_only)
    where = target.describe()
    done = [f"{'would set' if validate_only else 'set'} {key}={value} on {where}" for key, value in sets]
    for key in deletes:
        if not is_set_on(current[key], target):
            done.append(f"{key} was not set on {where}: nothing to delete")
        else:
            verb = "would delete" if validate_only else "deleted"
            done.append(f"{verb} {key} from {where} (back to what it inherits)")
    return done


# -- commands ------------------------------------------------------------------------------------------


def _target_of(arguments: argparse.Namespace) -> Target:
    if arguments.topic is not None:
        return Target("topic", arguments.topic)
    if arguments.broker is not None:
        if not arguments.broker.isdigit():
            raise UsageError(f"--broker takes a broker id (a number), not {arguments.broker!r}")
        return Target("broker", arguments.broker)
    if arguments.group is not None:
        return Target("group", arguments.group)
    return Target("broker-defaults", "")


def _describe(arguments: argparse.Namespace) -> int:
    target = _target_of(arguments)
    resource = target.resource()
    with open_admin(arguments) as admin:
        entries = admin.describe_configs([resource])[resource]
    write_report(configs_report(target, entries, arguments.all), arguments.output)
    return 0


def _alter(arguments: argparse.Namespace) -> int:
    target = _target_of(arguments)
    try:
        sets = [assignment for text in arguments.add_config for assignment in parse_config_list(text)]
    except ValueError as error:
        raise UsageError(f"--add-config: {error}") from None
    deletes = [name for text in arguments.delete_config for name in _parse_names(text)]
    if not sets and not deletes:
        raise UsageError("nothing to change: give --add-config or --delete-config")
    with open_admin(arguments) as admin:
        done = alter_resource_configs(admin, target, sets, deletes, arguments.validate_only)
    for line in done:
        print(line)
    if arguments.validate_only:
        print("validated only: nothing changed", file=sys.stderr)
    return 0
