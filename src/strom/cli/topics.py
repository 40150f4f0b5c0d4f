"""``strom topics``: list, create, describe, alter and delete topics; delete records; move
partitions' replicas to other brokers (reassign) and list the moves in progress."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.cli.common import add_command, add_command_group, open_admin, parse_key_value
from strom.cli.configs import CONFIG_SOURCE_NAMES, Target, alter_resource_configs, is_set_on
from strom.cli.output import CliError, Report, Table, UsageError, write_report
from strom.cli.reset_plan import parse_topic_partitions

if TYPE_CHECKING:
    from strom.client.admin import Admin, ConfigEntry, PartitionReassignment, TopicDescription
    from strom.client.cluster import TopicPartition

__all__ = [
    "describe_report",
    "is_set_on_topic",
    "parse_broker_ids",
    "parse_partition_numbers",
    "reassignments_report",
    "register",
]


def register(commands: Any) -> None:
    subcommands = add_command_group(
        commands,
        "topics",
        help_text="list, create, describe, alter, delete topics; delete records; move partitions' replicas",
    )

    listing = add_command(subcommands, "list", help_text="list the topics", run=_list)
    listing.add_argument(
        "--include-internal", action="store_true", help="also list internal topics (__consumer_offsets)"
    )

    create = add_command(subcommands, "create", help_text="create a topic", run=_create, output=False)
    create.add_argument("name", metavar="NAME", help="the topic's name")
    create.add_argument(
        "--partitions", type=int, default=-1, metavar="N", help="partitions (default: the broker's)"
    )
    create.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        metavar="N",
        help="replicas of each partition (default: the broker's)",
    )
    create.add_argument(
        "--config",
        type=parse_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config such as retention.ms=60000 (repeatable)",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed quietly when the topic already exists"
    )

    describe = add_command(
        subcommands,
        "describe",
        help_text="describe topics: partitions, leaders, replicas, ISR, offsets and configs",
        run=_describe,
    )
    describe.add_argument("names", nargs="*", metavar="NAME", help="topics to describe (default: all)")

    alter = add_command(
        subcommands,
        "alter",
        help_text="change a topic's configs or partition count",
        run=_alter,
        output=False,
    )
    alter.add_argument("name", metavar="NAME", help="the topic's name")
    alter.add_argument(
        "--config",
        type=parse_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a topic config (repeatable)",
    )
    alter.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="return a topic config to what it inherits (repeatable; an unknown name is refused)",
    )
    alter.add_argument(
        "--partitions", type=int, default=None, metavar="N", help="grow the topic to N partitions"
    )

    delete = add_command(
        subcommands,
        "delete",
        help_text="delete topics",
        description="Delete topics, each on its own: every topic deleted is named, and every one that "
        "could not be, with the reason (exit 1 if any).",
        run=_delete,
        output=False,
    )
    delete.add_argument("names", nargs="+", metavar="NAME", help="topics to delete")

    delete_records = add_command(
        subcommands,
        "delete-records",
        help_text="delete the records below an offset (move the log start), like kafka-delete-records",
        description=(
            "Delete the records of partitions below an offset: the log start moves up to it and "
            "consumers can no longer read what lies before. --before end deletes everything up to "
            "the high watermark. --offset-json-file takes kafka-delete-records' JSON "
            '({"partitions": [{"topic": "t", "partition": 0, "offset": 42}]}; offset -1: the end).'
        ),
        run=_delete_records,
    )
    delete_records.add_argument(
        "topics", nargs="*", metavar="TOPIC[:P,...]", help="a topic (all its partitions) or topic:0,2"
    )
    delete_records.add_argument(
        "--before", default=None, metavar="OFFSET|end", help="delete records below OFFSET (end: all of them)"
    )
    delete_records.add_argument(
        "--offset-json-file", type=Path, default=None, metavar="FILE", help="partitions and offsets as JSON"
    )

    reassign = add_command(
        subcommands,
        "reassign",
        help_text="move partitions' replicas to other brokers, or cancel a move in progress",
        description=(
            "Give partitions of TOPIC new replicas (AlterPartitionReassignments, sent to the "
            "controller): the brokers joining copy each partition from its leader, and once they are "
            "in the ISR the brokers leaving drop it. The first broker of --replicas is the preferred "
            "leader. The command returns once the controller has recorded the move, which goes on "
            "after it: `strom topics reassignments` shows it until it ends. --cancel puts a move in "
            "progress back to the partition's original replicas. Each partition done is printed; each "
            "one refused is named on stderr with the reason (exit 1 if any)."
        ),
        run=_reassign,
        output=False,
    )
    reassign.add_argument("topic", metavar="TOPIC", help="the topic whose partitions move")
    reassign.add_argument(
        "--partition",
        type=parse_partition_numbers,
        action="append",
        default=[],
        metavar="P[,P...]",
        help="the partitions to move, or whose move to cancel (repeatable; with --cancel the default "
        "is every partition of TOPIC being moved)",
    )
    reassign_target = reassign.add_mutually_exclusive_group(required=True)
    reassign_target.add_argument(
        "--replicas",
        type=parse_broker_ids,
        default=None,
        metavar="ID[,ID...]",
        help="the broker ids that are to hold each partition, the preferred leader first",
    )
    reassign_target.add_argument(
        "--cancel",
        action="store_true",
        help="cancel the partitions' moves in progress: their replicas go back to the original ones",
    )

    reassignments = add_command(
        subcommands,
        "reassignments",
        help_text="list the partition reassignments in progress",
        description=(
            "List the partition reassignments in progress (ListPartitionReassignments, asked of the "
            "controller) of the named topics, or of every topic: per partition its replicas while it "
            "moves (the target followed by the brokers leaving), the brokers joining (ADDING, copying "
            "the log) and those leaving once the joining ones are in the ISR (REMOVING)."
        ),
        run=_reassignments,
    )
    reassignments.add_argument(
        "names", nargs="*", metavar="TOPIC", help="topics whose moves to list (default: all)"
    )


def _list(arguments: argparse.Namespace) -> int:
    with open_admin(arguments) as admin:
        names = admin.list_topics(include_internal=arguments.include_internal)
        descriptions = admin.describe_topics(names) if names else {}
    rows = [
        {
            "name": name,
            "partitions": len(descriptions[name].partitions),
            "internal": descriptions[name].is_internal,
        }
        for name in names
    ]
    table = Table(
        ["TOPIC", "PARTITIONS", "INTERNAL"],
        [[row["name"], row["partitions"], row["internal"]] for row in rows],
    )
    write_report(Report(rows, [table]), arguments.output)
    return 0


def _create(arguments: argparse.Namespace) -> int:
    from strom.client.admin import NewTopic
    from strom.client.errors import TopicAlreadyExistsError

    if arguments.partitions == 0 or arguments.partitions < -1:
        raise UsageError(f"--partitions must be positive, not {arguments.partitions}")
    if arguments.replication_factor == 0 or arguments.replication_factor < -1:
        raise UsageError(f"--replication-factor must be positive, not {arguments.replication_factor}")
    topic = NewTopic(
        arguments.name, arguments.partitions, arguments.replication_factor, dict(arguments.config)
    )
    with open_admin(arguments) as admin:
        try:
            admin.create_topics([topic])
        except TopicAlreadyExistsError:
            if not arguments.if_not_exists:
                raise CliError(f"topic {arguments.name!r} already exists") from None
            print(f"topic {arguments.name!r} already exists")
            return 0
    print(f"created topic {arguments.name!r}")
    return 0


def _partition_offsets(
    admin: Admin, descriptions: dict[str, TopicDescription]
) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (log start offset, log end offset), from ListOffsets earliest/latest."""
    from strom.client.cluster import TopicPartition

    partitions = [
        TopicPartition(name, partition.partition)
        for name, description in descriptions.items()
        for partition in description.partitions
    ]
    if not partitions:
        return {}
    earliest = admin.list_offsets(dict.fromkeys(partitions, "earliest"))
    latest = admin.list_offsets(dict.fromkeys(partitions, "latest"))
    offsets: dict[tuple[str, int], tuple[int, int]] = {}
    for partition in partitions:
        start, end = earliest.get(partition), latest.get(partition)
        offsets[(partition.topic, partition.partition)] = (
            start.offset if start is not None else -1,
            end.offset if end is not None else -1,
        )
    return offsets


