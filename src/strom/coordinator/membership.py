"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup and the rebalance they drive.

Parked requests are callbacks on the member (``join_callback`` / ``sync_callback``); every path that
drops a member or moves the group on answers them, so each request is answered exactly once.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from strom.base import limits
from strom.coordinator.consumer_records import group_tombstones
from strom.coordinator.group import Group, JoinCallback, JoinResult, Member, SyncCallback, SyncResult
from strom.coordinator.history import Trigger
from strom.coordinator.records import group_key_bytes, group_value_bytes, group_write_error
from strom.coordinator.runtime import CoordinatorRuntime
from strom.coordinator.state import ALLOWED_PREVIOUS, GroupState
from strom.coordinator.timers import (
    initial_delay_key,
    join_key,
    pending_member_key,
    session_timeout_key,
    sync_timeout_key,
)
from strom.protocol.coordinator_records.group_metadata import GroupMetadataValue
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from strom.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from strom.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from strom.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse

if TYPE_CHECKING:
    from strom.coordinator.consumer_classic import ClassicMembers

log = logging.getLogger("strom.coordinator")


def join_response(result: JoinResult, version: int) -> JoinGroupResponse:
    members = [
        JoinGroupResponse.JoinGroupResponseMember(
            member_id=joined.member_id,
            group_instance_id=joined.group_instance_id if version >= 5 else None,
            metadata=joined.metadata,
        )
        for joined in result.members
    ]
    if version >= 7:
        protocol_name: str | None = result.protocol_name
    else:
        protocol_name = result.protocol_name or ""
    return JoinGroupResponse(
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type if version >= 7 else None,
        protocol_name=protocol_name,
        leader=result.leader_id,
        skip_assignment=result.skip_assignment and version >= 9,
        member_id=result.member_id,
        members=members,
    )


def sync_response(result: SyncResult, version: int) -> SyncGroupResponse:
    return SyncGroupResponse(
        error_code=result.error,
        protocol_type=result.protocol_type if version >= 5 else None,
        protocol_name=result.protocol_name if version >= 5 else None,
        assignment=result.assignment,
    )


