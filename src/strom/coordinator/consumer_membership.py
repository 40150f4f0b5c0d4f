"""ConsumerGroupHeartbeat and what it drives: the consumer group protocol's membership (KIP-848).

Every change is a batch of ConsumerGroup* records (``consumer_records.py``): an operation (a
heartbeat, a session or rebalance timeout, a change of topics) reads the group's state, computes the
records that move it on, writes them, and the records are applied once written (the same code
loading runs) before the member is answered. While one write of a group is in flight its next
operations wait (``ConsumerGroup.waiting``), so each is computed from the state the previous left.

An operation's records, in order (computed by ``consumer_step.GroupStep``):
1. members join, update their metadata, leave or are fenced (member metadata records);
2. if the members' subscriptions or the subscribed topics changed, the group epoch goes up (the
   subscribed topics' metadata and the group epoch records);
3. if the group epoch is past the target assignment's, the server assignor computes a new target
   (the changed members' targets and the target epoch records);
4. the member that sent the heartbeat takes one reconciliation step towards its target
   (``reconciliation.reconcile``; its current assignment record).

Timers (session, and rebalance while a member revokes) are armed and cancelled once the records
that call for it are written; a write that fails leaves the members' timers as they were.
"""

from __future__ import annotations

import functools
import logging
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Protocol

from strom.assignors.server import ServerAssignor
from strom.base import limits
from strom.coordinator.consumer_group import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    MemberAssignment,
    MemberMetadata,
    MemberState,
    normalized,
    partitions_of,
)
from strom.coordinator.consumer_records import (
    current_record,
)
from strom.coordinator.consumer_step import GroupStep, compile_subscription_regex
from strom.coordinator.consumer_topics import TopicsView
from strom.coordinator.group import Group
from strom.coordinator.history import Trigger
from strom.coordinator.records import Record
from strom.coordinator.runtime import CoordinatorRuntime
from strom.coordinator.state import GroupState
from strom.coordinator.timers import consumer_rebalance_key, consumer_session_key
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

log = logging.getLogger("strom.coordinator")

HeartbeatRespond = Callable[[ConsumerGroupHeartbeatResponse], None]

# Kafka's mapping of a failed write of a consumer group's records to what the member is told: a
# coordinator that moved says so, one that cannot write now is "not available" (the member finds it
# again and retries); a batch too large is the server's own fault.
_WRITE_ERRORS: dict[ErrorCode, ErrorCode] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def consumer_write_error(error: ErrorCode) -> ErrorCode:
    return _WRITE_ERRORS.get(error, error)