def is_set_on_topic(entry: ConfigEntry) -> bool:
    """Whether the topic overrides this config (rather than inheriting the broker's or the default)."""
    return is_set_on(entry, Target("topic", ""))


def describe_report(
    descriptions: dict[str, TopicDescription],
    offsets: dict[tuple[str, int], tuple[int, int]],
    configs: dict[str, dict[str, ConfigEntry]],
    sizes: dict[tuple[str, int], int] | None = None,
) -> Report:
    """The data of ``topics describe`` as JSON and tables (pure: the tests build it by hand)."""
    value: list[dict[str, Any]] = []
    tables: list[Table] = []
    for name in sorted(descriptions):
        description = descriptions[name]
        replication_factor = max((len(partition.replicas) for partition in description.partitions), default=0)
        partitions: list[dict[str, Any]] = []
        for partition in description.partitions:
            # Unknown (None) when the offsets could not be asked: the leader is down, say.
            start, end = offsets.get((name, partition.partition), (None, None))
            size = (sizes or {}).get((name, partition.partition))
            partitions.append(
                {
                    "partition": partition.partition,
                    "leader": partition.leader,
                    "replicas": list(partition.replicas),
                    "isr": list(partition.isr),
                    "log_start_offset": start,
                    "log_end_offset": end,
                    "size_bytes": size,
                }
            )
        topic_configs = [
            {
                "name": entry.name,
                "value": None if entry.is_sensitive else entry.value,
                "set_on_topic": is_set_on_topic(entry),
                "source": CONFIG_SOURCE_NAMES.get(entry.source, "unknown"),
                "read_only": entry.read_only,
                "sensitive": entry.is_sensitive,
            }
            for entry in sorted(configs.get(name, {}).values(), key=lambda entry: entry.name)
        ]
        value.append(
            {
                "name": name,
                "topic_id": description.topic_id,
                "internal": description.is_internal,
                "replication_factor": replication_factor,
                "size_bytes": sum(row["size_bytes"] or 0 for row in partitions)
                if sizes is not None
                else None,
                "partitions": partitions,
                "configs": topic_configs,
            }
        )
        tables.append(
            Table(
                ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START", "LOG-END", "RECORDS", "SIZE"],
                [
                    [
                        row["partition"],
                        row["leader"],
                        row["replicas"],
                        row["isr"],
                        row["log_start_offset"],
                        row["log_end_offset"],
                        None
                        if row["log_end_offset"] is None
                        else max(row["log_end_offset"] - row["log_start_offset"], 0),
                        _human_bytes(row["size_bytes"]),
                    ]
                    for row in partitions
                ],
                title=(
                    f"Topic: {name}  partitions: {len(partitions)}  replication factor: {replication_factor}"
                    + (f"  id: {description.topic_id}" if description.topic_id else "")
                    + ("  (internal)" if description.is_internal else "")
                ),
            )
        )
        if topic_configs:
            tables.append(
                Table(
                    ["CONFIG", "VALUE", "SET"],
                    [
                        [
                            entry["name"],
                            "(sensitive)" if entry["sensitive"] else entry["value"],
                            "*" if entry["set_on_topic"] else "",
                        ]
                        for entry in topic_configs
                    ],
                    title=f"Configs of {name} (* = set on the topic, not the default)",
                )
            )
    return Report(value, tables)


