"""``strom quotas describe|alter``: client quotas (DescribeClientQuotas, AlterClientQuotas), with
kafka-configs' options for them.

An entity is one or two ``--entity-type users|clients`` (``user`` / ``client-id`` also accepted),
each followed by ``--entity-name NAME`` or ``--entity-default``::

    strom quotas alter --entity-type users --entity-name alice \\
        --entity-type clients --entity-default --add-config producer_byte_rate=1048576
    strom quotas describe --entity-type clients            # every client-id entity, and the default

``describe`` without a name for a type shows every entity of that type, named or default; with
entity types it shows only entities of exactly those types (kafka-configs' view); with none, every
quota entity.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from strom.cli.common import add_command, add_command_group, open_admin
from strom.cli.configs import parse_config_list
from strom.cli.output import Report, Table, UsageError, write_report

if TYPE_CHECKING:
    from strom.client.admin import QuotaEntityKey

__all__ = ["entity_label", "parse_entity", "quotas_report", "register"]

ENTITY_TYPE_NAMES = {"users": "user", "user": "user", "clients": "client-id", "client-id": "client-id"}
_UNNAMED = object()  # --entity-type given without --entity-name or --entity-default yet
DEFAULT_LABEL = "<default>"


class _EntityType(argparse.Action):
    def __call__(self, parser: Any, namespace: Any, values: Any, option: str | None = None) -> None:
        entity_type = ENTITY_TYPE_NAMES.get(str(values))
        if entity_type is None:
            parser.error(f"--entity-type takes users or clients, not {values!r}")
        namespace.entity.append([entity_type, _UNNAMED])


class _EntityName(argparse.Action):
    def __call__(self, parser: Any, namespace: Any, values: Any, option: str | None = None) -> None:
        if not namespace.entity or namespace.entity[-1][1] is not _UNNAMED:
            parser.error(f"{option} must follow an --entity-type")
        namespace.entity[-1][1] = None if option == "--entity-default" else str(values)


def _add_entity_arguments(parser: argparse.ArgumentParser) -> None:
    parser.set_defaults(entity=[])
    parser.add_argument(
        "--entity-type",
        action=_EntityType,
        metavar="users|clients",
        help="an entity type (repeatable: users and clients)",
    )
    parser.add_argument(
        "--entity-name", action=_EntityName, metavar="NAME", help="the name of the entity type before"
    )
    parser.add_argument(
        "--entity-default",
        action=_EntityName,
        nargs=0,
        help="the default entity of the type before (<default>)",
    )


def register(commands: Any) -> None:
    subcommands = add_command_group(
        commands, "quotas", help_text="describe and change client quotas (per user and client id)"
    )
    describe = add_command(
        subcommands,
        "describe",
        help_text="show client quotas (all of them, or those of the entity types and names given)",
        run=_describe,
    )
    _add_entity_arguments(describe)
    alter = add_command(
        subcommands,
        "alter",
        help_text="set or delete quotas of one entity",
        description=(
            "Set or delete quotas of one entity (a user, a client id, or both; each named or the "
            "default) with AlterClientQuotas. Quotas: producer_byte_rate and consumer_byte_rate "
            "(bytes/s), request_percentage (percent of one thread). They apply at once."
        ),
        run=_alter,
        output=False,
    )
    _add_entity_arguments(alter)
    alter.add_argument(
        "--add-config", action="append", default=[], metavar="K=V[,K2=V2]", help="quotas to set (repeatable)"
    )
    alter.add_argument(
        "--delete-config", action="append", default=[], metavar="K[,K2]", help="quotas to delete (repeatable)"
    )
    alter.add_argument("--validate-only", action="store_true", help="ask the broker to check the change only")


# -- pure helpers --------------------------------------------------------------------------------------


def parse_entity(pairs: Sequence[Sequence[Any]], *, need_names: bool) -> list[tuple[str, object]]:
    """The (entity type, name) pairs given; a name is a string, None (default), or unnamed."""
    entity = [(str(entity_type), name) for entity_type, name in pairs]
    types = [entity_type for entity_type, _ in entity]
    if len(set(types)) != len(types):
        raise UsageError("each entity type may be given once")
    if need_names:
        if not entity:
            raise UsageError(
                "give the entity: --entity-type users|clients with --entity-name or --entity-default"
            )
        for entity_type, name in entity:
            if name is _UNNAMED:
                raise UsageError(f"--entity-type {entity_type}: give --entity-name NAME or --entity-default")
    return entity


def entity_label(entity: QuotaEntityKey) -> str:
    """``user=alice, client-id=<default>``."""
    return ", ".join(
        f"{entity_type}={DEFAULT_LABEL if name is None else name}" for entity_type, name in entity
    )


def quotas_report(described: dict[QuotaEntityKey, dict[str, float]]) -> Report:
    entities = sorted(described, key=lambda entity: [(kind, name or "") for kind, name in entity])
    value = [
        {"entity": {kind: name for kind, name in entity}, "quotas": dict(sorted(described[entity].items()))}
        for entity in entities
    ]
    rows: list[Sequence[object]] = [
        [entity_label(entity), key, f"{quota:g}"]
        for entity in entities
        for key, quota in sorted(described[entity].items())
    ]
    report = Report(value, [Table(["ENTITY", "QUOTA", "VALUE"], rows)] if rows else [])
    if not rows:
        report.notes.append("no client quotas match")
    return report


def _number(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise UsageError(f"--add-config {key}: {text!r} is not a number") from None


# -- commands ------------------------------------------------------------------------------------------


def _describe(arguments: argparse.Namespace) -> int:
    from strom.client.admin import QuotaFilterComponent, QuotaMatch

    entity = parse_entity(arguments.entity, need_names=False)
    # A type without a name stands for its named entities and its default: one query per choice.
    choices = [
        [QuotaFilterComponent(kind, QuotaMatch.ANY), QuotaFilterComponent(kind, QuotaMatch.DEFAULT)]
        if name is _UNNAMED
        else [
            QuotaFilterComponent(kind, QuotaMatch.DEFAULT)
            if name is None
            else QuotaFilterComponent(kind, QuotaMatch.EXACT, str(name))
        ]
        for kind, name in entity
    ]
    described: dict[QuotaEntityKey, dict[str, float]] = {}
    with open_admin(arguments) as admin:
        for components in itertools.product(*choices):
            described.update(admin.describe_client_quotas(components, strict=bool(entity)))
    write_report(quotas_report(described), arguments.output)
    return 0


def _alter(arguments: argparse.Namespace) -> int:
    from strom.client.admin import quota_entity_key

    entity = quota_entity_key(
        (kind, None if name is None else str(name))
        for kind, name in parse_entity(arguments.entity, need_names=True)
    )
    try:
        sets = [assignment for text in arguments.add_config for assignment in parse_config_list(text)]
    except ValueError as error:
        raise UsageError(f"--add-config: {error}") from None
    deletes = [name.strip() for text in arguments.delete_config for name in text.split(",") if name.strip()]
    if not sets and not deletes:
        raise UsageError("nothing to change: give --add-config or --delete-config")
    both = {key for key, _ in sets} & set(deletes)
    if both:
        raise UsageError(f"both set and deleted: {', '.join(sorted(both))}")
    ops: dict[str, float | None] = {key: _number(key, value) for key, value in sets}
    ops.update(dict.fromkeys(deletes))
    with open_admin(arguments) as admin:
        admin.alter_client_quotas({entity: ops}, validate_only=arguments.validate_only)
    verb = "would set" if arguments.validate_only else "set"
    for key, value in sets:
        print(f"{verb} {key}={value} on {entity_label(entity)}")
    for key in deletes:
        print(f"{'would delete' if arguments.validate_only else 'deleted'} {key} from {entity_label(entity)}")
    if arguments.validate_only:
        print("validated only: nothing changed", file=sys.stderr)
    return 0
