"""``strom groups``: list, describe (with lag), delete consumer groups and reset their offsets;
``history`` prints a group's rebalances as the coordinator recorded them (a strom broker only).

The admin client's group operations (``list_groups``, ``describe_groups``,
``describe_consumer_protocol_groups``, ``list_group_offsets``, ``alter_group_offsets``,
``delete_groups``) answer in the client's own types; the ``*_view`` adapters below read them into
this module's plain views, so the tables and the JSON are built by pure functions the unit tests
call directly.

Groups are of two types: ``classic`` (JoinGroup/SyncGroup, the members assign) and ``consumer``
(KIP-848's protocol, the coordinator assigns). ``describe`` asks ConsumerGroupDescribe first and
shows a consumer group's epochs and each member's assignment beside its target; a classic group
(which ConsumerGroupDescribe does not know) is described by DescribeGroups.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.cli.common import add_command, add_command_group, open_admin
from strom.cli.consume import parse_timestamp_ms
from strom.cli.output import CliError, Report, Table, UsageError, write_report
from strom.cli.reset_plan import (
    PlannedReset,
    ResetTarget,
    export_csv,
    parse_duration_ms,
    parse_reset_csv,
    parse_topic_partitions,
    plan_offset_reset,
)

if TYPE_CHECKING:
    from strom.client.admin import (
        Admin,
        ConsumerGroupDescription,
        ConsumerGroupMemberDescription,
        GroupListing,
        MemberDescription,
        OffsetAndMetadata,
    )
    from strom.client.admin import GroupDescription as ClientGroupDescription
    from strom.client.cluster import TopicPartition
    from strom.protocol.group_history import RebalanceEntry

__all__ = [
    "INACTIVE_GROUP_STATES",
    "GroupDescription",
    "GroupMember",
    "committed_view",
    "consumer_description_view",
    "describe_group_report",
    "description_view",
    "history_report",
    "is_active",
    "list_groups_report",
    "listing_rows",
    "member_view",
    "register",
    "reset_plan_report",
]

Partition = tuple[str, int]

# States in which a group has no members: only then may a tool move its offsets (members would
# overwrite a reset with their next commit) or delete it. Kafka's state names, as DescribeGroups
# gives them.
INACTIVE_GROUP_STATES = frozenset({"Empty", "Dead"})


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    client_id: str
    host: str
    assignment: tuple[Partition, ...] = ()
    group_instance_id: str | None = None
    # A consumer-protocol group's member: its epoch and the partitions its target assignment gives
    # it (None for a classic group's member).
    member_epoch: int | None = None
    target_assignment: tuple[Partition, ...] | None = None


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[GroupMember, ...] = field(default_factory=tuple)
    # "classic" or "consumer"; a consumer group's epoch and its target assignment's epoch.
    group_type: str = "classic"
    group_epoch: int | None = None
    assignment_epoch: int | None = None


def register(commands: Any) -> None:
    subcommands = add_command_group(
        commands, "groups", help_text="list, describe, delete consumer groups; reset and delete their offsets"
    )
    add_command(subcommands, "list", help_text="list the consumer groups", run=_list)

    describe = add_command(
        subcommands,
        "describe",
        help_text="describe groups: state, members, committed offsets and lag per partition",
        run=_describe,
    )
    describe.add_argument("groups", nargs="*", metavar="GROUP", help="the groups to describe")
    describe.add_argument("--all-groups", action="store_true", help="describe every group")

    history = add_command(
        subcommands,
        "history",
        help_text="a group's rebalances: why, who, how long each phase took, which partitions moved",
        description=(
            "The rebalances the group's coordinator recorded, oldest first (a strom broker only: "
            "StromGroupHistory, API key 32100). Each: the generation (classic) or group epoch "
            "(consumer protocol) it produced, its trigger and the members that caused it, when it "
            "began, the time waiting for joins and for the assignment, the members before and "
            "after, and the partitions that moved from one member to another."
        ),
        run=_history,
    )
    history.add_argument("group", metavar="GROUP")

    delete = add_command(
        subcommands,
        "delete",
        help_text="delete groups (they must have no members)",
        run=_delete,
        output=False,
    )
    delete.add_argument("groups", nargs="+", metavar="GROUP")

    delete_offsets = add_command(
        subcommands,
        "delete-offsets",
        help_text="delete a group's committed offsets of some topics or partitions",
        description=(
            "Delete a group's committed offsets of the given topics (every partition it has an "
            "offset for, even of a topic deleted since) or partitions. Refused for a topic the "
            "group's active members are subscribed to."
        ),
        run=_delete_offsets,
    )
    delete_offsets.add_argument("group", metavar="GROUP")
    delete_offsets.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="TOPIC[:P,...]",
        help="a topic or topic:0,2 (those partitions); repeatable",
    )

    reset = add_command(
        subcommands,
        "reset-offsets",
        help_text="move a group's committed offsets (a dry run unless --execute)",
        description=(
            "Move a group's committed offsets. Prints the plan; changes nothing unless --execute is "
            "given. Refused while the group has active members: stop them first. Targets outside a "
            "partition's log are pulled back to its start or end. --export prints the plan as CSV "
            "(topic,partition,offset), which --from-file reads back, as Kafka's tool does."
        ),
        run=_reset_offsets,
    )
    reset.add_argument("group", metavar="GROUP")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic",
        action="append",
        metavar="TOPIC[:P,...]",
        help="a topic (all its partitions) or topic:0,2 (those partitions); repeatable",
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every topic the group has committed offsets for"
    )
    scope.add_argument(
        "--from-file",
        type=Path,
        metavar="FILE",
        help="the partitions and offsets of a CSV plan (topic,partition,offset or "
        "group,topic,partition,offset per line), as --export writes it",
    )
    target = reset.add_mutually_exclusive_group()
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
    target.add_argument(
        "--by-duration",
        metavar="DURATION",
        help="the first record at or after now minus DURATION (ISO 8601: PnDTnHnMnS, such as PT1H30M)",
    )
    target.add_argument(
        "--to-current",
        action="store_true",
        help="the committed offset itself (the log end where nothing is committed); with --export, "
        "a snapshot to restore later with --from-file",
    )
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="apply the plan (without it: dry run)")
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")
    reset.add_argument(
        "--export", action="store_true", help="print the plan as CSV (topic,partition,new offset) instead"
    )


# -- adapters from the admin client's answers (pure) -----------------------------------------------


def member_view(member: MemberDescription) -> GroupMember:
    """One member as the reports show it; a member whose assignment could not be decoded (or a
    group that is not a consumer group) shows no partitions."""
    assigned = member.assignment.partitions if member.assignment is not None else []
    return GroupMember(
        member_id=member.member_id,
        client_id=member.client_id,
        host=member.host,
        assignment=tuple(sorted((topic, partition) for topic, partition in assigned)),
        group_instance_id=member.group_instance_id,
    )


def description_view(description: ClientGroupDescription) -> GroupDescription:
    return GroupDescription(
        group_id=description.group_id,
        state=description.state,
        protocol_type=description.protocol_type,
        protocol=description.protocol,
        members=tuple(member_view(member) for member in description.members),
    )


def _sorted_partitions(partitions: Iterable[TopicPartition]) -> tuple[Partition, ...]:
    return tuple(sorted((topic, partition) for topic, partition in partitions))


def consumer_member_view(member: ConsumerGroupMemberDescription) -> GroupMember:
    return GroupMember(
        member_id=member.member_id,
        client_id=member.client_id,
        host=member.host,
        assignment=_sorted_partitions(member.assignment),
        group_instance_id=member.instance_id,
        member_epoch=member.member_epoch,
        target_assignment=_sorted_partitions(member.target_assignment),
    )


def consumer_description_view(description: ConsumerGroupDescription) -> GroupDescription:
    """A consumer-protocol group: its protocol is the server-side assignor."""
    return GroupDescription(
        group_id=description.group_id,
        state=description.state,
        protocol_type="consumer",
        protocol=description.assignor_name,
        members=tuple(consumer_member_view(member) for member in description.members),
        group_type="consumer",
        group_epoch=description.group_epoch,
        assignment_epoch=description.assignment_epoch,
    )


def committed_view(offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> dict[Partition, int | None]:
    """Committed offsets by partition; a negative offset (Kafka's -1) means nothing committed."""
    return {
        (topic, partition): (committed.offset if committed.offset >= 0 else None)
        for (topic, partition), committed in offsets.items()
    }


def listing_rows(listings: Iterable[GroupListing]) -> list[tuple[str, str | None, str | None, str]]:
    """(group id, type, state, protocol type) per group; type and state None where the broker's
    ListGroups does not say them (type below v5, state below v4)."""
    return [
        (listing.group_id, listing.group_type, listing.state, listing.protocol_type) for listing in listings
    ]


def is_active(description: GroupDescription) -> bool:
    """Whether the group has members (or is between generations): its offsets are theirs to move.
    The same rule as the coordinator's, which takes commits from outside only while Empty or Dead."""
    return bool(description.members) or description.state not in INACTIVE_GROUP_STATES


def _describe_one(admin: Admin, group_id: str) -> GroupDescription:
    """A consumer-protocol group as ConsumerGroupDescribe gives it, else DescribeGroups' answer."""
    consumer = admin.describe_consumer_protocol_groups([group_id])[group_id]
    if consumer is not None:
        return consumer_description_view(consumer)
    return description_view(admin.describe_groups([group_id])[group_id])


def _committed_of(admin: Admin, group_id: str) -> dict[Partition, int | None]:
    return committed_view(admin.list_group_offsets(group_id))


def _log_offsets(
    admin: Admin, partitions: Iterable[Partition], spec: str | int
) -> dict[Partition, int | None]:
    """ListOffsets for each partition: ``"earliest"``, ``"latest"`` or a timestamp in ms (None where
    no record is at or after it)."""
    from strom.client.cluster import TopicPartition

    wanted = [TopicPartition(topic, partition) for topic, partition in partitions]
    if not wanted:
        return {}
    found = admin.list_offsets(dict.fromkeys(wanted, spec))
    return {
        (found_partition.topic, found_partition.partition): (None if answer is None else answer.offset)
        for found_partition, answer in found.items()
    }


def _log_bounds(admin: Admin, partitions: Iterable[Partition], spec: str) -> dict[Partition, int]:
    """The log start (``"earliest"``) or end (``"latest"``) of each partition; a partition's log
    always has both, so a missing answer is the empty log's 0."""
    return {
        key: 0 if offset is None else offset for key, offset in _log_offsets(admin, partitions, spec).items()
    }


# -- reports (pure) ----------------------------------------------------------------------------------


def list_groups_report(groups: Iterable[tuple[str, str | None, str | None, str]]) -> Report:
    """Rows of (group id, type, state, protocol type), by group id; a type or state is None from
    brokers whose ListGroups does not say it (type below v5, state below v4)."""
    rows = sorted(groups, key=lambda row: row[0])
    value = [
        {"group": group, "type": group_type, "state": state, "protocol_type": kind}
        for group, group_type, state, kind in rows
    ]
    report = Report(value, [Table(["GROUP", "TYPE", "STATE", "PROTOCOL-TYPE"], [list(row) for row in rows])])
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
    consumer_protocol = description.group_type == "consumer"
    members: list[dict[str, Any]] = []
    for member in description.members:
        shown: dict[str, Any] = {
            "member_id": member.member_id,
            "group_instance_id": member.group_instance_id,
            "client_id": member.client_id,
            "host": member.host,
            "assignment": [
                {"topic": topic, "partition": partition} for topic, partition in member.assignment
            ],
        }
        if consumer_protocol:
            shown["member_epoch"] = member.member_epoch
            shown["target_assignment"] = [
                {"topic": topic, "partition": partition}
                for topic, partition in member.target_assignment or ()
            ]
        members.append(shown)
    total_lag = sum(row["lag"] or 0 for row in offsets)
    value: dict[str, Any] = {
        "group": description.group_id,
        "type": description.group_type,
        "state": description.state,
        "protocol_type": description.protocol_type,
        "protocol": description.protocol,
        "members": members,
        "offsets": offsets,
        "total_lag": total_lag,
    }
    if consumer_protocol:
        value["group_epoch"] = description.group_epoch
        value["assignment_epoch"] = description.assignment_epoch
        title = (
            f"Group: {description.group_id}  type: consumer  state: {description.state}  assignor: "
            f"{description.protocol or '-'}  epoch: {description.group_epoch}  assignment epoch: "
            f"{description.assignment_epoch}  members: {len(members)}  total lag: {total_lag}"
        )
    else:
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
    if members and consumer_protocol:
        tables.append(
            Table(
                ["MEMBER-ID", "CLIENT-ID", "HOST", "EPOCH", "ASSIGNMENT", "TARGET-ASSIGNMENT"],
                [
                    [
                        member.member_id,
                        member.client_id,
                        member.host,
                        member.member_epoch,
                        _partitions_text(member.assignment),
                        _partitions_text(member.target_assignment or ()),
                    ]
                    for member in description.members
                ],
                title="Members",
            )
        )
    elif members:
        tables.append(
            Table(
                ["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"],
                [
                    [member.member_id, member.client_id, member.host, _partitions_text(member.assignment)]
                    for member in description.members
                ],
                title="Members",
            )
        )
    return Report(value, tables)


def _partitions_text(partitions: Iterable[Partition]) -> str | None:
    return " ".join(f"{topic}-{partition}" for topic, partition in partitions) or None


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
        rows = listing_rows(admin.list_groups())
    write_report(list_groups_report(rows), arguments.output)
    return 0


def _describe(arguments: argparse.Namespace) -> int:
    if arguments.all_groups and arguments.groups:
        raise UsageError("name groups or give --all-groups, not both")
    if not arguments.all_groups and not arguments.groups:
        raise UsageError("name the groups to describe, or give --all-groups")
    reports: list[Report] = []
    missing: list[str] = []
    with open_admin(arguments) as admin:
        group_ids = (
            [listing.group_id for listing in admin.list_groups()]
            if arguments.all_groups
            else list(dict.fromkeys(arguments.groups))
        )
        for group_id in group_ids:
            description = _describe_one(admin, group_id)
            committed = _committed_of(admin, group_id)
            if description.state == "Dead" and not committed:
                missing.append(group_id)
                continue
            partitions = set(committed) | {p for member in description.members for p in member.assignment}
            log_ends = _log_bounds(admin, partitions, "latest")
            reports.append(describe_group_report(description, committed, log_ends))
    combined = Report(
        [report.value for report in reports], [table for report in reports for table in report.tables]
    )
    if arguments.all_groups and not group_ids:
        combined.notes.append("no groups")
    if reports or arguments.output == "json":
        write_report(combined, arguments.output)
    if missing:
        names = ", ".join(repr(group_id) for group_id in missing)
        verb = "does" if len(missing) == 1 else "do"
        raise CliError(f"group {names} {verb} not exist; `strom groups list` shows the groups there are")
    return 0


def _refuse_if_active(description: GroupDescription, doing: str) -> None:
    if is_active(description):
        raise CliError(
            f"cannot {doing} group {description.group_id!r}: it has {len(description.members)} active "
            f"member(s) (state {description.state}); stop its consumers first"
        )


def _time_text(wall_ms: int) -> str:
    if wall_ms < 0:
        return "-"
    moment = time.gmtime(wall_ms / 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", moment) + f".{wall_ms % 1000:03d}Z"


def history_report(group_id: str, entries: Iterable[RebalanceEntry]) -> Report:
    """One row per rebalance, then one per moved partition; the JSON is each entry's fields."""
    entries = list(entries)
    rows: list[Sequence[object]] = []
    moves: list[Sequence[object]] = []
    for entry in entries:
        open_ = entry.end_ms < 0
        rows.append(
            [
                entry.generation if entry.generation >= 0 else None,
                entry.protocol,
                entry.trigger,
                ", ".join(entry.causes) or None,
                _time_text(entry.start_ms),
                entry.join_ms,
                None if open_ else entry.assignment_ms,
                None if open_ else entry.duration_ms,
                entry.outcome,
                f"{len(entry.members_before)} -> {len(entry.members_after)}" if not open_ else None,
                len(entry.moves) + entry.moves_omitted,
            ]
        )
        moves.extend(
            [entry.generation, move.topic, move.partition, move.from_member, move.to_member]
            for move in entry.moves
        )
    tables = [
        Table(
            [
                "GENERATION",
                "PROTOCOL",
                "TRIGGER",
                "CAUSED-BY",
                "START",
                "JOIN-MS",
                "ASSIGN-MS",
                "TOTAL-MS",
                "OUTCOME",
                "MEMBERS",
                "MOVED",
            ],
            rows,
            title=f"rebalances of group {group_id}",
        )
    ]
    if moves:
        tables.append(
            Table(["GENERATION", "TOPIC", "PARTITION", "FROM", "TO"], moves, title="partitions moved")
        )
    report = Report({"group": group_id, "rebalances": [entry.to_json() for entry in entries]}, tables)
    if not entries:
        report.notes.append(f"group {group_id} has no rebalance recorded")
    return report


def _history(arguments: argparse.Namespace) -> int:
    with open_admin(arguments) as admin:
        entries = admin.group_history(arguments.group)
    write_report(history_report(arguments.group, entries), arguments.output)
    return 0


def _delete(arguments: argparse.Namespace) -> int:
    with open_admin(arguments) as admin:
        groups = list(dict.fromkeys(arguments.groups))
        # Checked before deleting any, so a refusal leaves every group as it was; the coordinator
        # still refuses (NON_EMPTY_GROUP) a consumer that joins in between.
        for group_id in groups:
            description = _describe_one(admin, group_id)
            _refuse_if_active(description, "delete")
            if description.state == "Dead" and not _committed_of(admin, group_id):
                raise CliError(f"group {group_id!r} does not exist")
        for group_id in groups:
            admin.delete_groups([group_id])
            print(f"deleted group {group_id!r}")
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


def _chosen_partitions(admin: Admin, selections: list[tuple[str, list[int] | None]]) -> list[Partition]:
    """Every partition the ``--topic`` options name, checked against the topics' metadata."""
    topics = admin.describe_topics(sorted({topic for topic, _ in selections}))
    partitions: list[Partition] = []
    for topic, chosen in selections:
        existing = {partition.partition for partition in topics[topic].partitions}
        missing = sorted(set(chosen or ()) - existing)
        if missing:
            raise UsageError(f"topic {topic!r} has no partition {', '.join(map(str, missing))}")
        partitions += [(topic, number) for number in (chosen if chosen is not None else sorted(existing))]
    return partitions


def _delete_offsets(arguments: argparse.Namespace) -> int:
    from strom.client.cluster import TopicPartition

    try:
        selections = [parse_topic_partitions(text) for text in arguments.topic]
    except ValueError as error:
        raise UsageError(str(error)) from None
    with open_admin(arguments) as admin:
        committed = _committed_of(admin, arguments.group)
        description = _describe_one(admin, arguments.group)
        if description.state == "Dead" and not committed:
            raise CliError(
                f"group {arguments.group!r} does not exist; `strom groups list` shows the groups there are"
            )
        partitions: list[Partition] = []
        for topic, chosen in selections:
            have = sorted(partition for partition in committed if partition[0] == topic)
            wanted = have if chosen is None else [(topic, number) for number in chosen]
            if not wanted:
                raise CliError(f"group {arguments.group!r} has no committed offsets for topic {topic!r}")
            partitions += wanted
        partitions = sorted(set(partitions))
        admin.delete_group_offsets(arguments.group, [TopicPartition(*partition) for partition in partitions])
    rows = [
        {"topic": topic, "partition": partition, "deleted_offset": committed.get((topic, partition))}
        for topic, partition in partitions
    ]
    table = Table(
        ["TOPIC", "PARTITION", "DELETED-OFFSET"],
        [[row["topic"], row["partition"], row["deleted_offset"]] for row in rows],
        title=f"Group: {arguments.group}",
    )
    write_report(
        Report({"group": arguments.group, "partitions": rows}, [table], ["offsets deleted"]), arguments.output
    )
    return 0


def _reset_target_of(arguments: argparse.Namespace, file_offsets: dict[Partition, int] | None) -> ResetTarget:
    if file_offsets is not None:
        if any((arguments.to_earliest, arguments.to_latest, arguments.to_current)) or any(
            value is not None
            for value in (
                arguments.to_offset,
                arguments.shift_by,
                arguments.to_datetime,
                arguments.by_duration,
            )
        ):
            raise UsageError(
                "--from-file gives the offsets itself: leave out the --to-*/--shift-by/--by-duration target"
            )
        return ResetTarget("file", offsets=file_offsets)
    if arguments.to_current:
        return ResetTarget("current")
    if arguments.by_duration is not None:
        try:
            duration_ms = parse_duration_ms(arguments.by_duration)
        except ValueError as error:
            raise UsageError(f"--by-duration: {error}") from None
        # Before the epoch no record can be: the earliest time ListOffsets takes is 0.
        return ResetTarget("datetime", max(0, int(time.time() * 1000) - duration_ms))
    if not any((arguments.to_earliest, arguments.to_latest)) and all(
        value is None for value in (arguments.to_offset, arguments.shift_by, arguments.to_datetime)
    ):
        raise UsageError(
            "say where to: --to-earliest, --to-latest, --to-current, --to-offset, --shift-by, "
            "--to-datetime, --by-duration (or --from-file)"
        )
    return _target_of(arguments)


def _read_plan_file(arguments: argparse.Namespace) -> dict[Partition, int] | None:
    if arguments.from_file is None:
        return None
    try:
        text = arguments.from_file.read_text(encoding="utf-8")
    except OSError as error:
        raise CliError(f"cannot read {arguments.from_file}: {error.strerror}") from None
    try:
        return parse_reset_csv(text, arguments.group)
    except ValueError as error:
        raise CliError(f"{arguments.from_file}: {error}") from None


def _reset_offsets(arguments: argparse.Namespace) -> int:
    from strom.client.cluster import TopicPartition

    file_offsets = _read_plan_file(arguments)
    target = _reset_target_of(arguments, file_offsets)
    try:
        selections = [parse_topic_partitions(text) for text in arguments.topic or []]
    except ValueError as error:
        raise UsageError(str(error)) from None
    with open_admin(arguments) as admin:
        _refuse_if_active(_describe_one(admin, arguments.group), "reset the offsets of")
        committed = _committed_of(admin, arguments.group)
        if file_offsets is not None:
            partitions = _existing_partitions(admin, sorted(file_offsets))
        elif arguments.all_topics:
            partitions = sorted(committed)
            if not partitions:
                raise CliError(
                    f"group {arguments.group!r} has no committed offsets: name the topics with --topic"
                )
        else:
            partitions = _chosen_partitions(admin, selections)
        starts = _log_bounds(admin, partitions, "earliest")
        ends = _log_bounds(admin, partitions, "latest")
        at_time = _log_offsets(admin, partitions, target.value) if target.kind == "datetime" else None
        plan = plan_offset_reset(partitions, committed, starts, ends, target, at_time)
        if arguments.execute:
            # The coordinator refuses this commit (UNKNOWN_MEMBER_ID) if a consumer joined since the
            # check above, so a reset never races a live member silently.
            admin.alter_group_offsets(
                arguments.group,
                {TopicPartition(row.topic, row.partition): row.new_offset for row in plan},
            )
    if arguments.export:
        sys.stdout.write(export_csv(plan))
        if arguments.execute:
            print("offsets reset", file=sys.stderr)
        return 0
    write_report(reset_plan_report(arguments.group, plan, arguments.execute), arguments.output)
    return 0


def _existing_partitions(admin: Admin, partitions: list[Partition]) -> list[Partition]:
    """The partitions of a plan file, checked against the topics' metadata."""
    topics = admin.describe_topics(sorted({topic for topic, _ in partitions}))
    for topic, partition in partitions:
        if partition not in {each.partition for each in topics[topic].partitions}:
            raise CliError(f"topic {topic!r} has no partition {partition}")
    return partitions