def _human_bytes(size: int | None) -> str:
    if size is None:
        return "-"
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def _describe(arguments: argparse.Namespace) -> int:
    from strom.client.admin import ConfigResource, ConfigResourceType
    from strom.client.errors import KafkaError

    notes: list[str] = []
    with open_admin(arguments) as admin:
        names = list(arguments.names) or admin.list_topics()
        descriptions = admin.describe_topics(names) if names else {}
        # Leaders, replicas and ISRs come from metadata (any live broker); offsets and sizes from
        # the leaders and every broker: with a broker down (until its ZooKeeper session expires,
        # metadata still names it) they may not come, and the rest is still worth printing.
        try:
            offsets = _partition_offsets(admin, descriptions)
        except KafkaError as error:
            offsets = {}
            notes.append(f"log offsets unknown: {error}")
        try:
            sizes: dict[tuple[str, int], int] | None = (
                {(tp.topic, tp.partition): size for tp, size in admin.log_dir_sizes(names).items()}
                if names
                else {}
            )
        except KafkaError as error:
            sizes = None
            notes.append(f"sizes unknown: {error}")
        described = (
            admin.describe_configs(ConfigResource(ConfigResourceType.TOPIC, name) for name in names)
            if names
            else {}
        )
    configs = {resource.name: entries for resource, entries in described.items()}
    report = describe_report(descriptions, offsets, configs, sizes)
    report.notes.extend(notes)
    if not names:
        report.notes.append("no topics")
    write_report(report, arguments.output)
    return 0


