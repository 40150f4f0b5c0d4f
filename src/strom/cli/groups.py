"""``strom groups``: list, describe (with lag), delete consumer groups and reset their offsets.

The admin client's group operations (``list_groups``, ``describe_groups``, ``list_group_offsets``,
``alter_group_offsets``, ``delete_groups``) answer in the client's own types; the ``_*_from``
adapters below read them into this module's plain views, so the tables and the JSON are built by
pure functions the unit tests call directly.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.cli.common import add_command, add_command_group, open_admin
from strom.cli.consume import parse_timestamp_ms
from strom.cli.output import CliError, Report, Table, UsageError, write_report
from strom.cli.reset_plan import PlannedReset, ResetTarget, parse_topic_partitions, plan_offset_reset

__all__ = [
    "GroupDescription",
    "GroupMember",
    "describe_group_report",
    "list_groups_report",
    "register",
    "reset_plan_report",
]

Partition = tuple[str, int]


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[Partition, ...] = ()
    group_instance_id: str | None = None


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMember, ...] = field(default_factory=tuple)


def register(commands: Any) -> None:
    subcommands = add_command_group(
        commands, "groups", help_text="list, describe, delete consumer groups and reset their offsets"
    )
    add_command(subcommands, "list", help_text="list the consumer groups", run=_list)

    describe = add_command(
        subcommands,
        "describe",
        help_text="describe a group: state, members, committed offsets and lag per partition",
        run=_describe,
    )
    describe.add_argument("group", metavar="GROUP")

    delete = add_command(
        subcommands,
        "delete",
        help_text="delete groups (they must have no members)",
        run=_delete,
        output=False,
    )
    delete.add_argument("groups", nargs="+", metavar="GROUP")

    reset = add_command(
        subcommands,
        "reset-offsets",
        help_text="move a group's committed offsets (a dry run unless --execute)",
        description=(
            "Move a group's committed offsets. Prints the plan; changes nothing unless --execute is "
            "given. Refused while the group has active members: stop them first. Targets outside a "
            "partition's log are pulled back to its start or end."
        ),
        run=_reset_offsets,
    )
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="TOPIC[:P,...]",
        help="a topic (all its partitions) or topic:0,2 (those partitions); repeatable",
    )
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the earliest offset in the log")
    target.add_argument("--to-latest", action="store_true", help="the end of the log")
    target.add_argument(
        "--to-datetime",
        metavar="TIME",
        help="the first record at or after TIME (ISO 8601, local unless it has an offset, or ms)",
    )
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    target.add_argument(
        "--shift-by", type=int, metavar="N", help="move by N from the committed offset (negative: back)"
    )
    reset.add_argument("--execute", action="store_true", help="apply the plan (without it: dry run)")


# -- adapters from the admin client's answers ------------------------------------------------------


def _partition_from(item: Any) -> Partition:
    if isinstance(item, tuple):
        return str(item[0]), int(item[1])
    return str(item.topic), int(item.partition)


def _offset_from(item: Any) -> int | None:
    """A committed offset as the client gives it (an int or an object with ``.offset``); -1 or
    None mean nothing committed."""
    offset = getattr(item, "offset", item)
    if offset is None or int(offset) < 0:
        return None
    return int(offset)


def _member_from(item: Any) -> GroupMember:
    assignment = getattr(item, "assignment", None) or ()
    if hasattr(assignment, "partitions"):  # an assignment object rather than a list
        assignment = assignment.partitions
    return GroupMember(
        member_id=str(item.member_id),
        client_id=str(getattr(item, "client_id", "") or ""),
        host=str(getattr(item, "client_host", None) or getattr(item, "host", "") or ""),
        assignment=tuple(sorted(_partition_from(partition) for partition in assignment)),
        group_instance_id=getattr(item, "group_instance_id", None),
    )


def _state_text(state: Any) -> str:
    name = getattr(state, "name", None)
    text = str(name if name is not None else state)
    # Enum names such as COMPLETING_REBALANCE read as Kafka's state names (CompletingRebalance).
    if text.isupper() or "_" in text:
        text = "".join(part.capitalize() for part in text.lower().split("_"))
    return text


def _description_from(item: Any) -> GroupDescription:
    return GroupDescription(
        group_id=str(item.group_id),
        state=_state_text(item.state),
        protocol_type=str(getattr(item, "protocol_type", "") or ""),
        protocol=str(getattr(item, "protocol", None) or getattr(item, "protocol_data", "") or ""),
        members=tuple(_member_from(member) for member in item.members),
    )


def _describe_one(admin: Any, group_id: str) -> GroupDescription:
    answer = admin.describe_groups([group_id])
    described = answer[group_id] if isinstance(answer, Mapping) else next(iter(answer))
    return _description_from(described)


def _committed_of(admin: Any, group_id: str) -> dict[Partition, int | None]:
    answer = admin.list_group_offsets(group_id)
    return {_partition_from(partition): _offset_from(offset) for partition, offset in answer.items()}


def _log_bounds(admin: Any, partitions: Iterable[Partition], spec: str) -> dict[Partition, int]:
    from strom.client.cluster import TopicPartition

    wanted = [TopicPartition(topic, partition) for topic, partition in partitions]
    if not wanted:
        return {}
    found = admin.list_offsets(dict.fromkeys(wanted, spec))
    return {
        (partition.topic, partition.partition): (answer.offset if answer is not None else 0)
        for partition, answer in found.items()
    }


# -- reports (pure) ----------------------------------------------------------------------------------


def list_groups_report(groups: Iterable[tuple[str, str, str]]) -> Report:
    """Rows of (group id, state, protocol type)."""
    rows = sorted(groups)
    value = [{"group": group, "state": state, "protocol_type": kind} for group, state, kind in rows]
    report = Report(value, [Table(["GROUP", "STATE", "PROTOCOL-TYPE"], [list(row) for row in rows])])
    if not rows:
        report.notes.append("no groups")
    return report


def describe_group_report(
    description: GroupDescription,
    committed: Mapping[Partition, int | None],
    log_end_offsets: Mapping[Partition, int],
) -> Report:
    """State, members and, per partition (committed or assigned), committed offset, log end and lag."""
    owners = {partition: member for member in description.members for partition in member.assignment}
    partitions = sorted(set(committed) | set(owners))
    offsets: list[dict[str, Any]] = []
    for partition in partitions:
        offset = committed.get(partition)
        end = log_end_offsets.get(partition)
        lag = None if offset is None or end is None else max(end - offset, 0)
        owner = owners.get(partition)
        offsets.append(
            {
                "topic": partition[0],
                "partition": partition[1],
                "committed_offset": offset,
                "log_end_offset": end,
                "lag": lag,
                "member_id": owner.member_id if owner else None,
                "host": owner.host if owner else None,
                "client_id": owner.client_id if owner else None,
            }
        )
    members = [
        {
            "member_id": member.member_id,
            "group_instance_id": member.group_instance_id,
            "client_id": member.client_id,
            "host": member.host,
            "assignment": [
                {"topic": topic, "partition": partition} for topic, partition in member.assignment
            ],
        }
        for member in description.members
    ]
    total_lag = sum(row["lag"] or 0 for row in offsets)
    value = {
        "group": description.group_id,
        "state": description.state,
        "protocol_type": description.protocol_type,
        "protocol": description.protocol,
        "members": members,
        "offsets": offsets,
        "total_lag": total_lag,
    }
    title = (
        f"Group: {description.group_id}  state: {description.state}  protocol: "
        f"{description.protocol or '-'} ({description.protocol_type or '-'})  members: {len(members)}  "
        f"total lag: {total_lag}"
    )
    tables = [
        Table(
            [
                "TOPIC",
                "PARTITION",
                "CURRENT-OFFSET",
                "LOG-END-OFFSET",
                "LAG",
                "MEMBER-ID",
                "HOST",
                "CLIENT-ID",
            ],
            [
                [
                    row["topic"],
                    row["partition"],
                    row["committed_offset"],
                    row["log_end_offset"],
                    row["lag"],
                    row["member_id"],
                    row["host"],
                    row["client_id"],
                ]
                for row in offsets
            ],
            title=title,
        )
    ]
    if members:
        tables.append(
            Table(
                ["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"],
                [
                    [
                        member.member_id,
                        member.client_id,
                        member.host,
                        " ".join(f"{topic}-{partition}" for topic, partition in member.assignment) or None,
                    ]
                    for member in description.members
                ],
                title="Members",
            )
        )
    return Report(value, tables)


def reset_plan_report(group_id: str, plan: list[PlannedReset], executed: bool) -> Report:
    rows = [
        {
            "topic": row.topic,
            "partition": row.partition,
            "current_offset": row.current_offset,
            "new_offset": row.new_offset,
            "log_start_offset": row.log_start_offset,
            "log_end_offset": row.log_end_offset,
        }
        for row in plan
    ]
    value = {"group": group_id, "executed": executed, "partitions": rows}
    table = Table(
        ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "LOG-START", "LOG-END"],
        [
            [
                row.topic,
                row.partition,
                row.current_offset,
                row.new_offset,
                row.log_start_offset,
                row.log_end_offset,
            ]
            for row in plan
        ],
        title=f"Group: {group_id}",
    )
    note = "offsets reset" if executed else "dry run: nothing changed (add --execute to apply this plan)"
    return Report(value, [table], [note])


# -- commands ----------------------------------------------------------------------------------------


def _list(arguments: argparse.Namespace) -> int:
    with open_admin(arguments) as admin:
        listed = admin.list_groups()  # type: ignore[attr-defined]  # group operations are landing in the client
    rows = [
        (
            str(item.group_id),
            _state_text(getattr(item, "state", "") or ""),
            str(getattr(item, "protocol_type", "") or ""),
        )
        for item in listed
    ]
    write_report(list_groups_report(rows), arguments.output)
    return 0


def _describe(arguments: argparse.Namespace) -> int:
    with open_admin(arguments) as admin:
        description = _describe_one(admin, arguments.group)
        committed = _committed_of(admin, arguments.group)
        partitions = set(committed) | {p for member in description.members for p in member.assignment}
        log_ends = _log_bounds(admin, partitions, "latest")
    if description.state == "Dead" and not committed:
        raise CliError(f"group {arguments.group!r} does not exist")
    write_report(describe_group_report(description, committed, log_ends), arguments.output)
    return 0


def _delete(arguments: argparse.Namespace) -> int:
    with open_admin(arguments) as admin:
        admin.delete_groups(arguments.groups)  # type: ignore[attr-defined]
    for group in arguments.groups:
        print(f"deleted group {group!r}")
    return 0


def _target_of(arguments: argparse.Namespace) -> ResetTarget:
    if arguments.to_earliest:
        return ResetTarget("earliest")
    if arguments.to_latest:
        return ResetTarget("latest")
    if arguments.to_offset is not None:
        if arguments.to_offset < 0:
            raise UsageError(f"--to-offset must not be negative, not {arguments.to_offset}")
        return ResetTarget("offset", arguments.to_offset)
    if arguments.shift_by is not None:
        return ResetTarget("shift", arguments.shift_by)
    assert arguments.to_datetime is not None, "argparse requires one reset target"
    return ResetTarget("datetime", parse_timestamp_ms(arguments.to_datetime))


def _reset_offsets(arguments: argparse.Namespace) -> int:
    from strom.client.cluster import TopicPartition

    target = _target_of(arguments)
    try:
        selections = [parse_topic_partitions(text) for text in arguments.topic]
    except ValueError as error:
        raise UsageError(str(error)) from None
    with open_admin(arguments) as admin:
        description = _describe_one(admin, arguments.group)
        if description.members:
            raise CliError(
                f"group {arguments.group!r} has {len(description.members)} active member(s) "
                f"(state {description.state}); stop its consumers before resetting offsets"
            )
        topics = admin.describe_topics(sorted({topic for topic, _ in selections}))
        partitions: list[Partition] = []
        for topic, chosen in selections:
            existing = {partition.partition for partition in topics[topic].partitions}
            missing = sorted(set(chosen or ()) - existing)
            if missing:
                raise UsageError(f"topic {topic!r} has no partition {', '.join(map(str, missing))}")
            partitions += [(topic, number) for number in (chosen if chosen is not None else sorted(existing))]
        committed = _committed_of(admin, arguments.group)
        starts = _log_bounds(admin, partitions, "earliest")
        ends = _log_bounds(admin, partitions, "latest")
        at_time: dict[Partition, int | None] | None = None
        if target.kind == "datetime":
            found = admin.list_offsets(
                {TopicPartition(topic, number): target.value for topic, number in partitions}
            )
            at_time = {
                (partition.topic, partition.partition): (answer.offset if answer is not None else None)
                for partition, answer in found.items()
            }
        plan = plan_offset_reset(partitions, committed, starts, ends, target, at_time)
        if arguments.execute:
            admin.alter_group_offsets(  # type: ignore[attr-defined]
                arguments.group,
                {TopicPartition(row.topic, row.partition): row.new_offset for row in plan},
            )
    write_report(reset_plan_report(arguments.group, plan, arguments.execute), arguments.output)
    return 0
