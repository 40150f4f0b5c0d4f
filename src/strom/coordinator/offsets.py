"""OffsetCommit, OffsetFetch, OffsetDelete and offset expiry.

A commit becomes visible only once its records are written: the handler builds the records, the
runtime appends them and replays them on success, exactly as loading the partition would.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from strom.coordinator.consumer_records import group_tombstones
from strom.coordinator.group import Group
from strom.coordinator.membership import Membership
from strom.coordinator.records import (
    CommittedOffset,
    Record,
    group_key_bytes,
    offset_key_bytes,
    offset_value_bytes,
    offset_write_error,
)
from strom.coordinator.runtime import CoordinatorRuntime
from strom.coordinator.state import GroupState
from strom.coordinator.timers import offsets_expiry_key
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from strom.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from strom.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse

_NO_OFFSET = -1
REQUIRE_STABLE_MIN_VERSION = 7
_TIMESTAMP_MS_MAX = 2**63 - 1


def _commit_response(
    errors: dict[tuple[str, int], ErrorCode], topics_in_order: list[str]
) -> OffsetCommitResponse:
    by_topic: dict[str, list[OffsetCommitResponse.OffsetCommitResponsePartition]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(
            OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=partition, error_code=error)
        )
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(name=topic, partitions=by_topic[topic])
            for topic in dict.fromkeys(topics_in_order)
            if topic in by_topic
        ]
    )


class Offsets:
    def __init__(self, runtime: CoordinatorRuntime, membership: Membership) -> None:
        self.runtime = runtime
        self.membership = membership

    # ================================================================ OffsetCommit
    def commit(
        self, request: OffsetCommitRequest, version: int, respond: Callable[[OffsetCommitResponse], None]
    ) -> None:
        runtime = self.runtime
        requested = [(topic.name, partition) for topic in request.topics for partition in topic.partitions]
        topic_order = [topic.name for topic in request.topics]

        def answer_all(error: ErrorCode) -> None:
            respond(
                _commit_response({(name, p.partition_index): error for name, p in requested}, topic_order)
            )

        group_id = request.group_id
        status_error = runtime.group_error(group_id)
        if status_error is not None:
            answer_all(status_error)
            return
        # v0 carries neither generation nor member id: it is a commit without group management.
        generation_id = request.generation_id_or_member_epoch if version >= 1 else -1
        member_id = request.member_id if version >= 1 else ""
        group_instance_id = request.group_instance_id if version >= 7 else None
        group = runtime.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # Not a group this coordinator knows, yet the client claims a generation.
                answer_all(ErrorCode.ILLEGAL_GENERATION)
                return
            group = Group(group_id, state_timestamp_ms=runtime.now_wall_ms())
            runtime.groups[group_id] = group
        if group.consumer is not None and group.is_consumer_group:
            group_error = _consumer_commit_error(group, member_id, generation_id, version)
        else:
            group_error = self._commit_group_error(group, member_id, generation_id, group_instance_id)
        if group_error is not None:
            answer_all(group_error)
            return
        self.membership.keep_alive(group, member_id)

        now_ms = runtime.now_wall_ms()
        errors: dict[tuple[str, int], ErrorCode] = {}
        records: list[Record] = []
        written_keys: list[tuple[str, int]] = []
        for topic_name, partition in requested:
            key = (topic_name, partition.partition_index)
            metadata = partition.committed_metadata or ""
            if len(metadata.encode("utf-8")) > runtime.config.offset_metadata_max_bytes:
                errors[key] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            commit_timestamp_ms = now_ms
            if version == 1 and partition.commit_timestamp >= 0:
                commit_timestamp_ms = partition.commit_timestamp
            expire_timestamp_ms = -1
            if 2 <= version <= 4 and request.retention_time_ms >= 0:
                # A retention of up to 2**63-1 ms is valid on the wire: it means "keep for ever",
                # and the sum must still fit the int64 of the stored record.
                expire_timestamp_ms = min(commit_timestamp_ms + request.retention_time_ms, _TIMESTAMP_MS_MAX)
            committed = CommittedOffset(
                offset=partition.committed_offset,
                leader_epoch=partition.committed_leader_epoch if version >= 6 else -1,
                metadata=metadata,
                commit_timestamp_ms=commit_timestamp_ms,
                expire_timestamp_ms=expire_timestamp_ms,
            )
            errors[key] = ErrorCode.NONE
            written_keys.append(key)
            records.append((offset_key_bytes(group_id, key[0], key[1]), offset_value_bytes(committed)))
        if not records:
            respond(_commit_response(errors, topic_order))
            return

        def written(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                for key in written_keys:
                    errors[key] = offset_write_error(error)
            respond(_commit_response(errors, topic_order))

        runtime.write(group_id, records, written)

    def _commit_group_error(
        self, group: Group, member_id: str, generation_id: int, group_instance_id: str | None
    ) -> ErrorCode | None:
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return None  # offsets of a group without members (manual assignment)
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        # Stable, and PreparingRebalance too: Kafka lets members of the current generation commit
        # while the others rejoin (the heartbeat tells them about the rebalance).
        return None

    # ================================================================ OffsetFetch
    def fetch(self, request: OffsetFetchRequest, version: int) -> OffsetFetchResponse:
        # v7+: a partition with an offset pending in a transaction is answered
        # UNSTABLE_OFFSET_COMMIT (the consumer retries) instead of its last committed offset.
        require_stable = version >= REQUIRE_STABLE_MIN_VERSION and request.require_stable
        if version >= 8:
            groups = [
                self._fetch_group_v8(
                    entry.group_id,
                    None
                    if entry.topics is None
                    else [(t.name, list(t.partition_indexes)) for t in entry.topics],
                    require_stable,
                    entry.member_id if version >= 9 else None,
                    entry.member_epoch if version >= 9 else -1,
                )
                for entry in request.groups
            ]
            return OffsetFetchResponse(groups=groups)
        topics = (
            None
            if request.topics is None
            else [(topic.name, list(topic.partition_indexes)) for topic in request.topics]
        )
        error, found = self._fetch(request.group_id, topics, require_stable)
        response_topics = [
            OffsetFetchResponse.OffsetFetchResponseTopic(
                name=topic,
                partitions=[
                    OffsetFetchResponse.OffsetFetchResponsePartition(
                        partition_index=partition,
                        committed_offset=committed.offset if committed else _NO_OFFSET,
                        committed_leader_epoch=committed.leader_epoch if committed and version >= 5 else -1,
                        metadata=committed.metadata if committed else "",
                        # v0-1 have no top-level error: the group's error goes in every partition.
                        error_code=error if version < 2 else partition_error,
                    )
                    for partition, committed, partition_error in partitions
                ],
            )
            for topic, partitions in found
        ]
        if version >= 2:
            return OffsetFetchResponse(topics=response_topics, error_code=error)
        return OffsetFetchResponse(topics=response_topics)

    def _fetch_group_v8(
        self,
        group_id: str,
        topics: list[tuple[str, list[int]]] | None,
        require_stable: bool,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> OffsetFetchResponse.OffsetFetchResponseGroup:
        member_error = self._fetch_member_error(group_id, member_id, member_epoch)
        if member_error is not None:
            return OffsetFetchResponse.OffsetFetchResponseGroup(group_id=group_id, error_code=member_error)
        error, found = self._fetch(group_id, topics, require_stable)
        return OffsetFetchResponse.OffsetFetchResponseGroup(
            group_id=group_id,
            error_code=error,
            topics=[
                OffsetFetchResponse.OffsetFetchResponseTopics(
                    name=topic,
                    partitions=[
                        OffsetFetchResponse.OffsetFetchResponsePartitions(
                            partition_index=partition,
                            committed_offset=committed.offset if committed else _NO_OFFSET,
                            committed_leader_epoch=committed.leader_epoch if committed else -1,
                            metadata=committed.metadata if committed else "",
                            error_code=partition_error,
                        )
                        for partition, committed, partition_error in partitions
                    ],
                )
                for topic, partitions in found
            ],
        )

    def _fetch_member_error(
        self, group_id: str, member_id: str | None, member_epoch: int
    ) -> ErrorCode | None:
        """OffsetFetch v9 from a member of a consumer group (KIP-848): it must be a member, at its
        current epoch. An admin's fetch (no member id, epoch -1) and classic groups are not checked."""
        if member_id is None and member_epoch < 0:
            return None
        if self.runtime.group_error(group_id) is not None:
            return None  # the group-level error says it
        group = self.runtime.groups.get(group_id)
        if group is None or group.consumer is None or not group.is_consumer_group:
            return None
        consumer = group.consumer
        if not member_id or member_id not in consumer.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != consumer.current_of(member_id).member_epoch:
            return ErrorCode.STALE_MEMBER_EPOCH
        return None

    def _fetch(
        self, group_id: str, topics: list[tuple[str, list[int]]] | None, require_stable: bool
    ) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, CommittedOffset | None, ErrorCode]]]]]:
        """The group's error and, per topic, (partition, committed offset or None, its error)."""
        error = self.runtime.group_error(group_id)
        group = self.runtime.groups.get(group_id) if error is None else None
        if group is None or group.state is GroupState.DEAD:
            offsets: dict[tuple[str, int], CommittedOffset] = {}
            unstable: set[tuple[str, int]] = set()
        else:
            offsets = group.offsets
            unstable = group.pending_offset_keys() if require_stable else set()

        def entry(topic: str, partition: int) -> tuple[int, CommittedOffset | None, ErrorCode]:
            if (topic, partition) in unstable:
                return partition, None, ErrorCode.UNSTABLE_OFFSET_COMMIT
            return partition, offsets.get((topic, partition)), ErrorCode.NONE

        if topics is None:
            # Every committed offset of the group (v2+ with a null topic list), as Kafka lists
            # them: a partition with only a pending offset has no committed one to list.
            by_topic: dict[str, list[tuple[int, CommittedOffset | None, ErrorCode]]] = {}
            for topic, partition in sorted(offsets):
                by_topic.setdefault(topic, []).append(entry(topic, partition))
            return error or ErrorCode.NONE, list(by_topic.items())
        found = [
            (topic, [entry(topic, partition) for partition in partitions]) for topic, partitions in topics
        ]
        return error or ErrorCode.NONE, found

    # ================================================================ OffsetDelete
    def delete(
        self, request: OffsetDeleteRequest, version: int, respond: Callable[[OffsetDeleteResponse], None]
    ) -> None:
        runtime = self.runtime
        group_id = request.group_id
        error = runtime.group_error(group_id)
        group = runtime.groups.get(group_id) if error is None else None
        if error is None and (group is None or group.state is GroupState.DEAD):
            error = ErrorCode.GROUP_ID_NOT_FOUND
        if error is not None or group is None:
            respond(OffsetDeleteResponse(error_code=error or ErrorCode.GROUP_ID_NOT_FOUND))
            return
        subscribed: frozenset[str] = frozenset()
        if group.consumer is not None and group.is_consumer_group:
            # A consumer group: the topics its members subscribe to (names and regexes resolved).
            if group.consumer.members:
                subscribed = group.consumer.subscribed_topic_names()
        elif group.state is not GroupState.EMPTY:
            known_subscription = group.subscribed_topics()
            if known_subscription is None:
                # Members with a protocol whose subscriptions cannot be read: nothing is safe to delete.
                respond(OffsetDeleteResponse(error_code=ErrorCode.NON_EMPTY_GROUP))
                return
            subscribed = known_subscription
        errors: dict[tuple[str, int], ErrorCode] = {}
        records: list[Record] = []
        for topic in request.topics:
            for partition in topic.partitions:
                key = (topic.name, partition.partition_index)
                if topic.name in subscribed:
                    errors[key] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                    continue
                errors[key] = ErrorCode.NONE
                # A tombstone also beats an offset pending in a transaction (written later, it
                # wins): the transaction's commit does not bring the deleted offset back.
                if key in group.offsets or group.has_pending_offset(key):
                    records.append((offset_key_bytes(group_id, key[0], key[1]), None))

        def build() -> OffsetDeleteResponse:
            by_topic: dict[str, list[OffsetDeleteResponse.OffsetDeleteResponsePartition]] = {}
            for (topic_name, partition_index), partition_error in errors.items():
                by_topic.setdefault(topic_name, []).append(
                    OffsetDeleteResponse.OffsetDeleteResponsePartition(
                        partition_index=partition_index, error_code=partition_error
                    )
                )
            return OffsetDeleteResponse(
                error_code=ErrorCode.NONE,
                topics=[
                    OffsetDeleteResponse.OffsetDeleteResponseTopic(name=name, partitions=partitions)
                    for name, partitions in by_topic.items()
                ],
            )

        if not records:
            respond(build())
            return

        def written(write_error: ErrorCode) -> None:
            if write_error != ErrorCode.NONE:
                respond(OffsetDeleteResponse(error_code=offset_write_error(write_error)))
                return
            respond(build())

        runtime.write(group_id, records, written)

    # ================================================================ expiry
    def schedule_expiry(self) -> None:
        self.runtime.timer.schedule(
            offsets_expiry_key(), self.runtime.config.offsets_retention_check_interval_ms, self.expire
        )

    def expire(self) -> None:
        """Write tombstones for expired offsets; an Empty group left with none is removed."""
        runtime = self.runtime
        now_ms = runtime.now_wall_ms()
        retention_ms = runtime.config.offsets_retention_ms
        for group_id, group in list(runtime.groups.items()):
            if runtime.group_error(group_id) is not None or group.state is GroupState.DEAD:
                continue
            expired = self._expired_offsets(group, now_ms, retention_ms)
            records: list[Record] = [(offset_key_bytes(group_id, topic, p), None) for topic, p in expired]
            remaining = set(group.offsets) - set(expired)
            consumer = group.consumer
            busy_consumer_group = consumer is not None and bool(
                consumer.members or consumer.writing or consumer.waiting
            )
            if (
                group.state is GroupState.EMPTY
                and not busy_consumer_group
                and not remaining
                and not group.pending_transactional_offsets
            ):
                group.transition_to(GroupState.DEAD, now_ms)
                runtime.cancel_group_timers(group)
                if consumer is not None:
                    records.extend(group_tombstones(consumer))
                if group.protocol_type is not None or consumer is None:
                    records.append((group_key_bytes(group_id), None))
            if records:
                runtime.write(group_id, records, functools.partial(self._expiry_written, group))
        self.schedule_expiry()

    def _expiry_written(self, group: Group, error: ErrorCode) -> None:
        # A Dead group whose tombstone could not be written is forgotten anyway (it has no offsets
        # and no members); the stale record only brings back an Empty group on the next load.
        if group.state is GroupState.DEAD and self.runtime.groups.get(group.group_id) is group:
            self.runtime.groups.pop(group.group_id, None)

    @staticmethod
    def _expired_offsets(group: Group, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
        """The group's offsets past their retention. An offset with a newer one pending in a
        transaction is kept: its tombstone would beat the pending one (written later), and the
        transaction's commit would then leave the partition without an offset."""
        expired = _expired_by_retention(group, now_ms, retention_ms)
        if group.pending_transactional_offsets:
            pending = group.pending_offset_keys()
            expired = [key for key in expired if key not in pending]
        return expired


def _consumer_commit_error(group: Group, member_id: str, member_epoch: int, version: int) -> ErrorCode | None:
    """OffsetCommit to a consumer group (KIP-848), as Kafka answers it: without a member epoch only
    while the group has no members; else a member of it at its current epoch, with v9+."""
    consumer = group.consumer
    assert consumer is not None
    if member_epoch < 0 and not consumer.members:
        return None
    member = consumer.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if member.classic is not None:
        # A classic member commits with its generation: its member epoch.
        if member_epoch != consumer.current_of(member_id).member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        return None
    if version < 9:
        return ErrorCode.UNSUPPORTED_VERSION
    if member_epoch != consumer.current_of(member_id).member_epoch:
        return ErrorCode.STALE_MEMBER_EPOCH
    return None


def _expired_by_retention(group: Group, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
    expired = []
    consumer = group.consumer
    if consumer is not None and group.is_consumer_group:
        if consumer.members:
            # Offsets of topics the members no longer subscribe to expire; the others are in use.
            in_use = consumer.subscribed_topic_names()
            for key, committed in group.offsets.items():
                if key[0] not in in_use and now_ms - committed.commit_timestamp_ms >= retention_ms:
                    expired.append(key)
            return expired
        for key, committed in group.offsets.items():
            # An empty group's offsets count from the later of the commit and the group emptying.
            base_ms = max(committed.commit_timestamp_ms, consumer.empty_since_ms)
            if committed.expire_timestamp_ms >= 0:
                if now_ms >= committed.expire_timestamp_ms:
                    expired.append(key)
            elif now_ms - base_ms >= retention_ms:
                expired.append(key)
        return expired
    if group.state is GroupState.EMPTY:
        for key, committed in group.offsets.items():
            if committed.expire_timestamp_ms >= 0:
                if now_ms >= committed.expire_timestamp_ms:
                    expired.append(key)
                continue
            # Groups with a protocol count from when they became Empty; member-less
            # (manual assignment) groups from each commit.
            base_ms = (
                group.state_timestamp_ms
                if group.protocol_type and group.state_timestamp_ms >= 0
                else committed.commit_timestamp_ms
            )
            if now_ms - base_ms >= retention_ms:
                expired.append(key)
        return expired
    subscribed = group.subscribed_topics()
    if group.state is GroupState.STABLE and subscribed is not None:
        # A consumer group expires offsets of topics it no longer subscribes to.
        for key, committed in group.offsets.items():
            if key[0] not in subscribed and now_ms - committed.commit_timestamp_ms >= retention_ms:
                expired.append(key)
    return expired
