"""``strom acls add|list|remove``: the broker's ACLs, like kafka-acls (CreateAcls, DescribeAcls,
DeleteAcls).

Resources: ``--topic``, ``--group``, ``--transactional-id`` (each repeatable) and ``--cluster``;
``--resource-pattern-type`` literal (the default) or prefixed for ``add``, and also any or match
for ``list`` and ``remove`` (match: every binding that applies to the named resource, wildcard and
prefixes included). Principals ``--allow-principal`` / ``--deny-principal`` (``User:alice``,
``User:*``), ``--operation`` (kafka-acls' names: Read, Write, Create, Delete, Alter, Describe,
ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, All; repeatable), ``--host``
(default ``*``, every host).

``add`` makes one binding per resource x principal x operation (x host). ``remove`` deletes the
bindings its options select (an option left out selects every value of it) and needs at least one
resource, so that it never removes every ACL by accident. ``list`` without options shows every
binding.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

from strom.cli.common import add_command, add_command_group, open_admin
from strom.cli.output import Report, Table, UsageError, write_report
from strom.security.acl import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.security.principal import KafkaPrincipal

__all__ = ["acls_report", "bindings_to_add", "filters_of", "parse_operation", "register"]

# kafka-acls' operation names, and the codes' own names (READ, CLUSTER_ACTION), case-insensitive.
_OPERATION_NAMES = {
    operation.name.replace("_", "").lower(): operation
    for operation in AclOperation
    if operation not in (AclOperation.UNKNOWN, AclOperation.ANY)
}


def parse_operation(text: str) -> AclOperation:
    found = _OPERATION_NAMES.get(text.replace("_", "").replace("-", "").lower())
    if found is None:
        names = ", ".join(sorted(_display(operation) for operation in _OPERATION_NAMES.values()))
        raise UsageError(f"--operation: {text!r} is not an operation ({names})")
    return found


def _display(operation: AclOperation) -> str:
    """kafka-acls' spelling: ClusterAction, DescribeConfigs."""
    return "".join(part.capitalize() for part in operation.name.split("_"))


def _principal(text: str) -> str:
    try:
        KafkaPrincipal.parse(text)
    except ValueError as error:
        raise UsageError(f"principal: {error}") from None
    return text