def _alter(arguments: argparse.Namespace) -> int:
    if not arguments.config and not arguments.delete_config and arguments.partitions is None:
        raise UsageError("nothing to change: give --config, --delete-config or --partitions")
    both = {key for key, _ in arguments.config} & set(arguments.delete_config)
    if both:
        raise UsageError(f"both set and deleted: {', '.join(sorted(both))}")
    with open_admin(arguments) as admin:
        if arguments.partitions is not None:
            admin.create_partitions({arguments.name: arguments.partitions})
            print(f"topic {arguments.name!r} now has {arguments.partitions} partitions")
        if arguments.config or arguments.delete_config:
            done = alter_resource_configs(
                admin, Target("topic", arguments.name), list(arguments.config), list(arguments.delete_config)
            )
            for line in done:
                print(line)
    return 0


def _delete(arguments: argparse.Namespace) -> int:
    """One DeleteTopics request per topic, so each one's outcome is known and said."""
    from strom.client.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

    names = list(dict.fromkeys(arguments.names))
    failures: list[tuple[str, KafkaError]] = []
    with open_admin(arguments) as admin:
        for name in names:
            try:
                admin.delete_topics([name])
            except (KafkaConnectionError, KafkaTimeoutError):
                raise  # the cluster is gone: the command's own error line says so
            except KafkaError as error:
                failures.append((name, error))
                continue
            print(f"deleted topic {name!r}")
    if not failures:
        if len(names) > 1:
            print(f"{len(names)} topics deleted", file=sys.stderr)
        return 0
    from strom.cli.errors import ADVICE

    for _, failure in failures:
        advice = ADVICE.get(failure.code) if failure.code is not None else None
        print(
            f"not deleted: {failure.message}" + (f"; {advice}" if advice else ""),
            file=sys.stderr,
        )
    raise CliError(f"{len(names) - len(failures)} of {len(names)} topics deleted")


