"""DescribeGroups, ListGroups, DeleteGroups."""

from __future__ import annotations

import functools
from collections.abc import Callable

from strom.coordinator.consumer_group import Assignment, ConsumerGroup
from strom.coordinator.consumer_membership import ConsumerMembership
from strom.coordinator.consumer_records import group_tombstones
from strom.coordinator.group import Group
from strom.coordinator.membership import Membership
from strom.coordinator.records import Record, group_key_bytes, offset_key_bytes, offset_write_error
from strom.coordinator.runtime import CoordinatorRuntime
from strom.coordinator.state import GroupState
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from strom.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from strom.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from strom.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse

CLASSIC_GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"


class Admin:
    def __init__(
        self, runtime: CoordinatorRuntime, membership: Membership, consumer: ConsumerMembership
    ) -> None:
        self.runtime = runtime
        self.membership = membership
        self.consumer = consumer

    # ================================================================ DescribeGroups
    def describe(self, request: DescribeGroupsRequest, version: int) -> DescribeGroupsResponse:
        return DescribeGroupsResponse(
            groups=[self._describe_one(group_id, version) for group_id in request.groups]
        )

    def _describe_one(self, group_id: str, version: int) -> DescribeGroupsResponse.DescribedGroup:
        error = self.runtime.group_error(group_id)
        group = self.runtime.groups.get(group_id) if error is None else None
        if error is not None or group is None:
            # An unknown group is reported Dead with no error, as Kafka does.
            return DescribeGroupsResponse.DescribedGroup(
                error_code=error or ErrorCode.NONE,
                group_id=group_id,
                group_state=GroupState.DEAD.value,
                protocol_type="",
                protocol_data="",
            )
        if group.is_consumer_group:
            # As Kafka 4 answers: DescribeGroups is the classic groups' API (clients fall back to
            # it from ConsumerGroupDescribe on this very error).
            return DescribeGroupsResponse.DescribedGroup(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                group_id=group_id,
                group_state=GroupState.DEAD.value,
                protocol_type="",
                protocol_data="",
            )
        stable = group.state is GroupState.STABLE and group.protocol_name is not None
        members = []
        for member in group.members.values():
            # Metadata and assignment only mean something once the generation is Stable.
            metadata = b""
            if stable and group.protocol_name is not None and group.protocol_name in member.protocol_names():
                metadata = member.metadata_for(group.protocol_name)
            members.append(
                DescribeGroupsResponse.DescribedGroupMember(
                    member_id=member.member_id,
                    group_instance_id=member.group_instance_id if version >= 4 else None,
                    client_id=member.client_id,
                    client_host=member.client_host,
                    member_metadata=metadata,
                    member_assignment=member.assignment if stable else b"",
                )
            )
        return DescribeGroupsResponse.DescribedGroup(
            error_code=ErrorCode.NONE,
            group_id=group_id,
            group_state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(group.protocol_name or "") if stable else "",
            members=members,
        )

    # ================================================================ ConsumerGroupDescribe
    def describe_consumer_groups(
        self, request: ConsumerGroupDescribeRequest, version: int
    ) -> ConsumerGroupDescribeResponse:
        return ConsumerGroupDescribeResponse(
            groups=[self._describe_consumer_group(group_id) for group_id in request.group_ids]
        )

    def _describe_consumer_group(self, group_id: str) -> ConsumerGroupDescribeResponse.DescribedGroup:
        if not group_id:
            return ConsumerGroupDescribeResponse.DescribedGroup(
                error_code=ErrorCode.INVALID_GROUP_ID, group_id=group_id
            )
        error = self.runtime.group_error(group_id)
        if error is not None:
            return ConsumerGroupDescribeResponse.DescribedGroup(error_code=error, group_id=group_id)
        group = self.runtime.groups.get(group_id)
        if (
            group is None
            or group.state is GroupState.DEAD
            or group.consumer is None
            or not group.is_consumer_group
        ):
            message = (
                f"Group {group_id} not found."
                if group is None
                or group.state is GroupState.DEAD
                or (group.protocol_type is None and group.consumer is None)
                else f"Group {group_id} is not a consumer group."
            )
            return ConsumerGroupDescribeResponse.DescribedGroup(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=message, group_id=group_id
            )
        consumer = group.consumer
        members = []
        for member_id, member in sorted(consumer.members.items()):
            current = consumer.current_of(member_id)
            members.append(
                ConsumerGroupDescribeResponse.Member(
                    member_id=member_id,
                    instance_id=member.instance_id,
                    rack_id=member.rack_id,
                    member_epoch=current.member_epoch,
                    client_id=member.client_id,
                    client_host=member.client_host,
                    subscribed_topic_names=list(member.subscribed_topic_names),
                    subscribed_topic_regex=member.subscribed_topic_regex,
                    assignment=self._described_assignment(consumer, current.assigned),
                    target_assignment=self._described_assignment(consumer, consumer.target_of(member_id)),
                )
            )
        return ConsumerGroupDescribeResponse.DescribedGroup(
            error_code=ErrorCode.NONE,
            group_id=group_id,
            group_state=consumer.state().value,
            group_epoch=consumer.group_epoch,
            assignment_epoch=consumer.target_epoch,
            assignor_name=self.consumer.step.preferred_assignor(consumer.members.values()),
            members=members,
        )

    @staticmethod
    def _described_assignment(
        consumer: ConsumerGroup, assignment: Assignment
    ) -> ConsumerGroupDescribeResponse.Assignment:
        return ConsumerGroupDescribeResponse.Assignment(
            topic_partitions=[
                ConsumerGroupDescribeResponse.TopicPartitions(
                    topic_id=topic_id,
                    topic_name=consumer.topic_name(topic_id) or "",
                    partitions=sorted(partitions),
                )
                for topic_id, partitions in sorted(assignment.items())
            ]
        )

    # ================================================================ ListGroups
    def list_groups(self, request: ListGroupsRequest, version: int) -> ListGroupsResponse:
        wanted: set[str] | None = None
        if version >= 4 and request.states_filter:
            wanted = {name.lower() for name in request.states_filter}
        wanted_types: set[str] | None = None
        if version >= 5 and request.types_filter:
            wanted_types = {name.lower() for name in request.types_filter}
        listed = []
        for group_id, group in sorted(self.runtime.groups.items()):
            if self.runtime.group_error(group_id) is not None or group.state is GroupState.DEAD:
                continue
            if group.consumer is not None and group.is_consumer_group:
                group_type = CONSUMER_GROUP_TYPE
                state = group.consumer.state().value
                protocol_type = CONSUMER_GROUP_TYPE
            elif group.consumer is not None:
                continue  # a consumer group being made: its first records are not written yet
            else:
                group_type = CLASSIC_GROUP_TYPE
                state = group.state.value
                protocol_type = group.protocol_type or ""
            if wanted is not None and state.lower() not in wanted:
                continue
            if wanted_types is not None and group_type not in wanted_types:
                continue
            listed.append(
                ListGroupsResponse.ListedGroup(
                    group_id=group_id,
                    protocol_type=protocol_type,
                    group_state=state if version >= 4 else "",
                    group_type=group_type if version >= 5 else "",
                )
            )
        # While a partition loads, the list may be incomplete: Kafka says so with an error.
        error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if self.runtime.is_loading_any() else ErrorCode.NONE
        return ListGroupsResponse(error_code=error, groups=listed)

    # ================================================================ DeleteGroups
    def delete_groups(
        self, request: DeleteGroupsRequest, version: int, respond: Callable[[DeleteGroupsResponse], None]
    ) -> None:
        results: dict[str, ErrorCode] = {}
        waiting: set[str] = set()

        def build() -> DeleteGroupsResponse:
            return DeleteGroupsResponse(
                results=[
                    DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=error)
                    for group_id, error in results.items()
                ]
            )

        def one_written(group: Group, error: ErrorCode) -> None:
            if self.runtime.groups.get(group.group_id) is group:
                # Deleted in memory even if the tombstones failed: the group is Dead already.
                del self.runtime.groups[group.group_id]
            results[group.group_id] = offset_write_error(error) if error != ErrorCode.NONE else ErrorCode.NONE
            waiting.discard(group.group_id)
            if not waiting:
                respond(build())

        to_write: list[tuple[Group, list[Record]]] = []
        for group_id in dict.fromkeys(request.groups_names):
            error = self.runtime.group_error(group_id)
            group = self.runtime.groups.get(group_id) if error is None else None
            if error is not None:
                results[group_id] = error
            elif group is None or group.state is GroupState.DEAD:
                results[group_id] = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.state is not GroupState.EMPTY or (
                group.consumer is not None and (group.consumer.members or group.consumer.writing)
            ):
                results[group_id] = ErrorCode.NON_EMPTY_GROUP
            else:
                group.transition_to(GroupState.DEAD, self.runtime.now_wall_ms())
                self.runtime.cancel_group_timers(group)
                # Offsets pending in a transaction are tombstoned too: written later, the
                # tombstones beat them, and their transaction's commit brings nothing back.
                keys = list(group.offsets) + sorted(group.pending_offset_keys() - group.offsets.keys())
                records: list[Record] = [
                    (offset_key_bytes(group_id, topic, partition), None) for topic, partition in keys
                ]
                if group.consumer is not None:
                    records.extend(group_tombstones(group.consumer))
                if group.protocol_type is not None or group.consumer is None:
                    records.append((group_key_bytes(group_id), None))
                results[group_id] = ErrorCode.NONE
                waiting.add(group_id)
                to_write.append((group, records))
        if not to_write:
            respond(build())
            return
        for group, records in to_write:
            self.runtime.write(group.group_id, records, functools.partial(one_written, group))