class HeartbeatError(Exception):
    """A heartbeat refused with ``code`` (and a message for the client)."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


def assignment_from_request(
    topic_partitions: Iterable[ConsumerGroupHeartbeatRequest.TopicPartitions] | None,
) -> Assignment | None:
    if topic_partitions is None:
        return None
    merged: dict[uuid.UUID, set[int]] = {}
    for entry in topic_partitions:
        merged.setdefault(entry.topic_id, set()).update(entry.partitions)
    return normalized(merged)


def response_assignment(assignment: Assignment) -> ConsumerGroupHeartbeatResponse.Assignment:
    return ConsumerGroupHeartbeatResponse.Assignment(
        topic_partitions=[
            ConsumerGroupHeartbeatResponse.TopicPartitions(topic_id=topic_id, partitions=sorted(partitions))
            for topic_id, partitions in sorted(assignment.items())
        ]
    )


class Migration(Protocol):
    """Classic groups becoming consumer groups and back (``consumer_classic.py``)."""

    def upgrade(self, group: Group) -> ErrorCode | None:
        """Start converting the classic group with members; None if started, else why not."""

    def downgrade(
        self, group: Group, consumer: ConsumerGroup, remaining: list[MemberMetadata]
    ) -> tuple[list[Record], Callable[[], None]] | None:
        """The records that make the consumer group (left with only ``remaining``, all classic)
        a classic group, and what to do once they are written; None if it cannot be."""


class ConsumerMembership:
    def __init__(
        self, runtime: CoordinatorRuntime, topics: TopicsView, assignors: Mapping[str, ServerAssignor]
    ) -> None:
        self.runtime = runtime
        self.topics = topics
        self.step = GroupStep(runtime.config, topics, assignors)
        self.migration: Migration | None = None

    # ================================================================ ConsumerGroupHeartbeat
    def heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        version: int,
        client_id: str,
        client_host: str,
        respond: HeartbeatRespond,
    ) -> None:
        def fail(code: ErrorCode, message: str | None = None) -> None:
            respond(ConsumerGroupHeartbeatResponse(error_code=code, error_message=message))

        if "consumer" not in self.runtime.config.rebalance_protocols:
            # group.coordinator.rebalance.protocols leaves the consumer protocol out (the broker
            # then neither serves nor advertises the API; this is the coordinator's own word).
            fail(ErrorCode.UNSUPPORTED_VERSION, "The consumer group protocol is not enabled.")
            return
        try:
            self._validate(request, version)
        except HeartbeatError as error:
            fail(error.code, error.message)
            return
        group_id = request.group_id
        status_error = self.runtime.group_error(group_id)
        if status_error is not None:
            fail(status_error)
            return
        try:
            group = self._consumer_group_for(group_id, request.member_epoch)
        except HeartbeatError as error:
            fail(error.code, error.message)
            return
        operation = functools.partial(self._heartbeat, group, request, client_id, client_host, respond)
        self.run(group, operation, lambda code: fail(code))

    def _validate(self, request: ConsumerGroupHeartbeatRequest, version: int) -> None:
        """Kafka's checks of a request on its own, before the group is looked at."""
        if not request.group_id:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
        if request.instance_id is not None and not request.instance_id:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "InstanceId can't be empty.")
        if request.rack_id is not None and not request.rack_id:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
        for what, value in (
            ("MemberId", request.member_id),
            ("InstanceId", request.instance_id),
            ("RackId", request.rack_id),
            ("ServerAssignor", request.server_assignor),
        ):
            if value is not None and len(value) > limits.consumer_member_identifier_chars_max:
                raise HeartbeatError(
                    ErrorCode.INVALID_REQUEST,
                    f"{what} is longer than {limits.consumer_member_identifier_chars_max} characters.",
                )
        epoch = request.member_epoch
        if epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, f"MemberEpoch {epoch} is invalid.")
        regex = request.subscribed_topic_regex if version >= 1 else None
        if epoch == JOIN_GROUP_MEMBER_EPOCH:
            if request.rebalance_timeout_ms <= 0:
                raise HeartbeatError(
                    ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."
                )
            if request.topic_partitions:
                raise HeartbeatError(
                    ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."
                )
            if request.subscribed_topic_names is None and regex is None:
                raise HeartbeatError(
                    ErrorCode.INVALID_REQUEST,
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                )
        elif not request.member_id:
            raise HeartbeatError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        names = request.subscribed_topic_names
        if names is not None and len(names) > limits.consumer_subscribed_topics_max:
            raise HeartbeatError(
                ErrorCode.INVALID_REQUEST,
                f"SubscribedTopicNames has {len(names)} topics, more than "
                f"{limits.consumer_subscribed_topics_max}.",
            )
        if regex:
            if len(regex) > limits.consumer_subscription_regex_chars_max:
                raise HeartbeatError(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex is longer than {limits.consumer_subscription_regex_chars_max} "
                    "characters.",
                )
            try:
                compile_subscription_regex(regex)
            except (re.error, RecursionError, OverflowError) as error:
                raise HeartbeatError(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex {regex!r} is invalid: {error}",
                ) from None
        assignor = request.server_assignor
        if assignor is not None and assignor not in self.runtime.config.consumer_group_assignors:
            raise HeartbeatError(
                ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported."
            )

    def _consumer_group_for(self, group_id: str, member_epoch: int) -> Group:
        """The group as a consumer group: made (epoch 0) if it does not exist or is a classic group
        without members (whose offsets it keeps)."""
        runtime = self.runtime
        group = runtime.groups.get(group_id)
        if group is not None and group.consumer is not None:
            return group
        if group is None or group.state is GroupState.DEAD:
            if member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {group_id} has no member like it.")
            group = Group(group_id, state_timestamp_ms=runtime.now_wall_ms())
            runtime.groups[group_id] = group
        elif group.members or group.pending_members or group.state is not GroupState.EMPTY:
            # A classic group with members: it becomes a consumer group with them (they go on as
            # classic members) if the policy allows and it can.
            if member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                # Not a member of it (the group went back to classic after the member was removed):
                # it joins again, which may upgrade the group. (librdkafka takes GROUP_ID_NOT_FOUND
                # as fatal; this member is only unknown.)
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {group_id} has no member like it.")
            refusal = ErrorCode.GROUP_ID_NOT_FOUND
            if self.migration is not None:
                refusal = self.migration.upgrade(group) or ErrorCode.NONE
            if refusal != ErrorCode.NONE:
                raise HeartbeatError(refusal, f"Group {group_id} is not a consumer group.")
            assert group.consumer is not None
            return group
        elif member_epoch != JOIN_GROUP_MEMBER_EPOCH:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Group {group_id} has no member like it.")
        group.consumer = ConsumerGroup(group_id, replaces_classic=group.protocol_type is not None)
        return group

    def run(self, group: Group, operation: Callable[[], None], fail: Callable[[ErrorCode], None]) -> None:
        """Run ``operation`` on the group now, or once the writes in flight are done."""
        consumer = group.consumer
        assert consumer is not None, f"group {group.group_id} is not a consumer group"
        if consumer.writing:
            consumer.waiting.append((operation, fail))
            return
        operation()

    def _drain(self, group: Group) -> None:
        consumer = group.consumer
        if consumer is None:
            return
        while consumer.waiting and not consumer.writing:
            operation, fail = consumer.waiting.popleft()
            if self.runtime.groups.get(group.group_id) is not group or group.consumer is not consumer:
                fail(self.runtime.group_error(group.group_id) or ErrorCode.NOT_COORDINATOR)
                continue
            operation()

    def fail_waiting(self, group: Group, error: ErrorCode) -> None:
        """The group is unloaded: answer what waits on it."""
        consumer = group.consumer
        if consumer is None:
            return
        while consumer.waiting:
            _, fail = consumer.waiting.popleft()
            fail(error)

    def write(
        self,
        group: Group,
        records: list[Record],
        after: Callable[[ErrorCode], None],
        removal: Trigger | None = None,
    ) -> None:
        """Write ``records`` (applied once written), then ``after(error)``, then what waited
        (``removal``: why the members these records remove are removed, for the history)."""
        consumer = group.consumer
        assert consumer is not None
        if not records:
            after(ErrorCode.NONE)
            return
        consumer.writing = True
        history = self.runtime.history
        snapshot = history.consumer_snapshot(consumer, records)

        def written(error: ErrorCode) -> None:
            consumer.writing = False
            if error == ErrorCode.NONE and self.runtime.groups.get(group.group_id) is not group:
                error = ErrorCode.NOT_COORDINATOR
            if error == ErrorCode.NONE:
                history.consumer_written(consumer, snapshot, removal, self.runtime.now_wall_ms())
            after(error)
            self._forget_if_unused(group)
            self._drain(group)

        self.runtime.write(group.group_id, records, written)

    def _forget_if_unused(self, group: Group) -> None:
        """A consumer group whose first write failed leaves nothing behind (offsets stay)."""
        consumer = group.consumer
        if consumer is None or not consumer.is_empty_of_state() or consumer.writing or consumer.waiting:
            return
        group.consumer = None
        if (
            self.runtime.groups.get(group.group_id) is group
            and not group.offsets
            and not group.pending_transactional_offsets
            and group.protocol_type is None
            and not group.members
        ):
            del self.runtime.groups[group.group_id]

    # ---------------------------------------------------------------- one heartbeat
    def _heartbeat(
        self,
        group: Group,
        request: ConsumerGroupHeartbeatRequest,
        client_id: str,
        client_host: str,
        respond: HeartbeatRespond,
    ) -> None:
        consumer = group.consumer
        if consumer is None:
            # The group became a classic group while this waited.
            respond(ConsumerGroupHeartbeatResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID))
            return
        epoch = request.member_epoch
        try:
            if epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                self._leave(group, consumer, request, respond)
            else:
                self._join_or_heartbeat(group, consumer, request, client_id, client_host, respond)
        except HeartbeatError as error:
            respond(ConsumerGroupHeartbeatResponse(error_code=error.code, error_message=error.message))

    def _join_or_heartbeat(
        self,
        group: Group,
        consumer: ConsumerGroup,
        request: ConsumerGroupHeartbeatRequest,
        client_id: str,
        client_host: str,
        respond: HeartbeatRespond,
    ) -> None:
        config = self.runtime.config
        joining = request.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        member_id = request.member_id or (str(uuid.uuid4()) if joining else "")
        instance_id = request.instance_id
        replaced: str | None = None  # the member a static member's new instance takes over from
        owned = assignment_from_request(request.topic_partitions)
        old = consumer.members.get(member_id)
        if joining:
            owned = {}  # a (re)joining member owns nothing
            if instance_id is not None:
                holder = consumer.static_members.get(instance_id)
                if holder is not None and holder != member_id:
                    if consumer.current_of(holder).member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                        raise HeartbeatError(
                            ErrorCode.UNRELEASED_INSTANCE_ID,
                            f"Static member {holder} with instance id {instance_id} is not released yet.",
                        )
                    replaced = holder
            if old is None and replaced is None and len(consumer.members) >= config.consumer_group_max_size:
                raise HeartbeatError(
                    ErrorCode.GROUP_MAX_SIZE_REACHED,
                    f"The consumer group has reached its maximum capacity of "
                    f"{config.consumer_group_max_size} members.",
                )
        else:
            self._check_member(consumer, member_id, instance_id, request.member_epoch, owned)

        base = old if old is not None else (consumer.members[replaced] if replaced is not None else None)
        metadata = _updated_metadata(base, member_id, request, client_id, client_host)
        if replaced is not None:
            left = consumer.current_of(replaced)
            replaced_current = replace(left, member_epoch=left.previous_member_epoch)
        current_before = consumer.current_of(member_id) if replaced is None else replaced_current
        if joining and replaced is None:
            # Whatever it owned it has let go (it says it owns nothing); what its target keeps it
            # gets again at once.
            current_before = MemberAssignment(
                member_epoch=JOIN_GROUP_MEMBER_EPOCH,
                previous_member_epoch=current_before.member_epoch,
                state=MemberState.STABLE,
                assigned=current_before.assigned,
            )
        records, current_after = self.step.member_step(consumer, metadata, current_before, owned, replaced)
        send_assignment = (
            joining
            or consumer.current_of(member_id).assigned != current_after.assigned
            or (
                request.rebalance_timeout_ms > 0
                and (request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None)
                and request.topic_partitions is not None
            )
        )

        def written(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                respond(ConsumerGroupHeartbeatResponse(error_code=consumer_write_error(error)))
                return
            if replaced is not None:
                self.forget_member_timers(group, replaced)
            current = consumer.current_of(member_id)
            self.arm_session(group, member_id)
            self.arm_or_cancel_rebalance(group, member_id)
            respond(
                ConsumerGroupHeartbeatResponse(
                    error_code=ErrorCode.NONE,
                    member_id=member_id,
                    member_epoch=current.member_epoch,
                    heartbeat_interval_ms=self.runtime.consumer_heartbeat_interval_ms(group.group_id),
                    assignment=response_assignment(current.assigned) if send_assignment else None,
                )
            )

        self.write(group, records, written)

    @staticmethod
    def _check_member(
        consumer: ConsumerGroup,
        member_id: str,
        instance_id: str | None,
        member_epoch: int,
        owned: Assignment | None,
    ) -> None:
        """A heartbeat of a member of the group (epoch > 0): the member must be known and current."""
        if member_id not in consumer.members:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"Member {member_id} is not a member of group {consumer.group_id}.",
            )
        if instance_id is not None:
            holder = consumer.static_members.get(instance_id)
            if holder is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if holder != member_id:
                raise HeartbeatError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Instance id {instance_id} belongs to member {holder}, not {member_id}.",
                )
        current = consumer.current_of(member_id)
        if member_epoch == current.member_epoch:
            return
        # The member missed the answer that moved it on: it may go on with its previous epoch as
        # long as it owns nothing beyond what it is assigned now.
        if (
            member_epoch == current.previous_member_epoch
            and owned is not None
            and partitions_of(owned) <= partitions_of(current.assigned)
        ):
            return
        raise HeartbeatError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The member epoch {member_epoch} of {member_id} is fenced: its epoch is {current.member_epoch}.",
        )

    def _leave(
        self,
        group: Group,
        consumer: ConsumerGroup,
        request: ConsumerGroupHeartbeatRequest,
        respond: HeartbeatRespond,
    ) -> None:
        group_id = group.group_id
        member_id = request.member_id
        instance_id = request.instance_id
        if instance_id is not None:
            holder = consumer.static_members.get(instance_id)
            if holder is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if holder != member_id:
                raise HeartbeatError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"Instance id {instance_id} belongs to member {holder}, not {member_id}.",
                )
        if member_id not in consumer.members:
            raise HeartbeatError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
            )
        epoch = request.member_epoch
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH and instance_id is not None:
            # Leaving for a while: the partitions stay this member's until its session times out
            # or its instance id joins again.
            current = consumer.current_of(member_id)
            records = [
                current_record(
                    group_id,
                    member_id,
                    replace(
                        current,
                        member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                        previous_member_epoch=current.member_epoch,
                    ),
                )
            ]
            self.runtime.timer.cancel(consumer_rebalance_key(group_id, member_id))
            consumer.revoking.pop(member_id, None)
        else:
            epoch = LEAVE_GROUP_MEMBER_EPOCH
            records = []

        def written(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                respond(ConsumerGroupHeartbeatResponse(error_code=consumer_write_error(error)))
                return
            if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                self.arm_session(group, member_id)
            respond(
                ConsumerGroupHeartbeatResponse(
                    error_code=ErrorCode.NONE,
                    member_id=member_id,
                    member_epoch=epoch,
                    heartbeat_interval_ms=0,
                )
            )

        if epoch == LEAVE_GROUP_MEMBER_EPOCH:
            self.remove_members(group, [member_id], written)
        else:
            self.write(group, records, written)

    def remove_members(
        self,
        group: Group,
        member_ids: list[str],
        after: Callable[[ErrorCode], None],
        removal: Trigger = Trigger.MEMBER_LEFT,
    ) -> None:
        """Members leave or are fenced: a new epoch and target for the others; or, when only
        classic members are left and the policy allows, the group becomes a classic group."""
        consumer = group.consumer
        assert consumer is not None

        def removed(error: ErrorCode) -> None:
            for member_id in member_ids:
                if error == ErrorCode.NONE or member_id not in consumer.members:
                    self.forget_member_timers(group, member_id)
            after(error)

        remaining = [member for member_id, member in consumer.members.items() if member_id not in member_ids]
        if (
            self.migration is not None
            and remaining
            and all(member.classic is not None for member in remaining)
            and self.runtime.config.consumer_group_migration_policy in ("downgrade", "bidirectional")
        ):
            conversion = self.migration.downgrade(group, consumer, remaining)
            if conversion is not None:
                records, finish = conversion

                def converted(error: ErrorCode) -> None:
                    if error == ErrorCode.NONE:
                        finish()
                    removed(error)

                self.write(group, records, converted)
                return
        self.write(group, self.step.removal_plan(consumer, member_ids).records, removed, removal)

    # ================================================================ members removed by time
    def arm_session(self, group: Group, member_id: str) -> None:
        """The member must heartbeat within its session timeout (the group's; a classic member's own)."""
        timeout_ms = self.runtime.consumer_session_timeout_ms(group.group_id)
        consumer = group.consumer
        member = None if consumer is None else consumer.members.get(member_id)
        if member is not None and member.classic is not None:
            timeout_ms = member.classic.session_timeout_ms
        self.runtime.timer.schedule(
            consumer_session_key(group.group_id, member_id),
            timeout_ms,
            lambda: self._on_timeout(group, member_id, None),
        )

    def arm_or_cancel_rebalance(self, group: Group, member_id: str) -> None:
        """A member revoking partitions has its rebalance timeout to do so (armed once per epoch)."""
        key = consumer_rebalance_key(group.group_id, member_id)
        consumer = group.consumer
        assert consumer is not None
        member = consumer.members.get(member_id)
        current = consumer.current_of(member_id)
        if current.state is not MemberState.UNREVOKED_PARTITIONS or member is None:
            self.runtime.timer.cancel(key)
            consumer.revoking.pop(member_id, None)
            return
        epoch = current.member_epoch
        if consumer.revoking.get(member_id) == epoch:
            return
        consumer.revoking[member_id] = epoch
        self.runtime.timer.schedule(
            key, max(member.rebalance_timeout_ms, 0), lambda: self._on_timeout(group, member_id, epoch)
        )

    def forget_member_timers(self, group: Group, member_id: str) -> None:
        """The member is gone: its session and rebalance timers with it."""
        self.cancel_member_timers(group.group_id, member_id)
        if group.consumer is not None:
            group.consumer.revoking.pop(member_id, None)

    def cancel_member_timers(self, group_id: str, member_id: str) -> None:
        self.runtime.timer.cancel(consumer_session_key(group_id, member_id))
        self.runtime.timer.cancel(consumer_rebalance_key(group_id, member_id))

    def _on_timeout(self, group: Group, member_id: str, revoking_epoch: int | None) -> None:
        """The member's session expired (``revoking_epoch`` None) or it did not revoke its
        partitions of ``revoking_epoch`` within its rebalance timeout: it is fenced."""
        if self.runtime.groups.get(group.group_id) is not group or group.consumer is None:
            return

        def fence() -> None:
            consumer = group.consumer
            if consumer is None or member_id not in consumer.members:
                return
            current = consumer.current_of(member_id)
            if revoking_epoch is not None and (
                current.state is not MemberState.UNREVOKED_PARTITIONS
                or current.member_epoch != revoking_epoch
            ):
                return
            log.info(
                "group %s: member %s %s",
                group.group_id,
                member_id,
                "session expired" if revoking_epoch is None else "did not revoke in its rebalance timeout",
            )

            def written(error: ErrorCode) -> None:
                if error != ErrorCode.NONE and group.consumer is consumer and member_id in consumer.members:
                    self.arm_session(group, member_id)  # try again later

            self.remove_members(
                group,
                [member_id],
                written,
                Trigger.SESSION_EXPIRED if revoking_epoch is None else Trigger.REBALANCE_TIMED_OUT,
            )

        self.run(group, fence, lambda error: None)

    def arm_loaded(self, group: Group) -> None:
        """Members loaded from the log heartbeat within their session timeout or are removed; one
        that was revoking partitions does so within its rebalance timeout."""
        consumer = group.consumer
        if consumer is None:
            return
        for member_id in consumer.members:
            self.arm_session(group, member_id)
            self.arm_or_cancel_rebalance(group, member_id)

    def cancel_timers(self, group: Group) -> None:
        consumer = group.consumer
        if consumer is None:
            return
        for member_id in consumer.members:
            self.cancel_member_timers(group.group_id, member_id)

    # ================================================================ topics
    def topics_changed(self, names: Iterable[str] | None) -> None:
        """Topics were created, deleted or grew (``names``; None: any may have): each consumer
        group whose subscribed topics' metadata changed gets a new epoch and target."""
        changed = None if names is None else frozenset(names)
        for group_id, group in list(self.runtime.groups.items()):
            consumer = group.consumer
            if consumer is None or not consumer.exists or self.runtime.group_error(group_id) is not None:
                continue
            uses_regex = any(member.subscribed_topic_regex for member in consumer.members.values())
            if (
                changed is not None
                and not uses_regex
                and changed.isdisjoint(consumer.subscribed_topic_names())
            ):
                continue
            consumer.regex_matches.clear()
            consumer.metadata_stale = True
            self.run(group, functools.partial(self._refresh, group), lambda error: None)

    def _refresh(self, group: Group) -> None:
        consumer = group.consumer
        if consumer is None or not consumer.members:
            return  # resolved again when a member joins (metadata_stale stays set)
        plan = self.step.plan(consumer, dict(consumer.members), [], False, refresh_metadata=True)
        if plan.records:
            self.write(group, plan.records, lambda error: None)


def _updated_metadata(
    base: MemberMetadata | None,
    member_id: str,
    request: ConsumerGroupHeartbeatRequest,
    client_id: str,
    client_host: str,
) -> MemberMetadata:
    """The member's metadata after its heartbeat: a field the request leaves null is unchanged."""
    regex = request.subscribed_topic_regex
    names = request.subscribed_topic_names
    return MemberMetadata(
        member_id=member_id,
        instance_id=request.instance_id
        if request.instance_id is not None
        else (base.instance_id if base else None),
        rack_id=request.rack_id if request.rack_id is not None else (base.rack_id if base else None),
        client_id=client_id,
        client_host=client_host,
        subscribed_topic_names=(
            tuple(sorted(set(names))) if names is not None else (base.subscribed_topic_names if base else ())
        ),
        # An empty regex clears it.
        subscribed_topic_regex=(regex or None)
        if regex is not None
        else (base.subscribed_topic_regex if base else None),
        rebalance_timeout_ms=(
            request.rebalance_timeout_ms
            if request.rebalance_timeout_ms > 0
            else (base.rebalance_timeout_ms if base else -1)
        ),
        server_assignor=(
            request.server_assignor
            if request.server_assignor is not None
            else (base.server_assignor if base else None)
        ),
    )