def _records_json_plan(path: Path) -> dict[tuple[str, int], int]:
    """kafka-delete-records' --offset-json-file: {"partitions": [{"topic", "partition", "offset"}]}."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise CliError(f"{path}: not JSON ({error.msg} at line {error.lineno})") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise CliError(
            f'{path}: expected {{"partitions": [{{"topic": T, "partition": P, "offset": O}}, ...]}}'
        )
    plan: dict[tuple[str, int], int] = {}
    for entry in entries:
        topic = entry.get("topic") if isinstance(entry, dict) else None
        partition = entry.get("partition") if isinstance(entry, dict) else None
        offset = entry.get("offset") if isinstance(entry, dict) else None
        if not isinstance(topic, str) or not isinstance(partition, int) or not isinstance(offset, int):
            raise CliError(f"{path}: each partition needs a topic (string), partition and offset (numbers)")
        if partition < 0 or offset < -1:
            raise CliError(f"{path}: {topic}:{partition} offset {offset}: partition >= 0, offset >= -1")
        plan[(topic, partition)] = offset
    return plan


def _delete_records(arguments: argparse.Namespace) -> int:
    from strom.client.cluster import TopicPartition

    if (arguments.offset_json_file is None) == (arguments.before is None):
        raise UsageError("give --before OFFSET|end (with topics) or --offset-json-file FILE")
    if arguments.offset_json_file is not None and arguments.topics:
        raise UsageError("--offset-json-file names the partitions itself: leave out the topics")
    if arguments.before is not None:
        if not arguments.topics:
            raise UsageError("name the topics whose records to delete")
        if arguments.before != "end" and not arguments.before.isdigit():
            raise UsageError(f"--before takes an offset or 'end', not {arguments.before!r}")
        try:
            selections = [parse_topic_partitions(text) for text in arguments.topics]
        except ValueError as error:
            raise UsageError(str(error)) from None
    plan = _records_json_plan(arguments.offset_json_file) if arguments.offset_json_file is not None else {}
    with open_admin(arguments) as admin:
        if arguments.before is not None:
            before = -1 if arguments.before == "end" else int(arguments.before)
            described = admin.describe_topics(sorted({topic for topic, _ in selections}))
            for topic, chosen in selections:
                existing = [partition.partition for partition in described[topic].partitions]
                missing = sorted(set(chosen or ()) - set(existing))
                if missing:
                    raise UsageError(f"topic {topic!r} has no partition {', '.join(map(str, missing))}")
                for number in chosen if chosen is not None else existing:
                    plan[(topic, number)] = before
        ends = admin.list_offsets({TopicPartition(*key): "latest" for key in plan})
        for key, offset in plan.items():
            end = ends.get(TopicPartition(*key))
            end_offset = end.offset if end is not None else 0
            if offset > end_offset:
                raise CliError(
                    f"{key[0]}:{key[1]} ends at offset {end_offset}: records below {offset} cannot be deleted "
                    "(--before end deletes them all)"
                )
        low_watermarks = admin.delete_records({TopicPartition(*key): offset for key, offset in plan.items()})
    rows = [
        {
            "topic": topic,
            "partition": partition,
            "log_start_offset": low_watermarks[TopicPartition(topic, partition)],
        }
        for topic, partition in sorted(plan)
    ]
    table = Table(
        ["TOPIC", "PARTITION", "LOG-START"],
        [[row["topic"], row["partition"], row["log_start_offset"]] for row in rows],
    )
    write_report(
        Report(rows, [table], ["records deleted: each partition's log now starts at LOG-START"]),
        arguments.output,
    )
    return 0


# -- reassign, reassignments ---------------------------------------------------------------------------


def _number_list(text: str, what: str, example: str) -> list[int]:
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(
            f"{what} are numbers separated by commas, such as {example}; not {text!r}"
        )
    return [int(part) for part in parts]


def parse_partition_numbers(text: str) -> list[int]:
    """``0`` or ``0,2``: partition numbers; an argparse ``type``."""
    return _number_list(text, "partitions", "0,2")


def parse_broker_ids(text: str) -> list[int]:
    """``2,3``: broker ids, the preferred leader first, each once; an argparse ``type``."""
    brokers = _number_list(text, "replicas", "2,3")
    repeated = sorted({broker for broker in brokers if brokers.count(broker) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(
            f"a broker holds a partition once: {', '.join(map(str, repeated))} named twice in {text!r}"
        )
    return brokers


def reassignments_report(found: Mapping[TopicPartition, PartitionReassignment]) -> Report:
    """The data of ``topics reassignments`` (pure: the tests build it by hand)."""
    rows = [
        {
            "topic": tp.topic,
            "partition": tp.partition,
            "replicas": list(reassignment.replicas),
            "adding_replicas": list(reassignment.adding_replicas),
            "removing_replicas": list(reassignment.removing_replicas),
        }
        for tp, reassignment in sorted(found.items())
    ]
    table = Table(
        ["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"],
        [
            [
                row["topic"],
                row["partition"],
                row["replicas"],
                row["adding_replicas"] or None,
                row["removing_replicas"] or None,
            ]
            for row in rows
        ],
    )
    return Report(rows, [table], [] if rows else ["no reassignments in progress"])


def _partitions_of(admin: Admin, topics: list[str]) -> list[TopicPartition]:
    from strom.client.cluster import TopicPartition

    described = admin.describe_topics(topics)
    return [
        TopicPartition(name, partition.partition)
        for name in topics
        for partition in described[name].partitions
    ]


def _reassign(arguments: argparse.Namespace) -> int:
    from strom.cli.errors import ADVICE
    from strom.client.cluster import TopicPartition

    topic: str = arguments.topic
    numbers = sorted({number for chosen in arguments.partition for number in chosen})
    if arguments.replicas is not None and not numbers:
        raise UsageError("name the partitions to move: --partition P[,P...]")
    with open_admin(arguments) as admin:
        if numbers:
            partitions = [TopicPartition(topic, number) for number in numbers]
        else:
            partitions = sorted(admin.list_partition_reassignments(_partitions_of(admin, [topic])))
            if not partitions:
                raise CliError(f"no reassignment of topic {topic!r} is in progress: nothing to cancel")
        target = None if arguments.cancel else list(arguments.replicas)
        outcomes = admin.alter_partition_reassignments(dict.fromkeys(partitions, target))
    failures = []
    for tp in partitions:
        error = outcomes[tp]
        if error is not None:
            failures.append(error)
        elif target is None:
            print(f"cancelled the reassignment of {tp.topic}-{tp.partition}")
        else:
            print(f"reassigning {tp.topic}-{tp.partition} to replicas {','.join(map(str, target))}")
    if target is not None and len(failures) < len(partitions):
        print(f"`strom topics reassignments {topic}` shows the moves until they end", file=sys.stderr)
    if not failures:
        return 0
    for failure in failures:
        advice = ADVICE.get(failure.code) if failure.code is not None else None
        print(f"refused: {failure.message}" + (f"; {advice}" if advice else ""), file=sys.stderr)
    done = "cancelled" if target is None else "reassigned"
    raise CliError(f"{len(partitions) - len(failures)} of {len(partitions)} partitions {done}")


def _reassignments(arguments: argparse.Namespace) -> int:
    names = list(dict.fromkeys(arguments.names))
    with open_admin(arguments) as admin:
        found = admin.list_partition_reassignments(_partitions_of(admin, names) if names else None)
    write_report(reassignments_report(found), arguments.output)
    return 0
