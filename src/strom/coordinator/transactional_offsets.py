"""TxnOffsetCommit: offsets a transactional producer commits as part of its transaction (KIP-98's
consume-transform-produce, ``send_offsets_to_transaction``).

The offsets are written to the group's ``__consumer_offsets`` partition as one transactional batch
of the producer; once written they are *pending*: OffsetFetch does not return them (and answers
UNSTABLE_OFFSET_COMMIT for their partitions when asked for stable offsets), until the
transaction's marker is written to that partition — COMMIT makes them committed, ABORT drops them
(``GroupCoordinator.complete_transaction``).

Validation, as Kafka's group coordinator does it for this request:
- an empty group id: INVALID_GROUP_ID; then NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS;
- a group that does not exist may commit without a generation (a producer whose consumer uses no
  group management): the group comes into being with the offsets; with a generation, ILLEGAL_GENERATION;
- a group being removed (Dead): COORDINATOR_NOT_AVAILABLE;
- v3+ with a member id, a generation or an instance id: FENCED_INSTANCE_ID for an instance id held
  by another member, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, as OffsetCommit (KIP-447: a zombie
  producer's consumer is fenced by its group generation). Without them (v0-2 cannot send them)
  any group accepts the commit, whatever its state; a rebalance in progress is no error here
  (unlike OffsetCommit: the transaction, not the member, owns these offsets);
- per partition, metadata over ``offset.metadata.max.bytes``: OFFSET_METADATA_TOO_LARGE.
A failed write is told as OffsetCommit tells it (``offset_write_error``).
"""

from __future__ import annotations

from collections.abc import Callable

from strom.coordinator.group import Group
from strom.coordinator.records import (
    CommittedOffset,
    Record,
    offset_key_bytes,
    offset_value_bytes,
    offset_write_error,
)
from strom.coordinator.runtime import CoordinatorRuntime
from strom.coordinator.state import GroupState
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse

# TxnOffsetCommit v2 added the committed leader epoch, v3 the group generation, member id and
# group instance id.
LEADER_EPOCH_MIN_VERSION = 2
GROUP_MEMBER_MIN_VERSION = 3


class TransactionalOffsets:
    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.runtime = runtime

    def commit(
        self,
        request: TxnOffsetCommitRequest,
        version: int,
        respond: Callable[[TxnOffsetCommitResponse], None],
    ) -> None:
        runtime = self.runtime
        requested = [(topic.name, partition) for topic in request.topics for partition in topic.partitions]
        topic_order = [topic.name for topic in request.topics]

        def answer_all(error: ErrorCode) -> None:
            respond(_response({(name, p.partition_index): error for name, p in requested}, topic_order))

        group_id = request.group_id
        if not group_id:
            answer_all(ErrorCode.INVALID_GROUP_ID)
            return
        status_error = runtime.group_error(group_id)
        if status_error is not None:
            answer_all(status_error)
            return
        with_member = version >= GROUP_MEMBER_MIN_VERSION
        group_error = _group_error(
            runtime.groups.get(group_id),
            request.member_id if with_member else "",
            request.generation_id if with_member else -1,
            request.group_instance_id if with_member else None,
        )
        if group_error is not None:
            answer_all(group_error)
            return

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
            committed = CommittedOffset(
                offset=partition.committed_offset,
                leader_epoch=partition.committed_leader_epoch if version >= LEADER_EPOCH_MIN_VERSION else -1,
                metadata=metadata,
                commit_timestamp_ms=now_ms,
                expire_timestamp_ms=-1,
            )
            errors[key] = ErrorCode.NONE
            written_keys.append(key)
            records.append((offset_key_bytes(group_id, key[0], key[1]), offset_value_bytes(committed)))
        if not records:
            respond(_response(errors, topic_order))
            return

        def written(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                for key in written_keys:
                    errors[key] = offset_write_error(error)
            respond(_response(errors, topic_order))

        runtime.write_transactional(group_id, request.producer_id, request.producer_epoch, records, written)


def _group_error(
    group: Group | None, member_id: str, generation_id: int, group_instance_id: str | None
) -> ErrorCode | None:
    if group is None:
        # Kafka creates a group without members for a commit without generation; one that claims
        # a generation of a group this coordinator does not know is refused, and so is a member
        # of it (it has none).
        if generation_id >= 0:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.UNKNOWN_MEMBER_ID if member_id or group_instance_id is not None else None
    if group.state is GroupState.DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if generation_id < 0 and not member_id and group_instance_id is None:
        return None
    if group.consumer is not None and group.is_consumer_group:
        # A consumer group (KIP-848): the generation is the member's epoch; a stale one is
        # ILLEGAL_GENERATION here, as Kafka answers TxnOffsetCommit.
        consumer = group.consumer
        if member_id not in consumer.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group_instance_id is not None and consumer.static_members.get(group_instance_id) != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        if generation_id != consumer.current_of(member_id).member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        return None
    if group.is_static_member_fenced(member_id, group_instance_id):
        return ErrorCode.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if generation_id != group.generation_id:
        return ErrorCode.ILLEGAL_GENERATION
    return None


def _response(errors: dict[tuple[str, int], ErrorCode], topic_order: list[str]) -> TxnOffsetCommitResponse:
    by_topic: dict[str, list[TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition]] = {
        name: [] for name in dict.fromkeys(topic_order)
    }
    for (topic_name, partition_index), error in errors.items():
        by_topic[topic_name].append(
            TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                partition_index=partition_index, error_code=error
            )
        )
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(name=name, partitions=partitions)
            for name, partitions in by_topic.items()
            if partitions
        ]
    )
