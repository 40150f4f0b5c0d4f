"""An in-memory cluster for the console's unit tests and its benchmark: ``FakeSource`` answers
``strom.console.source.ClusterSource`` from plain dictionaries and records what it was asked to
change."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from strom.assignors import Assignment
from strom.client.admin import (
    ClusterDescription,
    ConfigEntry,
    GroupDescription,
    GroupListing,
    MemberDescription,
    OffsetAndMetadata,
    PartitionDescription,
    TopicDescription,
)
from strom.client.cluster import BrokerNode, TopicPartition
from strom.client.errors import KafkaError, UnsupportedVersionError, error_for_code
from strom.console.source import BrowsedRecord, OffsetRange, ReadRequest, ReadResult
from strom.protocol.errors import ErrorCode
from strom.protocol.group_history import RebalanceEntry


@dataclass
class FakeGroup:
    state: str = "Stable"
    protocol_type: str = "consumer"
    protocol: str = "range"
    group_type: str = "classic"
    # member id -> (client id, host, assigned partitions)
    members: dict[str, tuple[str, str, list[TopicPartition]]] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)


class FakeSource:
    def __init__(self) -> None:
        self.brokers = [
            BrokerNode(1, "broker-1.example", 9092, "rack-a"),
            BrokerNode(2, "broker-2.example", 9092),
        ]
        self.controller_id = 1
        self.topic_partitions: dict[str, list[PartitionDescription]] = {}
        self.records: dict[TopicPartition, list[BrowsedRecord]] = {}
        self.log_start: dict[TopicPartition, int] = {}
        self.configs: dict[str, dict[str, ConfigEntry]] = {}
        self.group_table: dict[str, FakeGroup] = {}
        self.deleted: list[str] = []
        self.created: list[tuple[str, int, int, dict[str, str]]] = []
        self.config_changes: list[tuple[str, str, str | None]] = []
        self.sizes_fail = False
        # Rebalances by group, oldest first (as a strom coordinator answers); False: the cluster
        # is not strom and has no history to give.
        self.histories: dict[str, list[RebalanceEntry]] = {}
        self.history_supported = True
        # What the pages asked for: (method, partitions or topics asked), to check that a page
        # asks only about what it shows.
        self.asked: list[tuple[str, int]] = []

    # -- building --------------------------------------------------------------------------------

    def add_topic(self, name: str, partitions: int = 1, records: int = 0) -> None:
        self.topic_partitions[name] = [PartitionDescription(p, 1, (1, 2), (1, 2)) for p in range(partitions)]
        for p in range(partitions):
            tp = TopicPartition(name, p)
            self.records[tp] = [
                BrowsedRecord(
                    offset, 1_700_000_000_000 + offset, f"k{offset}".encode(), f"v{offset}".encode(), ()
                )
                for offset in range(records)
            ]
            self.log_start[tp] = 0
        self.configs[name] = {
            "cleanup.policy": ConfigEntry("cleanup.policy", "delete", source=5, is_default=True),
            "retention.ms": ConfigEntry("retention.ms", "3600000", source=1),
        }

    def append(self, tp: TopicPartition, record: BrowsedRecord) -> None:
        self.records[tp].append(record)

    # -- ClusterSource ---------------------------------------------------------------------------

    def cluster(self) -> ClusterDescription:
        return ClusterDescription("fake-cluster", self.controller_id, list(self.brokers))

    def topics(self) -> dict[str, TopicDescription]:
        return {name: TopicDescription(name, list(parts)) for name, parts in self.topic_partitions.items()}

    def topic(self, name: str) -> TopicDescription:
        if name not in self.topic_partitions:
            raise error_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, context=f"topic {name!r}")
        return TopicDescription(name, list(self.topic_partitions[name]))

    def offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, OffsetRange]:
        partitions = list(partitions)
        self.asked.append(("offsets", len(partitions)))
        for tp in partitions:
            if tp.topic not in self.topic_partitions:  # as ListOffsets answers a deleted topic
                raise error_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, context=str(tp))
        return {
            tp: OffsetRange(self.log_start[tp], len(self.records[tp]))
            for tp in partitions
            if tp in self.records
        }

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: len(self.records[tp]) for tp in partitions if tp in self.records}

    def offset_for_time(self, partition: TopicPartition, timestamp_ms: int) -> int | None:
        for record in self.records[partition]:
            if record.timestamp_ms >= timestamp_ms:
                return record.offset
        return None

    def sizes(self, topics: Iterable[str] | None) -> dict[TopicPartition, int]:
        if self.sizes_fail:
            raise KafkaError("DescribeLogDirs is not supported")
        wanted = set(self.topic_partitions) if topics is None else set(topics)
        self.asked.append(("sizes", len(wanted)))
        return {tp: 100 * len(records) for tp, records in self.records.items() if tp.topic in wanted}

    def topic_configs(self, topic: str) -> dict[str, ConfigEntry]:
        return dict(self.configs[topic])

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> None:
        if name in self.topic_partitions:
            raise error_for_code(ErrorCode.TOPIC_ALREADY_EXISTS, context=f"create topic {name!r}")
        self.created.append((name, partitions, replication_factor, dict(configs)))
        self.add_topic(name, partitions)

    def set_topic_config(self, topic: str, key: str, value: str | None) -> None:
        self.config_changes.append((topic, key, value))
        if value is None:
            self.configs[topic].pop(key, None)
        else:
            self.configs[topic][key] = ConfigEntry(key, value, source=1)

    def delete_topic(self, name: str) -> None:
        self.deleted.append(name)
        parts = self.topic_partitions.pop(name)
        for p in parts:
            self.records.pop(TopicPartition(name, p.partition), None)

    def groups(self) -> list[GroupListing]:
        return [
            GroupListing(g, group.protocol_type, group.state, group.group_type)
            for g, group in sorted(self.group_table.items())
        ]

    def describe_group(self, group_id: str) -> GroupDescription:
        group = self.group_table.get(group_id)
        if group is None:
            return GroupDescription(group_id, "Dead", "", "", [])
        return GroupDescription(
            group_id,
            group.state,
            group.protocol_type,
            group.protocol,
            [
                MemberDescription(member_id, None, client_id, host, Assignment(list(assigned)), b"")
                for member_id, (client_id, host, assigned) in group.members.items()
            ],
        )

    def committed(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        group = self.group_table.get(group_id)
        return (
            {} if group is None else {tp: OffsetAndMetadata(offset) for tp, offset in group.committed.items()}
        )

    def group_history(self, group_id: str) -> list[RebalanceEntry]:
        if not self.history_supported:
            raise UnsupportedVersionError(
                "the group's coordinator keeps no rebalance history (a strom broker does)"
            )
        if group_id not in self.histories and group_id not in self.group_table:
            raise error_for_code(ErrorCode.GROUP_ID_NOT_FOUND, context=f"history of group {group_id!r}")
        return list(self.histories.get(group_id, []))

    def read(self, request: ReadRequest) -> ReadResult:
        records = self.records[TopicPartition(request.topic, request.partition)]
        kept: list[BrowsedRecord] = []
        scanned = 0
        position = request.start_offset
        for record in records[request.start_offset :]:
            if len(kept) >= request.records_max:
                return ReadResult(kept, scanned, position, "limit")
            if scanned >= request.scan_max:
                return ReadResult(kept, scanned, position, "scan")
            scanned += 1
            position = record.offset + 1
            if request.keep is None or request.keep(record):
                kept.append(record)
        return ReadResult(kept, scanned, position, "end")

    def close(self) -> None:
        pass