def _resources(arguments: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    resources = [(ResourceType.TOPIC, name) for name in arguments.topic]
    resources += [(ResourceType.GROUP, name) for name in arguments.group]
    resources += [(ResourceType.TRANSACTIONAL_ID, name) for name in arguments.transactional_id]
    if arguments.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return resources


def bindings_to_add(
    resources: Sequence[tuple[ResourceType, str]],
    pattern_type: PatternType,
    allow: Sequence[str],
    deny: Sequence[str],
    operations: Sequence[AclOperation],
    hosts: Sequence[str],
) -> list[AclBinding]:
    """Every binding of a resource x principal x operation x host (pure: tests call it)."""
    if not resources:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not allow and not deny:
        raise UsageError("name a principal: --allow-principal or --deny-principal")
    if not operations:
        raise UsageError("name an operation: --operation (Read, Write, Describe, All, ...)")
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError("add takes --resource-pattern-type literal or prefixed")
    bindings: dict[AclBinding, None] = {}
    for resource_type, name in resources:
        pattern = ResourcePattern(
            resource_type,
            name,
            PatternType.LITERAL if resource_type == ResourceType.CLUSTER else pattern_type,
        )
        for permission, principals in ((AclPermissionType.ALLOW, allow), (AclPermissionType.DENY, deny)):
            for principal in principals:
                for operation in operations:
                    for host in hosts:
                        bindings[
                            AclBinding(pattern, AccessControlEntry(principal, host, operation, permission))
                        ] = None
    return list(bindings)


def filters_of(
    resources: Sequence[tuple[ResourceType, str]],
    pattern_type: PatternType,
    principals: Sequence[tuple[str, AclPermissionType]],
    operations: Sequence[AclOperation],
    hosts: Sequence[str | None],
) -> list[AclBindingFilter]:
    """The filters selecting what the options name; an option left out selects everything."""
    resource_options: Iterable[tuple[ResourceType, str | None]] = resources or [(ResourceType.ANY, None)]
    principal_options: Iterable[tuple[str | None, AclPermissionType]] = principals or [
        (None, AclPermissionType.ANY)
    ]
    operation_options: Iterable[AclOperation] = operations or [AclOperation.ANY]
    filters: dict[AclBindingFilter, None] = {}
    for resource_type, name in resource_options:
        for principal, permission in principal_options:
            for operation in operation_options:
                for host in hosts or [None]:
                    filters[
                        AclBindingFilter(
                            resource_type, name, pattern_type, principal, host, operation, permission
                        )
                    ] = None
    return list(filters)


def acls_report(bindings: Iterable[AclBinding]) -> Report:
    """The bindings as JSON and a table (pure: tests build it by hand)."""
    rows = [
        {
            "resource_type": pattern.resource_type.name.lower(),
            "name": pattern.name,
            "pattern_type": pattern.pattern_type.name.lower(),
            "principal": entry.principal,
            "host": entry.host,
            "operation": _display(entry.operation),
            "permission": entry.permission.name.lower(),
        }
        for pattern, entry in bindings
    ]
    table = Table(
        ["RESOURCE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
        [list(row.values()) for row in rows],
    )
    report = Report(rows, [table] if rows else [])
    if not rows:
        report.notes.append("no ACLs")
    return report


def _add_resource_arguments(parser: argparse.ArgumentParser, pattern_types: Sequence[str]) -> None:
    parser.add_argument(
        "--topic", action="append", default=[], metavar="NAME", help="a topic ('*': every topic)"
    )
    parser.add_argument("--group", action="append", default=[], metavar="NAME", help="a consumer group")
    parser.add_argument(
        "--transactional-id", action="append", default=[], metavar="ID", help="a transactional id"
    )
    parser.add_argument("--cluster", action="store_true", help="the cluster")
    parser.add_argument(
        "--resource-pattern-type",
        choices=pattern_types,
        default=pattern_types[0],
        help=f"how names are matched (default {pattern_types[0]})",
    )


def _add_entry_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    parser.add_argument(
        "--operation",
        action="append",
        default=[],
        metavar="OP",
        help="Read, Write, Describe, All, ... (repeatable)",
    )


def register(commands: Any) -> None:
    subcommands = add_command_group(commands, "acls", help_text="add, list and remove the broker's ACLs")
    add = add_command(
        subcommands,
        "add",
        help_text="add ACLs: each principal x operation x resource",
        run=_add,
        output=False,
    )
    _add_resource_arguments(add, ["literal", "prefixed"])
    _add_entry_arguments(add)
    add.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="HOST",
        help="the client address (default '*': every host)",
    )
    listing = add_command(
        subcommands, "list", help_text="list ACLs (every one, or those the options select)", run=_list
    )
    _add_resource_arguments(listing, ["any", "match", "literal", "prefixed"])
    listing.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME")
    remove = add_command(
        subcommands,
        "remove",
        help_text="remove the ACLs the options select (an option left out selects every value)",
        run=_remove,
        output=False,
    )
    _add_resource_arguments(remove, ["literal", "prefixed", "any", "match"])
    _add_entry_arguments(remove)
    remove.add_argument("--host", action="append", default=[], metavar="HOST")


def _add(arguments: argparse.Namespace) -> int:
    bindings = bindings_to_add(
        _resources(arguments),
        PatternType[arguments.resource_pattern_type.upper()],
        [_principal(text) for text in arguments.allow_principal],
        [_principal(text) for text in arguments.deny_principal],
        [parse_operation(text) for text in arguments.operation],
        arguments.host or [WILDCARD_HOST],
    )
    with open_admin(arguments) as admin:
        admin.create_acls(bindings)
    for binding in bindings:
        print(f"added {binding.pattern} {binding.entry}")
    return 0


def _list(arguments: argparse.Namespace) -> int:
    filters = filters_of(
        _resources(arguments),
        PatternType[arguments.resource_pattern_type.upper()],
        [(_principal(text), AclPermissionType.ANY) for text in arguments.principal],
        [],
        [],
    )
    found: dict[AclBinding, None] = {}
    with open_admin(arguments) as admin:
        for acl_filter in filters:
            found.update(dict.fromkeys(admin.describe_acls(acl_filter)))
    write_report(acls_report(found), arguments.output)
    return 0


def _remove(arguments: argparse.Namespace) -> int:
    resources = _resources(arguments)
    if not resources:
        raise UsageError(
            "name a resource to remove ACLs from: --topic, --group, --transactional-id or --cluster"
        )
    principals = [(_principal(text), AclPermissionType.ALLOW) for text in arguments.allow_principal]
    principals += [(_principal(text), AclPermissionType.DENY) for text in arguments.deny_principal]
    filters = filters_of(
        resources,
        PatternType[arguments.resource_pattern_type.upper()],
        principals,
        [parse_operation(text) for text in arguments.operation],
        arguments.host,
    )
    with open_admin(arguments) as admin:
        removed = admin.delete_acls(filters)
    for binding in removed:
        print(f"removed {binding.pattern} {binding.entry}")
    if not removed:
        print("no ACL matched: nothing removed")
    return 0
