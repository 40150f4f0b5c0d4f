"""A consumer group's in-memory data: members, static instance ids, pending members, offsets.

Nothing here talks to timers or the log; ``membership.py`` drives the transitions and
``offsets.py`` the offsets. A group changes state only through ``transition_to``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from strom.coordinator.consumer_group import ConsumerGroup
from strom.coordinator.records import CommittedOffset, TransactionalOffset, consumer_subscribed_topics
from strom.coordinator.state import GroupState, check_transition
from strom.protocol.errors import ErrorCode

CONSUMER_PROTOCOL_TYPE = "consumer"

log = logging.getLogger("strom.coordinator")


@dataclass(frozen=True)
class JoinedMember:
    """One entry of the member list sent to the leader."""

    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # (protocol name, metadata) in the member's order of preference.
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_callback: JoinCallback | None = None
    sync_callback: SyncCallback | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol_name: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise AssertionError(f"member {self.member_id!r} does not support protocol {protocol_name!r}")

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name in self.protocol_names():
            if name in candidates:
                return name
        raise AssertionError(f"member {self.member_id!r} supports none of {sorted(candidates)}")

    def answer_join(self, result: JoinResult) -> None:
        callback, self.join_callback = self.join_callback, None
        if callback is not None:
            callback(result)

    def answer_sync(self, result: SyncResult) -> None:
        callback, self.sync_callback = self.sync_callback, None
        if callback is not None:
            callback(result)


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    # Wall-clock ms of the last state change; offsets of an Empty group expire counting from it.
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    # group.instance.id -> the member id currently holding it.
    static_members: dict[str, str] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED that have not joined with them yet.
    pending_members: set[str] = field(default_factory=set)
    # Members of the current generation that have not sent SyncGroup yet.
    pending_sync_members: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # Per producer id, offsets written in a transaction whose marker has not come yet: not
    # committed (OffsetFetch does not return them), made committed by a COMMIT marker.
    pending_transactional_offsets: dict[int, dict[tuple[str, int], TransactionalOffset]] = field(
        default_factory=dict
    )
    # The initial rebalance delay of a new group is running; a new member extends it.
    initial_delay_active: bool = False
    new_member_added: bool = False
    initial_delay_remaining_ms: int = 0
    # Set when the group is a group of the consumer protocol (KIP-848): its members, epochs and
    # assignments are there, and the classic fields above stay those of an Empty group with no
    # record (the offsets are the group's whatever its protocol).
    consumer: ConsumerGroup | None = None

    @property
    def is_consumer_group(self) -> bool:
        return self.consumer is not None and self.consumer.exists

    def reset_classic(self, now_wall_ms: int) -> None:
        """The classic group's record was deleted (it became a consumer group): an Empty group."""
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = now_wall_ms
        self.generation_id = 0
        self.protocol_type = None
        self.protocol_name = None
        self.leader_id = None
        self.members = {}
        self.static_members = {}
        self.pending_members = set()
        self.pending_sync_members = set()

    def transition_to(self, target: GroupState, now_wall_ms: int) -> None:
        check_transition(self.group_id, self.state, target)
        log.info(
            "group %s: %s -> %s (generation %d, %d members)",
            self.group_id,
            self.state.value,
            target.value,
            self.generation_id,
            len(self.members),
        )
        self.state = target
        self.state_timestamp_ms = now_wall_ms

    # ---------------------------------------------------------------- transactional offsets
    def add_pending_offset(
        self, producer_id: int, key: tuple[str, int], pending: TransactionalOffset
    ) -> None:
        self.pending_transactional_offsets.setdefault(producer_id, {})[key] = pending

    def has_pending_offset(self, key: tuple[str, int]) -> bool:
        """Whether some transaction not completed yet wrote an offset of this partition."""
        return any(key in written for written in self.pending_transactional_offsets.values())

    def pending_offset_keys(self) -> set[tuple[str, int]]:
        return {key for written in self.pending_transactional_offsets.values() for key in written}

    def supersede_pending_offsets(self, key: tuple[str, int], written_before: int | None = None) -> None:
        """A later write of the partition's offset became committed: pending offsets of it written
        before (every one when ``written_before`` is None: a non-transactional write, applied in
        log order, is later than all of them) lose to it and are forgotten."""
        for producer_id, written in list(self.pending_transactional_offsets.items()):
            pending = written.get(key)
            if pending is not None and (written_before is None or pending.log_offset < written_before):
                del written[key]
                if not written:
                    del self.pending_transactional_offsets[producer_id]

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        """The producer's marker: COMMIT makes its pending offsets committed, ABORT drops them.

        Each committed one also beats the pending offsets of the same partition that other
        producers wrote before it, so whichever of them commits later still loses to it: the
        later write wins, whatever the order of the markers (Kafka's rule)."""
        written = self.pending_transactional_offsets.pop(producer_id, None)
        if not written or not commit:
            return
        for key, pending in written.items():
            self.offsets[key] = pending.committed
            if self.pending_transactional_offsets:
                self.supersede_pending_offsets(key, written_before=pending.log_offset)

    def is_state(self, *states: GroupState) -> bool:
        return self.state in states

    def size(self) -> int:
        return len(self.members) + len(self.pending_members)

    def add_member(self, member: Member) -> None:
        assert member.member_id not in self.members, f"member {member.member_id!r} added twice"
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove_member(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        self.pending_sync_members.discard(member_id)
        if (
            member.group_instance_id is not None
            and self.static_members.get(member.group_instance_id) == member_id
        ):
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_member_id(self, old_member_id: str, new_member_id: str) -> Member:
        """Give a static member a new member id (a restarted instance takes its place)."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """A request names an instance id now held by a different member id."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        counts: Counter[str] = Counter()
        for member in self.members.values():
            counts.update(set(member.protocol_names()))
        return {name for name, count in counts.items() if count == len(self.members)}

    def supports_protocols(self, protocol_type: str, protocol_names: list[str]) -> bool:
        """Kafka's check: the first member sets the type; later ones must share it and a protocol."""
        if not self.members:
            return protocol_type != "" and len(protocol_names) > 0
        return self.protocol_type == protocol_type and any(
            name in self.candidate_protocols() for name in protocol_names
        )

    def select_protocol(self) -> str:
        """The candidate with the most first-choice votes; ties go to the leader's preference order."""
        candidates = self.candidate_protocols()
        assert candidates, f"group {self.group_id!r} has no protocol every member supports"
        votes = Counter(member.vote(candidates) for member in self.members.values())
        order: list[str] = []
        if self.leader_id in self.members:
            order.extend(self.members[self.leader_id].protocol_names())
        for member in self.members.values():
            order.extend(member.protocol_names())
        best = max(votes.values())
        for name in order:
            if votes.get(name, 0) == best:
                return name
        raise AssertionError("unreachable: a voted protocol is in some member's list")

    def rebalance_timeout_ms(self) -> int:
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(member.awaiting_join for member in self.members.values())

    def subscribed_topics(self) -> frozenset[str] | None:
        """Topics the members subscribe to, or None if unknown (a protocol other than "consumer")."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            if self.protocol_name not in member.protocol_names():
                return None
            member_topics = consumer_subscribed_topics(member.metadata_for(self.protocol_name))
            if member_topics is None:
                return None
            topics |= member_topics
        return frozenset(topics)

    def joined_members(self) -> tuple[JoinedMember, ...]:
        assert self.protocol_name is not None, f"group {self.group_id!r} has no protocol yet"
        protocol_name = self.protocol_name
        return tuple(
            JoinedMember(member.member_id, member.group_instance_id, member.metadata_for(protocol_name))
            for member in self.members.values()
        )
