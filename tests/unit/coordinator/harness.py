"""A coordinator over a manual clock, manual timers and an in-memory __consumer_offsets."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from strom.base.clock import ManualClock
from strom.coordinator import CoordinatorConfig, GroupCoordinator, ManualTimer
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from strom.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from strom.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from strom.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from strom.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from strom.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse

Record = tuple[bytes, bytes | None]


class LogEntry(NamedTuple):
    """One record of a fake partition: plain, of a transactional batch, or a transaction marker."""

    key: bytes | None
    value: bytes | None
    # >= 0: a record of that producer's transactional batch, or its marker.
    producer_id: int = -1
    # A control record: True for COMMIT, False for ABORT.
    marker: bool | None = None


class FakeLog:
    """The partitions of __consumer_offsets: appends complete at once unless told otherwise.

    ``partitions`` holds the non-transactional records; ``entries`` every record in log order (a
    record's log offset is its index there), transactional records and markers included."""

    def __init__(self) -> None:
        self.partitions: dict[int, list[Record]] = {}
        self.entries: dict[int, list[LogEntry]] = {}
        self.fail_with: ErrorCode = ErrorCode.NONE
        self.defer = False
        # With ``defer``: the records are in the log at once and only the answer waits (a broker
        # of a cluster waiting for the replicas), instead of both waiting.
        self.append_before_answer = False
        self.deferred: list[Callable[[], None]] = []

    def append(self, partition: int, records: list[Record], on_complete: Callable[[ErrorCode], None]) -> None:
        self._append(partition, records, -1, lambda error, base_offset: on_complete(error))

    def append_transactional(
        self,
        partition: int,
        records: list[Record],
        producer_id: int,
        producer_epoch: int,
        on_complete: Callable[[ErrorCode, int], None],
    ) -> None:
        assert producer_id >= 0 and producer_epoch >= 0
        self._append(partition, records, producer_id, on_complete)

    def _append(
        self,
        partition: int,
        records: list[Record],
        producer_id: int,
        on_complete: Callable[[ErrorCode, int], None],
    ) -> None:
        error = self.fail_with
        appended = self.append_before_answer and error == ErrorCode.NONE
        base_offset = self._write(partition, records, producer_id) if appended else -1

        def complete() -> None:
            nonlocal base_offset
            if error == ErrorCode.NONE and not appended:
                base_offset = self._write(partition, records, producer_id)
            on_complete(error, base_offset)

        if self.defer:
            self.deferred.append(complete)
        else:
            complete()

    def _write(self, partition: int, records: list[Record], producer_id: int) -> int:
        entries = self.entries.setdefault(partition, [])
        base_offset = len(entries)
        entries.extend(LogEntry(key, value, producer_id) for key, value in records)
        if producer_id < 0:
            self.partitions.setdefault(partition, []).extend(records)
        return base_offset

    def write_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """The broker writing the transaction's marker (the test then tells the coordinator)."""
        self.entries.setdefault(partition, []).append(LogEntry(None, None, producer_id, commit))

    def complete_deferred(self) -> None:
        pending, self.deferred = self.deferred, []
        for complete in pending:
            complete()

    def all_records(self) -> list[tuple[int, bytes, bytes | None]]:
        return [(p, key, value) for p, records in sorted(self.partitions.items()) for key, value in records]


def encoded(response: Any, version: int) -> Any:
    """Encode and decode at ``version``: proves the response is valid for that version."""
    return type(response).decode(response.encode(version), version)


def consumer_subscription(*topics: str) -> bytes:
    """A "consumer" protocol subscription (version 0): topics, then empty user data."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        raw = topic.encode()
        body += struct.pack(">h", len(raw)) + raw
    return body + struct.pack(">i", -1)


class Harness:
    def __init__(
        self, config: CoordinatorConfig | None = None, partitions: tuple[int, ...] | None = None
    ) -> None:
        self.config = config or CoordinatorConfig(
            group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1
        )
        self.clock = ManualClock()
        self.timer = ManualTimer(self.clock)
        self.log = FakeLog()
        self.coordinator = self._build()
        for partition in (
            partitions if partitions is not None else range(self.config.offsets_topic_num_partitions)
        ):
            self.coordinator.begin_loading(partition)
            self.coordinator.finish_loading(partition)

    def _build(self) -> GroupCoordinator:
        return GroupCoordinator(self.config, self.clock, self.timer, self.log)

    def advance(self, ms: int) -> None:
        self.timer.advance(ms)

    def join(
        self,
        group_id: str = "g",
        member_id: str = "",
        *,
        instance_id: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        protocol_type: str = "consumer",
        version: int = 5,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 30_000,
        client_id: str = "client",
    ) -> list[JoinGroupResponse]:
        """Send a JoinGroup; the returned list receives the response (now or later)."""
        request = JoinGroupRequest(
            group_id=group_id,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms if version >= 1 else -1,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=[
                JoinGroupRequest.JoinGroupRequestProtocol(name=name, metadata=metadata)
                for name, metadata in (protocols if protocols is not None else [("range", b"m")])
            ],
        )
        request = encoded(request, version)
        box: list[JoinGroupResponse] = []
        self.coordinator.join_group(
            request, version, client_id, "/127.0.0.1", lambda response: box.append(encoded(response, version))
        )
        return box

    def join_two_step(self, group_id: str = "g", **kwargs: Any) -> tuple[str, list[JoinGroupResponse]]:
        first = self.join(group_id, **kwargs)
        assert first and first[0].error_code == ErrorCode.MEMBER_ID_REQUIRED, first
        member_id = first[0].member_id
        return member_id, self.join(group_id, member_id, **kwargs)

    def sync(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        assignments: dict[str, bytes] | None = None,
        *,
        instance_id: str | None = None,
        version: int = 3,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> list[SyncGroupResponse]:
        request = SyncGroupRequest(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=key, assignment=value)
                for key, value in (assignments or {}).items()
            ],
        )
        request = encoded(request, version)
        box: list[SyncGroupResponse] = []
        self.coordinator.sync_group(request, version, lambda response: box.append(encoded(response, version)))
        return box

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        *,
        instance_id: str | None = None,
        version: int = 3,
    ) -> ErrorCode:
        request = encoded(
            HeartbeatRequest(
                group_id=group_id,
                generation_id=generation_id,
                member_id=member_id,
                group_instance_id=instance_id,
            ),
            version,
        )
        response: HeartbeatResponse = encoded(self.coordinator.heartbeat(request, version), version)
        return ErrorCode(response.error_code)

    def leave(
        self,
        group_id: str,
        members: list[tuple[str, str | None]],
        *,
        version: int = 3,
    ) -> LeaveGroupResponse:
        if version >= 3:
            request = LeaveGroupRequest(
                group_id=group_id,
                members=[
                    LeaveGroupRequest.MemberIdentity(member_id=member_id, group_instance_id=instance_id)
                    for member_id, instance_id in members
                ],
            )
        else:
            request = LeaveGroupRequest(group_id=group_id, member_id=members[0][0])
        request = encoded(request, version)
        return encoded(self.coordinator.leave_group(request, version), version)  # type: ignore[no-any-return]

    def commit(
        self,
        group_id: str,
        offsets: dict[tuple[str, int], int],
        *,
        member_id: str = "",
        generation_id: int = -1,
        version: int = 8,
        metadata: str = "meta",
        instance_id: str | None = None,
        retention_time_ms: int = -1,
    ) -> dict[tuple[str, int], ErrorCode]:
        by_topic: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=partition, committed_offset=offset, committed_metadata=metadata
                )
            )
        request = OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=generation_id if version >= 1 else -1,
            member_id=member_id if version >= 1 else "",
            group_instance_id=instance_id if version >= 7 else None,
            retention_time_ms=retention_time_ms if 2 <= version <= 4 else -1,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=partitions)
                for topic, partitions in by_topic.items()
            ],
        )
        request = encoded(request, version)
        box: list[OffsetCommitResponse] = []
        self.coordinator.commit_offsets(
            request, version, lambda response: box.append(encoded(response, version))
        )
        if not box:
            return {}
        return {
            (topic.name, partition.partition_index): ErrorCode(partition.error_code)
            for topic in box[0].topics
            for partition in topic.partitions
        }

    def fetch(
        self, group_id: str, topics: dict[str, list[int]] | None, *, version: int = 6
    ) -> dict[tuple[str, int], tuple[int, str]]:
        request = OffsetFetchRequest(
            group_id=group_id,
            topics=None
            if topics is None
            else [
                OffsetFetchRequest.OffsetFetchRequestTopic(name=name, partition_indexes=partitions)
                for name, partitions in topics.items()
            ],
        )
        request = encoded(request, version)
        response: OffsetFetchResponse = encoded(self.coordinator.fetch_offsets(request, version), version)
        if version >= 2:
            assert response.error_code == ErrorCode.NONE, response
        return {
            (topic.name, partition.partition_index): (partition.committed_offset, partition.metadata or "")
            for topic in response.topics
            for partition in topic.partitions
        }

    def txn_commit(
        self,
        group_id: str,
        offsets: dict[tuple[str, int], int],
        *,
        producer_id: int = 1000,
        producer_epoch: int = 0,
        member_id: str = "",
        generation_id: int = -1,
        instance_id: str | None = None,
        version: int = 3,
        metadata: str | None = "meta",
        leader_epoch: int = -1,
    ) -> dict[tuple[str, int], ErrorCode]:
        """A TxnOffsetCommit; the partitions' errors ({} while its write waits)."""
        by_topic: dict[str, list[TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(
                TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=leader_epoch if version >= 2 else -1,
                    committed_metadata=metadata,
                )
            )
        request = TxnOffsetCommitRequest(
            transactional_id="tx",
            group_id=group_id,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            generation_id=generation_id if version >= 3 else -1,
            member_id=member_id if version >= 3 else "",
            group_instance_id=instance_id if version >= 3 else None,
            topics=[
                TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=topic, partitions=partitions)
                for topic, partitions in by_topic.items()
            ],
        )
        request = encoded(request, version)
        box: list[TxnOffsetCommitResponse] = []
        self.coordinator.commit_transactional_offsets(
            request, version, lambda response: box.append(encoded(response, version))
        )
        if not box:
            return {}
        return {
            (topic.name, partition.partition_index): ErrorCode(partition.error_code)
            for topic in box[0].topics
            for partition in topic.partitions
        }

    def complete(self, producer_id: int, commit: bool, partition: int = 0) -> None:
        """The broker writes the producer's marker to ``partition`` and tells the coordinator."""
        self.log.write_marker(partition, producer_id, commit)
        self.coordinator.complete_transaction(partition, producer_id, commit)

    def fetch_stable(
        self,
        group_id: str,
        topics: dict[str, list[int]] | None,
        *,
        version: int = 7,
        require_stable: bool = True,
    ) -> dict[tuple[str, int], tuple[int, ErrorCode]]:
        """OffsetFetch v7+ (``require_stable``): (committed offset, the partition's error) of each."""
        if version >= 8:
            request = OffsetFetchRequest(
                groups=[
                    OffsetFetchRequest.OffsetFetchRequestGroup(
                        group_id=group_id,
                        topics=None
                        if topics is None
                        else [
                            OffsetFetchRequest.OffsetFetchRequestTopics(
                                name=name, partition_indexes=partitions
                            )
                            for name, partitions in topics.items()
                        ],
                    )
                ],
                require_stable=require_stable,
            )
            request = encoded(request, version)
            response: OffsetFetchResponse = encoded(self.coordinator.fetch_offsets(request, version), version)
            (group,) = response.groups
            assert group.error_code == ErrorCode.NONE, response
            return {
                (topic.name, partition.partition_index): (
                    partition.committed_offset,
                    ErrorCode(partition.error_code),
                )
                for topic in group.topics
                for partition in topic.partitions
            }
        request = OffsetFetchRequest(
            group_id=group_id,
            topics=None
            if topics is None
            else [
                OffsetFetchRequest.OffsetFetchRequestTopic(name=name, partition_indexes=partitions)
                for name, partitions in topics.items()
            ],
            require_stable=require_stable,
        )
        request = encoded(request, version)
        response = encoded(self.coordinator.fetch_offsets(request, version), version)
        assert response.error_code == ErrorCode.NONE, response
        return {
            (topic.name, partition.partition_index): (
                partition.committed_offset,
                ErrorCode(partition.error_code),
            )
            for topic in response.topics
            for partition in topic.partitions
        }

    def stable_group(self, group_id: str = "g", members: int = 2, **kwargs: Any) -> tuple[list[str], int]:
        """Members that joined (two-step) and synced; returns (member ids with the leader first, generation)."""
        boxes = []
        for _ in range(members):
            member_id, box = self.join_two_step(group_id, **kwargs)
            boxes.append((member_id, box))
        self.advance(0)
        assert all(box for _, box in boxes), "every join answered"
        responses = [box[0] for _, box in boxes]
        generation = responses[0].generation_id
        leader = responses[0].leader
        ids = [member_id for member_id, _ in boxes]
        assignments = {member_id: f"assignment-{member_id}".encode() for member_id in ids}
        for member_id in ids:
            if member_id != leader:
                self.sync(group_id, member_id, generation)
        result = self.sync(group_id, leader, generation, assignments)
        assert result and result[0].error_code == ErrorCode.NONE
        ordered = [leader] + [member_id for member_id in ids if member_id != leader]
        return ordered, generation
