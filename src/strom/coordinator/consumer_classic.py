"""Classic members in consumer groups, and groups moving between the two protocols (KIP-848's
online upgrade and downgrade).

A consumer group may hold members that speak the classic protocol (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup): consumers not restarted yet with ``group.protocol=consumer`` during a rolling upgrade,
or older clients joining a consumer group. They are members of the consumer group like the others
(their subscription read from the "consumer" protocol metadata they offer, their session timeout
their own, their ``ClassicMetadata`` in their record) and are moved towards their target the
classic way:

- JoinGroup: the member's subscription (and, cooperative, the partitions it still owns) updates it
  and takes its reconciliation step; answered at once with its member epoch as the generation, no
  leader's work (the coordinator assigns);
- SyncGroup (at that generation): its current assignment, encoded as the consumer protocol's;
- Heartbeat: REBALANCE_IN_PROGRESS when the member has a step to take (a new target epoch, or
  partitions to revoke, or the partitions it waited for all free now), so that it joins again: an
  eager member gives up everything before, a cooperative one what it no longer has;
  ILLEGAL_GENERATION for another generation;
- LeaveGroup and session / rebalance timeouts remove it as any member.

Upgrade: when the first consumer-protocol member joins a Stable classic group of the "consumer"
protocol type (group.consumer.migration.policy upgrade or bidirectional), the group becomes a
consumer group at once: its members, their subscriptions and assignments become consumer group
members at an epoch equal to the generation (target = what they own), in one batch with the classic
record's tombstone; then the new member's join moves the group on. Offsets are the group's and stay.

Downgrade: when a member leaves and only classic members remain (policy downgrade or bidirectional),
the group becomes a classic group again: the consumer records are deleted and a classic record
written in one batch, the members keep their assignments, and a rebalance starts so they all join
the classic way.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable

from strom.assignors.protocol import Assignment as ProtocolAssignment
from strom.assignors.protocol import Subscription, decode_assignment, decode_subscription, encode_assignment
from strom.assignors.server import TopicSpec
from strom.coordinator.consumer_group import (
    JOINING,
    Assignment,
    ClassicMetadata,
    ConsumerGroup,
    MemberAssignment,
    MemberMetadata,
    MemberState,
    assignment_of,
    partitions_of,
)
from strom.coordinator.consumer_membership import ConsumerMembership, consumer_write_error
from strom.coordinator.consumer_records import (
    current_record,
    epoch_record,
    group_tombstones,
    member_record,
    subscription_metadata_record,
    target_epoch_record,
    target_record,
)
from strom.coordinator.group import (
    CONSUMER_PROTOCOL_TYPE,
    Group,
    JoinCallback,
    JoinResult,
    Member,
    SyncCallback,
    SyncResult,
)
from strom.coordinator.membership import Membership
from strom.coordinator.records import Record, group_key_bytes, group_value_bytes
from strom.coordinator.runtime import CoordinatorRuntime
from strom.coordinator.state import GroupState
from strom.protocol.coordinator_records.group_metadata import GroupMetadataValue
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.heartbeat import HeartbeatRequest
from strom.protocol.messages.join_group import JoinGroupRequest
from strom.protocol.messages.sync_group import SyncGroupRequest
from strom.protocol.primitives import DecodeError

log = logging.getLogger("strom.coordinator")


class ClassicMembers:
    """The classic protocol's requests against consumer groups, and the two conversions."""

    def __init__(
        self, runtime: CoordinatorRuntime, consumer: ConsumerMembership, membership: Membership
    ) -> None:
        self.runtime = runtime
        self.consumer = consumer
        self.membership = membership

    # ================================================================ JoinGroup
    def join(
        self,
        group: Group,
        request: JoinGroupRequest,
        version: int,
        client_id: str,
        client_host: str,
        callback: JoinCallback,
    ) -> None:
        def fail(error: ErrorCode) -> None:
            callback(JoinResult(error, member_id=request.member_id))

        def operation() -> None:
            if group.consumer is None:
                # It became a classic group meanwhile: the classic way, then.
                self.membership.join(request, version, client_id, client_host, callback)
                return
            self._join(group, group.consumer, request, version, client_id, client_host, callback)

        self.consumer.run(group, operation, fail)

    def _join(
        self,
        group: Group,
        consumer: ConsumerGroup,
        request: JoinGroupRequest,
        version: int,
        client_id: str,
        client_host: str,
        callback: JoinCallback,
    ) -> None:
        config = self.runtime.config
        member_id = request.member_id

        def fail(error: ErrorCode) -> None:
            callback(JoinResult(error, member_id=member_id))

        if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not request.protocols:
            fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            return
        session_timeout_ms = request.session_timeout_ms
        if (
            not config.group_min_session_timeout_ms
            <= session_timeout_ms
            <= config.group_max_session_timeout_ms
        ):
            fail(ErrorCode.INVALID_SESSION_TIMEOUT)
            return
        protocols = tuple((protocol.name, protocol.metadata) for protocol in request.protocols)
        chosen = _first_subscription(protocols)
        if chosen is None:
            fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            return
        protocol_name, subscription = chosen
        instance_id = request.group_instance_id if version >= 5 else None
        replaced: str | None = None
        if not member_id:
            holder = consumer.static_members.get(instance_id) if instance_id is not None else None
            member_id = f"{client_id}-{uuid.uuid4()}"
            if holder is not None:
                replaced = holder  # a static member's new instance takes its place
            elif len(consumer.members) >= config.consumer_group_max_size:
                fail(ErrorCode.GROUP_MAX_SIZE_REACHED)
                return
        else:
            existing = consumer.members.get(member_id)
            if existing is None or existing.classic is None:
                fail(ErrorCode.UNKNOWN_MEMBER_ID)
                return
            if instance_id is not None and consumer.static_members.get(instance_id) != member_id:
                fail(ErrorCode.FENCED_INSTANCE_ID)
                return
        rebalance_timeout_ms = request.rebalance_timeout_ms if version >= 1 else session_timeout_ms
        metadata = MemberMetadata(
            member_id=member_id,
            instance_id=instance_id,
            rack_id=subscription.rack_id,
            client_id=client_id,
            client_host=client_host,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            subscribed_topic_regex=None,
            rebalance_timeout_ms=rebalance_timeout_ms,
            server_assignor=None,
            classic=ClassicMetadata(session_timeout_ms=session_timeout_ms, protocols=protocols),
        )
        owned = self._ids(subscription.owned_partitions)
        if replaced is not None:
            left = consumer.current_of(replaced)
            current_before = left if left.member_epoch >= 0 else JOINING
        else:
            current_before = consumer.current_of(member_id)
        records, _ = self.consumer.step.member_step(consumer, metadata, current_before, owned, replaced)

        def written(error: ErrorCode) -> None:
            if error != ErrorCode.NONE:
                callback(JoinResult(consumer_write_error(error), member_id=member_id))
                return
            if replaced is not None:
                self.consumer.forget_member_timers(group, replaced)
            current = consumer.current_of(member_id)
            self.consumer.arm_session(group, member_id)
            self.consumer.arm_or_cancel_rebalance(group, member_id)
            callback(
                JoinResult(
                    ErrorCode.NONE,
                    member_id=member_id,
                    generation_id=current.member_epoch,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    protocol_name=protocol_name,
                    # Nobody leads: the coordinator assigns (a member that is not the leader just
                    # asks for its assignment with SyncGroup).
                    leader_id="",
                )
            )

        self.consumer.write(group, records, written)

    def _ids(self, partitions: list[tuple[str, int]]) -> Assignment:
        resolved = []
        for topic, partition in partitions:
            spec = self.consumer.topics.topic(topic)
            if spec is not None:
                resolved.append((spec.topic_id, partition))
        return assignment_of(resolved)

    # ================================================================ SyncGroup
    def sync(self, group: Group, request: SyncGroupRequest, version: int, callback: SyncCallback) -> None:
        def operation() -> None:
            consumer = group.consumer
            if consumer is None:
                self.membership.sync(request, version, callback)
                return
            callback(self._sync(group, consumer, request, version))

        self.consumer.run(group, operation, lambda error: callback(SyncResult(error)))

    def _sync(
        self, group: Group, consumer: ConsumerGroup, request: SyncGroupRequest, version: int
    ) -> SyncResult:
        member = consumer.members.get(request.member_id)
        if member is None or member.classic is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        instance_id = request.group_instance_id if version >= 3 else None
        if instance_id is not None and consumer.static_members.get(instance_id) != request.member_id:
            return SyncResult(ErrorCode.FENCED_INSTANCE_ID)
        current = consumer.current_of(request.member_id)
        if request.generation_id != current.member_epoch:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        names = [name for name, _ in member.classic.protocols]
        if version >= 5 and (
            (request.protocol_type is not None and request.protocol_type != CONSUMER_PROTOCOL_TYPE)
            or (request.protocol_name is not None and request.protocol_name not in names)
        ):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        self.consumer.arm_session(group, request.member_id)
        chosen = _first_subscription(member.classic.protocols)
        return self._assignment_result(
            consumer, request.member_id, request.protocol_name or (chosen[0] if chosen else names[0])
        )

    # ================================================================ Heartbeat
    def heartbeat(self, group: Group, request: HeartbeatRequest, version: int) -> ErrorCode:
        consumer = group.consumer
        assert consumer is not None
        member = consumer.members.get(request.member_id)
        if member is None:
            # A group being converted has not got its members yet: they join again, with their ids.
            return ErrorCode.REBALANCE_IN_PROGRESS if consumer.writing else ErrorCode.UNKNOWN_MEMBER_ID
        if member.classic is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        instance_id = request.group_instance_id if version >= 3 else None
        if instance_id is not None and consumer.static_members.get(instance_id) != request.member_id:
            return ErrorCode.FENCED_INSTANCE_ID
        current = consumer.current_of(request.member_id)
        if request.generation_id != current.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        self.consumer.arm_session(group, request.member_id)
        if current.member_epoch != consumer.target_epoch or current.state is MemberState.UNREVOKED_PARTITIONS:
            return ErrorCode.REBALANCE_IN_PROGRESS
        if current.state is MemberState.UNRELEASED_PARTITIONS:
            # Waiting for partitions others still own: join again (an eager member gives up all it
            # has to do so) only once every one of them is free, to take them all in one round.
            missing = partitions_of(consumer.target_of(request.member_id)) - partitions_of(current.assigned)
            if all(consumer.owner_of(partition) in (None, request.member_id) for partition in missing):
                return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # ================================================================ LeaveGroup
    def leave(self, group: Group, identities: list[tuple[str, str | None]]) -> list[ErrorCode]:
        consumer = group.consumer
        assert consumer is not None
        errors = []
        leaving: list[str] = []
        for member_id, instance_id in identities:
            if instance_id is not None and not member_id:
                member_id = consumer.static_members.get(instance_id, "")
            elif instance_id is not None and consumer.static_members.get(instance_id) != member_id:
                errors.append(ErrorCode.FENCED_INSTANCE_ID)
                continue
            if member_id not in consumer.members:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            errors.append(ErrorCode.NONE)
            if member_id not in leaving:
                leaving.append(member_id)
        if leaving:
            self.consumer.run(
                group,
                lambda: self._remove(group, leaving),
                lambda error: None,
            )
        return errors

    def _remove(self, group: Group, member_ids: list[str]) -> None:
        consumer = group.consumer
        if consumer is None:
            return
        present = [member_id for member_id in member_ids if member_id in consumer.members]
        if present:
            self.consumer.remove_members(group, present, lambda error: None)

    # ================================================================ upgrade
    def upgrade(self, group: Group) -> ErrorCode | None:
        """The classic group with members becomes a consumer group (see the module's docstring).

        As Kafka, whatever the classic group's state: members waiting in a rebalance are answered
        as members of the consumer group once it is written (a JoinGroup with their epoch, a
        SyncGroup with the assignment they had), and join again from there."""
        config = self.runtime.config
        group_id = group.group_id
        if (
            config.consumer_group_migration_policy not in ("upgrade", "bidirectional")
            or group.protocol_type != CONSUMER_PROTOCOL_TYPE
            or len(group.members) >= config.consumer_group_max_size
        ):
            return ErrorCode.GROUP_ID_NOT_FOUND
        generation = group.generation_id
        consumer = ConsumerGroup(group_id)
        records: list[Record] = [(group_key_bytes(group_id), None)]
        members: list[MemberMetadata] = []
        chosen_protocols: dict[str, str] = {}
        for member in group.members.values():
            protocol = group.protocol_name
            if protocol is None or protocol not in member.protocol_names():
                protocol = member.protocol_names()[0] if member.protocols else None
            try:
                if protocol is None:
                    raise ValueError("no protocol")
                subscription = decode_subscription(member.metadata_for(protocol))
                assigned_names = decode_assignment(member.assignment).partitions
            except (DecodeError, ValueError, AssertionError) as error:
                log.warning("group %s: not upgraded: member %s: %s", group_id, member.member_id, error)
                return ErrorCode.GROUP_ID_NOT_FOUND
            chosen_protocols[member.member_id] = protocol
            metadata = MemberMetadata(
                member_id=member.member_id,
                instance_id=member.group_instance_id,
                rack_id=subscription.rack_id,
                client_id=member.client_id,
                client_host=member.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                subscribed_topic_regex=None,
                rebalance_timeout_ms=member.rebalance_timeout_ms,
                server_assignor=None,
                classic=ClassicMetadata(member.session_timeout_ms, tuple(member.protocols)),
            )
            members.append(metadata)
            assigned = self._ids(assigned_names)
            records.append(member_record(group_id, member.member_id, metadata))
            records.append(target_record(group_id, member.member_id, assigned))
            records.append(
                current_record(
                    group_id,
                    member.member_id,
                    MemberAssignment(generation, generation, MemberState.STABLE, assigned),
                )
            )
        resolved: dict[str, TopicSpec] = {}
        for metadata in members:
            for name in metadata.subscribed_topic_names:
                spec = self.consumer.topics.topic(name)
                if spec is not None and spec.partition_count > 0:
                    resolved[name] = spec
        records.append(subscription_metadata_record(group_id, resolved))
        records.append(target_epoch_record(group_id, generation))
        records.append(epoch_record(group_id, generation))
        log.info(
            "group %s: the classic group (%s, generation %d) becomes a consumer group",
            group_id,
            group.state.value,
            generation,
        )
        # Requests parked in the classic rebalance are answered once the conversion is written.
        parked_joins = {}
        parked_syncs = {}
        for member in group.members.values():
            if member.join_callback is not None:
                parked_joins[member.member_id] = member.join_callback
                member.join_callback = None
            if member.sync_callback is not None:
                parked_syncs[member.member_id] = member.sync_callback
                member.sync_callback = None
        self.runtime.cancel_group_timers(group)
        group.pending_members.clear()
        group.consumer = consumer

        def written(error: ErrorCode) -> None:
            if error != ErrorCode.NONE or not consumer.exists:
                # Still the classic group it was: its members' requests are answered with the
                # error and its timers run again.
                if group.consumer is consumer and not consumer.exists:
                    group.consumer = None
                failure = (
                    consumer_write_error(error) if error != ErrorCode.NONE else ErrorCode.NOT_COORDINATOR
                )
                for member_id, join_callback in parked_joins.items():
                    join_callback(JoinResult(failure, member_id=member_id))
                for sync_callback in parked_syncs.values():
                    sync_callback(SyncResult(failure))
                self.membership.restart_after_failed_conversion(group)
                return
            for member_id in consumer.members:
                self.consumer.arm_session(group, member_id)
            for member_id, join_callback in parked_joins.items():
                join_callback(
                    JoinResult(
                        ErrorCode.NONE,
                        member_id=member_id,
                        generation_id=consumer.current_of(member_id).member_epoch,
                        protocol_type=CONSUMER_PROTOCOL_TYPE,
                        protocol_name=chosen_protocols.get(member_id),
                        leader_id="",
                    )
                )
            for member_id, sync_callback in parked_syncs.items():
                sync_callback(self._assignment_result(consumer, member_id, chosen_protocols.get(member_id)))

        self.consumer.write(group, records, written)
        return None

    @staticmethod
    def _assignment_result(consumer: ConsumerGroup, member_id: str, protocol_name: str | None) -> SyncResult:
        current = consumer.current_of(member_id)
        partitions: list[tuple[str, int]] = []
        for topic_id, indexes in sorted(current.assigned.items()):
            name = consumer.topic_name(topic_id)
            if name is not None:
                partitions.extend((name, index) for index in sorted(indexes))
        return SyncResult(
            ErrorCode.NONE,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=protocol_name,
            assignment=encode_assignment(ProtocolAssignment(partitions=partitions)),
        )

    # ================================================================ downgrade
    def downgrade(
        self, group: Group, consumer: ConsumerGroup, remaining: list[MemberMetadata]
    ) -> tuple[list[Record], Callable[[], None]] | None:
        """The consumer group left with only classic members becomes a classic group."""
        group_id = group.group_id
        votes: Counter[str] = Counter()
        common: set[str] | None = None
        for metadata in remaining:
            assert metadata.classic is not None
            names = [name for name, _ in metadata.classic.protocols]
            common = set(names) if common is None else common & set(names)
            if names:
                votes[names[0]] += 1
        if not common:
            return None  # no protocol every member speaks: stays a consumer group
        protocol = max(sorted(common), key=lambda name: votes.get(name, 0))
        generation = consumer.target_epoch
        now_ms = self.runtime.now_wall_ms()
        leader = remaining[0].member_id
        classic_members = []
        recorded = []
        for metadata in remaining:
            assert metadata.classic is not None
            subscription = dict(metadata.classic.protocols)[protocol]
            current = consumer.current_of(metadata.member_id)
            partitions: list[tuple[str, int]] = []
            for topic_id, indexes in sorted(current.assigned.items()):
                name = consumer.topic_name(topic_id)
                if name is not None:
                    partitions.extend((name, index) for index in sorted(indexes))
            assignment = encode_assignment(ProtocolAssignment(partitions=partitions))
            recorded.append(
                GroupMetadataValue.MemberMetadata(
                    member_id=metadata.member_id,
                    group_instance_id=metadata.instance_id,
                    client_id=metadata.client_id,
                    client_host=metadata.client_host,
                    rebalance_timeout=metadata.rebalance_timeout_ms,
                    session_timeout=metadata.classic.session_timeout_ms,
                    subscription=subscription,
                    assignment=assignment,
                )
            )
            classic_members.append(
                Member(
                    member_id=metadata.member_id,
                    group_instance_id=metadata.instance_id,
                    client_id=metadata.client_id,
                    client_host=metadata.client_host,
                    rebalance_timeout_ms=metadata.rebalance_timeout_ms,
                    session_timeout_ms=metadata.classic.session_timeout_ms,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    protocols=list(metadata.classic.protocols),
                    assignment=assignment,
                )
            )
        value = GroupMetadataValue(
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            generation=generation,
            protocol=protocol,
            leader=leader,
            current_state_timestamp=now_ms,
            members=recorded,
        )
        records = group_tombstones(consumer)
        records.append((group_key_bytes(group_id), group_value_bytes(value)))

        def finish() -> None:
            log.info(
                "group %s: the consumer group becomes a classic group (generation %d)", group_id, generation
            )
            self.runtime.cancel_group_timers(group)
            waiting = list(consumer.waiting)
            consumer.waiting.clear()
            group.consumer = None
            group.reset_classic(self.runtime.now_wall_ms())
            group.generation_id = generation
            group.protocol_type = CONSUMER_PROTOCOL_TYPE
            group.protocol_name = protocol
            for member in classic_members:
                group.add_member(member)
            group.leader_id = leader
            group.state = GroupState.STABLE
            self.membership.arm_loaded_sessions(group)
            # Every member joins again the classic way (their heartbeats say so).
            self.membership.prepare_rebalance(group, "converted from a consumer group")
            for operation, _ in waiting:
                operation()

        return records, finish


def _first_subscription(protocols: tuple[tuple[str, bytes], ...]) -> tuple[str, Subscription] | None:
    """The member's most preferred protocol whose metadata is a consumer subscription, parsed."""
    for name, metadata in protocols:
        try:
            return name, decode_subscription(metadata)
        except (DecodeError, ValueError):
            continue
    return None