class Membership:
    def __init__(self, runtime: CoordinatorRuntime) -> None:
        self.runtime = runtime
        # Classic requests against consumer groups go there (set by the coordinator).
        self.classic_members: ClassicMembers | None = None

    # ================================================================ JoinGroup
    def join(
        self,
        request: JoinGroupRequest,
        version: int,
        client_id: str,
        client_host: str,
        callback: JoinCallback,
    ) -> None:
        runtime = self.runtime
        config = runtime.config
        group_id = request.group_id
        member_id = request.member_id
        if not group_id:
            callback(JoinResult(ErrorCode.INVALID_GROUP_ID, member_id=member_id))
            return
        status_error = runtime.group_error(group_id)
        if status_error is not None:
            callback(JoinResult(status_error, member_id=member_id))
            return
        session_timeout_ms = request.session_timeout_ms
        if (
            not config.group_min_session_timeout_ms
            <= session_timeout_ms
            <= config.group_max_session_timeout_ms
        ):
            callback(JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, member_id=member_id))
            return
        if len(request.protocols) > limits.member_protocols_max:
            callback(JoinResult(ErrorCode.INVALID_REQUEST, member_id=member_id))
            return
        # v0 has no rebalance timeout: the session timeout bounds the rebalance, as Kafka does.
        rebalance_timeout_ms = request.rebalance_timeout_ms if version >= 1 else session_timeout_ms
        group_instance_id = request.group_instance_id if version >= 5 else None
        protocols = [(protocol.name, protocol.metadata) for protocol in request.protocols]

        group = runtime.groups.get(group_id)
        if group is None:
            if member_id:
                callback(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
                return
            group = Group(group_id, state_timestamp_ms=runtime.now_wall_ms())
            runtime.groups[group_id] = group
        if group.consumer is not None:
            consumer = group.consumer
            if consumer.members or consumer.writing or consumer.waiting:
                # A consumer group: the member joins it as a classic member.
                assert self.classic_members is not None
                self.classic_members.join(group, request, version, client_id, client_host, callback)
                return
            # An empty consumer group becomes a classic group again (its offsets stay): its records
            # are deleted and the classic join goes on as for an Empty group.
            log.info("group %s: the empty consumer group becomes a classic group", group_id)
            runtime.cancel_group_timers(group)
            group.consumer = None
            runtime.write(group_id, group_tombstones(consumer), lambda error: None)
        error = self._join_precheck(group, member_id, group_instance_id, request.protocol_type, protocols)
        if error is not None:
            self._forget_if_unused(group)
            callback(JoinResult(error, member_id=member_id))
            return

        member_template = Member(
            member_id="",
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=protocols,
        )
        if not member_id:
            self._join_unknown_member(group, member_template, version, callback)
        else:
            self._join_known_member(group, member_id, member_template, callback)

    def _join_precheck(
        self,
        group: Group,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> ErrorCode | None:
        if group.state is GroupState.DEAD:
            # The group is being removed (or moved): the client finds the coordinator again.
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        known = member_id in group.members or member_id in group.pending_members
        known = known or (group_instance_id is not None and group_instance_id in group.static_members)
        size_max = min(self.runtime.config.group_max_size, limits.group_members_max)
        if not known and group.size() >= size_max:
            return ErrorCode.GROUP_MAX_SIZE_REACHED
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return None

    def _forget_if_unused(self, group: Group) -> None:
        """A group created by a join that was refused holds nothing worth keeping."""
        if (
            group.state is GroupState.EMPTY
            and group.generation_id == 0
            and not group.members
            and not group.pending_members
            and not group.offsets
            and not group.pending_transactional_offsets
        ):
            self.runtime.groups.pop(group.group_id, None)

    def _join_unknown_member(
        self, group: Group, template: Member, version: int, callback: JoinCallback
    ) -> None:
        new_member_id = f"{template.client_id}-{uuid.uuid4()}"
        if template.group_instance_id is not None:
            self._join_static_member(group, new_member_id, template, version, callback)
        elif version >= 4:
            # Two-step join: hand out the id and wait for the member to come back with it.
            group.pending_members.add(new_member_id)
            self.runtime.timer.schedule(
                pending_member_key(group.group_id, new_member_id),
                template.session_timeout_ms,
                lambda: self._expire_pending_member(group, new_member_id),
            )
            callback(JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_member_id))
        else:
            template.member_id = new_member_id
            self._add_member_and_rebalance(group, template, callback)

    def _join_known_member(
        self, group: Group, member_id: str, template: Member, callback: JoinCallback
    ) -> None:
        if member_id in group.pending_members:
            if group.is_static_member_fenced(member_id, template.group_instance_id):
                callback(JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=member_id))
                return
            group.pending_members.discard(member_id)
            self.runtime.timer.cancel(pending_member_key(group.group_id, member_id))
            template.member_id = member_id
            self._add_member_and_rebalance(group, template, callback)
            return
        if group.is_static_member_fenced(member_id, template.group_instance_id):
            callback(JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=member_id))
            return
        member = group.members.get(member_id)
        if member is None:
            callback(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
            return
        unchanged = member.protocols == template.protocols
        if group.state is GroupState.COMPLETING_REBALANCE and unchanged:
            # The member probably lost its JoinGroup response: give it the current generation again.
            self._arm_session(group, member)
            callback(
                self._current_generation_result(group, member, include_members=group.is_leader(member_id))
            )
        elif group.state is GroupState.STABLE and unchanged and not group.is_leader(member_id):
            self._arm_session(group, member)
            callback(self._current_generation_result(group, member, include_members=False))
        else:
            self._update_member_and_rebalance(group, member, template, callback)

    def _join_static_member(
        self, group: Group, new_member_id: str, template: Member, version: int, callback: JoinCallback
    ) -> None:
        assert template.group_instance_id is not None
        old_member_id = group.static_members.get(template.group_instance_id)
        if old_member_id is None:
            template.member_id = new_member_id
            self._add_member_and_rebalance(group, template, callback)
            return
        old_member = group.members[old_member_id]
        old_member.answer_join(JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_member_id))
        old_member.answer_sync(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        self.runtime.timer.cancel(session_timeout_key(group.group_id, old_member_id))
        member = group.replace_member_id(old_member_id, new_member_id)
        if group.state is not GroupState.STABLE or not self._keeps_selected_protocol(group, member, template):
            self._update_member_and_rebalance(group, member, template, callback)
            return
        # A restarted static member in a Stable group: no rebalance, as long as the protocol the
        # group would select stays the same (Kafka's rule; the subscription bytes themselves may
        # differ — a restarted client reports no owned partitions and a new generation). It takes
        # its old place (and assignment, and leadership) under a new member id, once written.
        old_member_fields = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        member.protocols = template.protocols
        member.rebalance_timeout_ms = template.rebalance_timeout_ms
        member.session_timeout_ms = template.session_timeout_ms
        self._arm_session(group, member)
        generation_id = group.generation_id

        def written(error: ErrorCode) -> None:
            still_current = (
                self.runtime.groups.get(group.group_id) is group
                and group.generation_id == generation_id
                and new_member_id in group.members
            )
            if error != ErrorCode.NONE:
                if still_current:
                    self.runtime.timer.cancel(session_timeout_key(group.group_id, new_member_id))
                    restored = group.replace_member_id(new_member_id, old_member_id)
                    restored.protocols, restored.rebalance_timeout_ms, restored.session_timeout_ms = (
                        old_member_fields
                    )
                    self._arm_session(group, restored)
                callback(JoinResult(group_write_error(error), member_id=new_member_id))
                return
            is_leader = group.is_leader(new_member_id)
            # A static leader replacing itself keeps the current assignment. From v9 it gets the
            # member list with skip_assignment set (KIP-814). Before v9 it is told the OLD member
            # id as the leader, as Kafka does: its new id does not match, so it acts as a follower
            # and fetches its stored assignment instead of computing a new one that a Stable group
            # would never hand out (and instead of rejoining over an empty member list).
            include_members = is_leader and version >= 9
            result = self._current_generation_result(group, member, include_members=include_members)
            if include_members:
                result = dataclasses.replace(result, skip_assignment=True)
            elif is_leader:
                result = dataclasses.replace(result, leader_id=old_member_id)
            callback(result)

        self._write_group(group, written)

    @staticmethod
    def _keeps_selected_protocol(group: Group, member: Member, template: Member) -> bool:
        """Would the group still select its current protocol with ``template``'s protocols in
        ``member``'s place? (Checked without leaving the change behind.)"""
        current = member.protocols
        member.protocols = template.protocols
        try:
            return bool(group.candidate_protocols()) and group.select_protocol() == group.protocol_name
        finally:
            member.protocols = current

    def _current_generation_result(
        self, group: Group, member: Member, *, include_members: bool
    ) -> JoinResult:
        return JoinResult(
            ErrorCode.NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=group.joined_members() if include_members else (),
        )

    def _add_member_and_rebalance(self, group: Group, member: Member, callback: JoinCallback) -> None:
        member.join_callback = callback
        group.add_member(member)
        if group.initial_delay_active:
            group.new_member_added = True
        self._arm_session(group, member)
        self._maybe_prepare_rebalance(
            group, f"member {member.member_id} joined", Trigger.MEMBER_JOINED, member.member_id
        )

    def _update_member_and_rebalance(
        self, group: Group, member: Member, template: Member, callback: JoinCallback
    ) -> None:
        trigger = self.runtime.history.classic_trigger(group, member.protocols, template.protocols)
        member.protocols = template.protocols
        member.rebalance_timeout_ms = template.rebalance_timeout_ms
        member.session_timeout_ms = template.session_timeout_ms
        member.client_id = template.client_id
        member.client_host = template.client_host
        # A repeated JoinGroup supersedes the parked one; the older request is told to rejoin.
        member.answer_join(JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id))
        member.join_callback = callback
        self._arm_session(group, member)
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined", trigger, member.member_id)

    # ================================================================ rebalance
    def _maybe_prepare_rebalance(self, group: Group, reason: str, trigger: Trigger, member_id: str) -> None:
        if group.state in ALLOWED_PREVIOUS[GroupState.PREPARING_REBALANCE]:
            self.prepare_rebalance(group, reason, trigger, (member_id,))
        elif group.state is GroupState.PREPARING_REBALANCE:
            self.runtime.history.classic_joined_during(group, trigger, member_id)
            self._try_complete_join(group)

    def prepare_rebalance(
        self, group: Group, reason: str, trigger: Trigger = Trigger.OTHER, causes: tuple[str, ...] = ()
    ) -> None:
        log.info("group %s: rebalancing: %s", group.group_id, reason)
        runtime = self.runtime
        runtime.history.classic_started(group, trigger, causes, runtime.now_wall_ms())
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate(group, ErrorCode.REBALANCE_IN_PROGRESS)
        runtime.timer.cancel(sync_timeout_key(group.group_id))
        starting_empty = group.state is GroupState.EMPTY
        group.transition_to(GroupState.PREPARING_REBALANCE, runtime.now_wall_ms())
        runtime.rebalances_total += 1
        if starting_empty:
            # A new group waits a little so that members starting together land in one generation.
            delay_ms = runtime.config.group_initial_rebalance_delay_ms
            group.initial_delay_active = True
            group.new_member_added = False
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - delay_ms, 0)
            runtime.timer.schedule(
                initial_delay_key(group.group_id),
                delay_ms,
                lambda: self._initial_delay_expired(group, delay_ms),
            )
        else:
            runtime.timer.schedule(
                join_key(group.group_id), group.rebalance_timeout_ms(), lambda: self._join_timed_out(group)
            )
            self._try_complete_join(group)

    def _initial_delay_expired(self, group: Group, delay_ms: int) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.new_member_added and group.initial_delay_remaining_ms > 0:
            group.new_member_added = False
            next_delay_ms = min(
                self.runtime.config.group_initial_rebalance_delay_ms, group.initial_delay_remaining_ms
            )
            group.initial_delay_remaining_ms = max(group.initial_delay_remaining_ms - next_delay_ms, 0)
            self.runtime.timer.schedule(
                initial_delay_key(group.group_id),
                next_delay_ms,
                lambda: self._initial_delay_expired(group, next_delay_ms),
            )
            return
        group.initial_delay_active = False
        self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and not group.initial_delay_active
            and group.all_members_joined()
        ):
            self.runtime.timer.cancel(join_key(group.group_id))
            self._complete_join(group)

    def _join_timed_out(self, group: Group) -> None:
        if group.state is GroupState.PREPARING_REBALANCE:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        runtime = self.runtime
        # Dynamic members that did not rejoin in time are gone; static ones stay until their
        # session expires (they may be restarting).
        for member in list(group.members.values()):
            if not member.awaiting_join and member.group_instance_id is None:
                self._remove_member(group, member.member_id)
        if group.members and not any(member.awaiting_join for member in group.members.values()):
            # Only absent static members are left: wait another rebalance timeout for them.
            runtime.timer.schedule(
                join_key(group.group_id), group.rebalance_timeout_ms(), lambda: self._join_timed_out(group)
            )
            return
        leader = group.members.get(group.leader_id) if group.leader_id is not None else None
        if leader is None or not leader.awaiting_join:
            group.leader_id = next(
                (member.member_id for member in group.members.values() if member.awaiting_join), None
            )
        group.generation_id += 1
        now_ms = runtime.now_wall_ms()
        runtime.history.classic_joined(group, now_ms)
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition_to(GroupState.EMPTY, now_ms)
            self._write_group(group, lambda error: None)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        group.pending_sync_members = set(group.members)
        leader_members = group.joined_members()
        for member in group.members.values():
            is_leader = group.is_leader(member.member_id)
            member.answer_join(
                self._current_generation_result(group, member, include_members=False)
                if not is_leader
                else JoinResult(
                    ErrorCode.NONE,
                    member_id=member.member_id,
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader_id=group.leader_id or "",
                    members=leader_members,
                )
            )
            self._arm_session(group, member)
        generation_id = group.generation_id
        runtime.timer.schedule(
            sync_timeout_key(group.group_id),
            group.rebalance_timeout_ms(),
            lambda: self._sync_timed_out(group, generation_id),
        )

    def _sync_timed_out(self, group: Group, generation_id: int) -> None:
        """Members that never sent SyncGroup for this generation are dropped (as Kafka 3 does)."""
        if group.state is not GroupState.COMPLETING_REBALANCE or group.generation_id != generation_id:
            return
        dropped = tuple(
            sorted(member_id for member_id in group.pending_sync_members if member_id in group.members)
        )
        for member_id in dropped:
            self._remove_member(group, member_id)
        self.prepare_rebalance(
            group, "members did not send SyncGroup in time", Trigger.SYNC_TIMED_OUT, dropped
        )

    def _reset_and_propagate(self, group: Group, error: ErrorCode) -> None:
        assert group.state is GroupState.COMPLETING_REBALANCE, group.state
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            if member.awaiting_sync:
                member.answer_sync(
                    SyncResult(error, group.protocol_type, group.protocol_name, member.assignment)
                    if error == ErrorCode.NONE
                    else SyncResult(error)
                )
                self._arm_session(group, member)

    def group_record_value(
        self, group: Group, assignments: dict[str, bytes] | None = None
    ) -> GroupMetadataValue:
        members = []
        for member in group.members.values():
            subscription = (
                member.metadata_for(group.protocol_name)
                if group.protocol_name is not None and group.protocol_name in member.protocol_names()
                else b""
            )
            assignment = member.assignment if assignments is None else assignments.get(member.member_id, b"")
            members.append(
                GroupMetadataValue.MemberMetadata(
                    member_id=member.member_id,
                    group_instance_id=member.group_instance_id,
                    client_id=member.client_id,
                    client_host=member.client_host,
                    rebalance_timeout=member.rebalance_timeout_ms,
                    session_timeout=member.session_timeout_ms,
                    subscription=subscription,
                    assignment=assignment,
                )
            )
        return GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=group.state_timestamp_ms,
            members=members,
        )

    def _write_group(
        self,
        group: Group,
        on_complete: Callable[[ErrorCode], None],
        assignments: dict[str, bytes] | None = None,
    ) -> None:
        value = self.group_record_value(group, assignments)
        self.runtime.write(
            group.group_id, [(group_key_bytes(group.group_id), group_value_bytes(value))], on_complete
        )

    # ================================================================ members leaving
    def _arm_session(self, group: Group, member: Member) -> None:
        member_id = member.member_id
        self.runtime.timer.schedule(
            session_timeout_key(group.group_id, member_id),
            member.session_timeout_ms,
            lambda: self._session_expired(group, member_id),
        )

    def _session_expired(self, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or self.runtime.groups.get(group.group_id) is not group:
            return
        if member.awaiting_join or member.awaiting_sync:
            # A parked request keeps its member alive; the rebalance or sync timeout bounds it.
            self._arm_session(group, member)
            return
        self._remove_member_and_update_group(group, member_id, Trigger.SESSION_EXPIRED)

    def _expire_pending_member(self, group: Group, member_id: str) -> None:
        if member_id not in group.pending_members:
            return
        group.pending_members.discard(member_id)
        self._try_complete_join(group)
        self._forget_if_unused(group)

    def _remove_member(self, group: Group, member_id: str) -> Member:
        member = group.remove_member(member_id)
        self.runtime.timer.cancel(session_timeout_key(group.group_id, member_id))
        member.answer_join(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id=member_id))
        member.answer_sync(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        return member

    def _remove_member_and_update_group(self, group: Group, member_id: str, trigger: Trigger) -> None:
        self._remove_member(group, member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(group, f"member {member_id} left or expired", trigger, (member_id,))
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    # ================================================================ SyncGroup
    def sync(self, request: SyncGroupRequest, version: int, callback: SyncCallback) -> None:
        runtime = self.runtime
        group_id = request.group_id
        member_id = request.member_id
        error = runtime.group_error(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
        if error is not None:
            callback(SyncResult(error))
            return
        group = runtime.groups.get(group_id)
        if group is None:
            callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if group.state is GroupState.DEAD:
            callback(SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        if group.consumer is not None and self.classic_members is not None:
            self.classic_members.sync(group, request, version, callback)
            return
        group_instance_id = request.group_instance_id if version >= 3 else None
        if group.is_static_member_fenced(member_id, group_instance_id):
            callback(SyncResult(ErrorCode.FENCED_INSTANCE_ID))
            return
        member = group.members.get(member_id)
        if member is None:
            callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if request.generation_id != group.generation_id:
            callback(SyncResult(ErrorCode.ILLEGAL_GENERATION))
            return
        if version >= 5 and (
            (request.protocol_type is not None and request.protocol_type != group.protocol_type)
            or (request.protocol_name is not None and request.protocol_name != group.protocol_name)
        ):
            callback(SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if group.state is GroupState.EMPTY:
            callback(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        elif group.state is GroupState.PREPARING_REBALANCE:
            callback(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.state is GroupState.STABLE:
            self._arm_session(group, member)
            callback(SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment))
        else:
            # A repeated SyncGroup supersedes the parked one; the older request is told to rejoin.
            member.answer_sync(SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            member.sync_callback = callback
            group.pending_sync_members.discard(member_id)
            self._arm_session(group, member)
            if group.is_leader(member_id):
                assignments = {entry.member_id: entry.assignment for entry in request.assignments}
                self._store_assignment(group, assignments)

    def _store_assignment(self, group: Group, assignments: dict[str, bytes]) -> None:
        generation_id = group.generation_id

        def written(error: ErrorCode) -> None:
            if (
                self.runtime.groups.get(group.group_id) is not group
                or group.state is not GroupState.COMPLETING_REBALANCE
                or group.generation_id != generation_id
            ):
                return  # the group moved on; whoever moved it answered the parked syncs
            if error != ErrorCode.NONE:
                self._reset_and_propagate(group, group_write_error(error))
                self.prepare_rebalance(
                    group, f"writing the assignment failed: {error.name}", Trigger.ASSIGNMENT_WRITE_FAILED
                )
                return
            # The assignments were set by replaying the written record (runtime.write).
            self.runtime.timer.cancel(sync_timeout_key(group.group_id))
            group.pending_sync_members.clear()
            now_ms = self.runtime.now_wall_ms()
            group.transition_to(GroupState.STABLE, now_ms)
            self.runtime.history.classic_synced(group, assignments, now_ms)
            self._propagate_assignment(group, ErrorCode.NONE)

        self._write_group(group, written, assignments)

    # ================================================================ Heartbeat
    def heartbeat(self, request: HeartbeatRequest, version: int) -> HeartbeatResponse:
        return HeartbeatResponse(error_code=self._heartbeat_error(request, version))

    def _heartbeat_error(self, request: HeartbeatRequest, version: int) -> ErrorCode:
        group_id = request.group_id
        error = self.runtime.group_error(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
        if error is not None:
            return error
        group = self.runtime.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.consumer is not None and self.classic_members is not None:
            return self.classic_members.heartbeat(group, request, version)
        group_instance_id = request.group_instance_id if version >= 3 else None
        if group.is_static_member_fenced(request.member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        member = group.members.get(request.member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._arm_session(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def keep_alive(self, group: Group, member_id: str) -> None:
        """Another request from the member (an offset commit) counts as a heartbeat."""
        member = group.members.get(member_id)
        if member is not None:
            self._arm_session(group, member)

    # ================================================================ LeaveGroup
    def leave(self, request: LeaveGroupRequest, version: int) -> LeaveGroupResponse:
        if version >= 3:
            identities = [(entry.member_id, entry.group_instance_id) for entry in request.members]
        else:
            identities = [(request.member_id, None)]
        group_id = request.group_id
        error = self.runtime.group_error(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
        group = self.runtime.groups.get(group_id)
        if error is None and group is not None and group.state is GroupState.DEAD:
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        if error is not None:
            return LeaveGroupResponse(error_code=error)
        if group is not None and group.consumer is not None and self.classic_members is not None:
            errors = self.classic_members.leave(group, identities)
            if version < 3:
                return LeaveGroupResponse(error_code=errors[0])
            return LeaveGroupResponse(
                error_code=ErrorCode.NONE,
                members=[
                    LeaveGroupResponse.MemberResponse(
                        member_id=member_id, group_instance_id=instance_id, error_code=member_error
                    )
                    for (member_id, instance_id), member_error in zip(identities, errors, strict=True)
                ],
            )
        member_errors = [
            (member_id, instance_id, self._leave_one(group, member_id, instance_id))
            for member_id, instance_id in identities
        ]
        if version < 3:
            return LeaveGroupResponse(error_code=member_errors[0][2])
        return LeaveGroupResponse(
            error_code=ErrorCode.NONE,
            members=[
                LeaveGroupResponse.MemberResponse(
                    member_id=member_id, group_instance_id=instance_id, error_code=member_error
                )
                for member_id, instance_id, member_error in member_errors
            ],
        )

    def _leave_one(self, group: Group | None, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group_instance_id is not None and not member_id:
            # A static member may leave by instance id alone.
            static_member_id = group.static_members.get(group_instance_id)
            if static_member_id is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            member_id = static_member_id
        elif group.is_static_member_fenced(member_id, group_instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.runtime.timer.cancel(pending_member_key(group.group_id, member_id))
            self._try_complete_join(group)
            return ErrorCode.NONE
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self._remove_member_and_update_group(group, member_id, Trigger.MEMBER_LEFT)
        return ErrorCode.NONE

    def restart_after_failed_conversion(self, group: Group) -> None:
        """A conversion to a consumer group that cancelled the group's timers was not written: the
        classic group goes on (sessions, and its rebalance again if one was under way)."""
        self.arm_loaded_sessions(group)
        if group.state is GroupState.PREPARING_REBALANCE:
            self.runtime.timer.schedule(
                join_key(group.group_id), group.rebalance_timeout_ms(), lambda: self._join_timed_out(group)
            )
        elif group.state is GroupState.COMPLETING_REBALANCE:
            self.prepare_rebalance(group, "a conversion to a consumer group failed")

    # ================================================================ loading / unloading
    def arm_loaded_sessions(self, group: Group) -> None:
        """Members loaded from the log must heartbeat within their session timeout or be expelled."""
        for member in group.members.values():
            self._arm_session(group, member)

    def fail_parked(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.answer_join(JoinResult(error, member_id=member.member_id))
            member.answer_sync(SyncResult(error))
