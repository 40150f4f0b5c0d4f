"""Consumer-group membership as a pure state machine: no sockets, no threads, time passed in.

Inputs are events — the subscription changed, metadata changed, a response (or a failure) arrived
for a request this object asked for, time passed (``tick``), the application polled
(``begin_poll`` / ``callbacks_done``). Outputs are requests to send (``take_requests``) and rebalance
events for the application thread to run (returned by ``begin_poll``). The shell on the client's
loop thread (``coordinator.py``) sends the requests and feeds the answers back; the Consumer runs the
rebalance events inside ``poll()``, so listener callbacks never run on the loop thread.

The life of a member::

    UNJOINED --poll prepares the join--> PREPARING --JoinGroup ok (follower)--> SYNCING
    PREPARING --JoinGroup ok (leader)--> ASSIGNING --metadata--> SYNCING --SyncGroup ok--> STABLE
    STABLE --rejoin needed, next poll--> PREPARING          any --fenced/fatal--> FATAL
    any member state --generation lost (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, poll timeout)--> UNJOINED

Joining is prepared on the application thread because it may need to revoke partitions first
(eager: all of them, with a commit when auto-commit is on; cooperative: those of topics no longer
subscribed) and that must complete before the JoinGroup goes out. Heartbeats run in STABLE, from
``tick`` on the loop thread, independently of polling; a heartbeat that says a rebalance started
only marks the rejoin as needed — the next poll performs it, as the Java client does.

Finding the coordinator is orthogonal to the member state: any state can lose it (NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, a broken connection, no heartbeat answer within the session timeout) and
``tick`` sends FindCoordinator until it is known again.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from strom.assignors import (
    Assignment,
    AssignmentError,
    Assignor,
    GroupMember,
    RebalanceProtocol,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from strom.client.cluster import TopicPartition
from strom.client.consumer.membership_common import (
    COORDINATOR_ERRORS,
    Coordinator,
    InvalidTransitionError,
    MembershipCore,
    Output,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RebalanceEvent,
    RefreshMetadata,
    RequestKind,
    SendRequest,
    commit_error_codes,
    error_code,
    lowest_error,
    offset_commit_request,
    topics_matching,
)
from strom.client.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    GroupError,
    KafkaError,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.find_coordinator import FindCoordinatorResponse
from strom.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from strom.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from strom.protocol.messages.leave_group import LeaveGroupRequest
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from strom.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from strom.protocol.primitives import DecodeError

__all__ = [
    "ALLOWED_PREVIOUS",
    "Coordinator",
    "GroupMembership",
    "InvalidTransitionError",
    "MemberState",
    "MembershipSettings",
    "Output",
    "PartitionsAssigned",
    "PartitionsLost",
    "PartitionsRevoked",
    "RebalanceEvent",
    "RefreshMetadata",
    "RequestKind",
    "SendRequest",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
# Errors that say this member's generation is gone: its partitions may already belong to others.
_GENERATION_ERRORS = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})


class MemberState(enum.Enum):
    """Where this member stands in the group (the coordinator's view is in strom.coordinator)."""

    UNJOINED = "unjoined"
    """Not a member: never joined, left, or lost its generation. A subscribed member rejoins at the
    next poll (which first reports lost partitions)."""
    PREPARING = "preparing"
    """JoinGroup is wanted or in flight (including the MEMBER_ID_REQUIRED second attempt)."""
    ASSIGNING = "assigning"
    """The leader waits for metadata of every topic the group subscribes to before assigning."""
    SYNCING = "syncing"
    """SyncGroup in flight: the leader sent the assignment or a follower waits for its share."""
    STABLE = "stable"
    """A member of the current generation, heartbeating. An assignment that arrived is applied by
    the next poll."""
    FATAL = "fatal"
    """Fenced or refused for good: every poll raises the error."""


ALLOWED_PREVIOUS: dict[MemberState, frozenset[MemberState]] = {
    MemberState.UNJOINED: frozenset(
        {
            MemberState.UNJOINED,
            MemberState.PREPARING,
            MemberState.ASSIGNING,
            MemberState.SYNCING,
            MemberState.STABLE,
        }
    ),
    MemberState.PREPARING: frozenset(
        {
            MemberState.UNJOINED,
            MemberState.PREPARING,
            MemberState.ASSIGNING,
            MemberState.SYNCING,
            MemberState.STABLE,
        }
    ),
    MemberState.ASSIGNING: frozenset({MemberState.PREPARING}),
    MemberState.SYNCING: frozenset({MemberState.PREPARING, MemberState.ASSIGNING}),
    MemberState.STABLE: frozenset({MemberState.SYNCING}),
    MemberState.FATAL: frozenset(
        {
            MemberState.UNJOINED,
            MemberState.PREPARING,
            MemberState.ASSIGNING,
            MemberState.SYNCING,
            MemberState.STABLE,
        }
    ),
}


@dataclass(frozen=True, slots=True)
class MembershipSettings:
    group_id: str
    group_instance_id: str | None = None
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30_000
    client_rack: str | None = None


# The requests about the membership itself: dropped when the generation or the coordinator is lost.
_MEMBER_REQUESTS = (RequestKind.HEARTBEAT, RequestKind.JOIN_GROUP, RequestKind.SYNC_GROUP)


class GroupMembership(MembershipCore[MemberState, MembershipSettings]):
    """One consumer's membership in one group. Not thread-safe: the shell holds a lock around it."""

    def __init__(self, settings: MembershipSettings, assignors: list[Assignor], now_ms: int) -> None:
        assert assignors, "a group member needs at least one assignor"
        super().__init__(
            settings,
            now_ms,
            state=MemberState.UNJOINED,
            allowed_previous=ALLOWED_PREVIOUS,
            fatal=MemberState.FATAL,
            member_requests=_MEMBER_REQUESTS,
        )
        self.assignors = {assignor.name: assignor for assignor in assignors}
        self._assignor_order = [assignor.name for assignor in assignors]
        # Java's rule: cooperative only when every configured assignor supports it.
        cooperative = all(RebalanceProtocol.COOPERATIVE in a.supported_protocols for a in assignors)
        self.rebalance_protocol = RebalanceProtocol.COOPERATIVE if cooperative else RebalanceProtocol.EAGER
        self.generation_id = -1
        self.protocol_name: str | None = None
        self.leader_id = ""
        # What arrived but is not applied by a poll yet (``owned``: what the application holds).
        self.pending_assignment: list[TopicPartition] | None = None
        self.rejoin_needed = False
        self.rejoin_reason = ""
        self.partitions_lost = False
        self._join_prepared = False
        self._preparing_in_poll = False
        # When a JoinGroup may go out again, and the session clock (the last heartbeat answered).
        self._join_retry_at_ms = now_ms
        self._last_heartbeat_ok_ms = now_ms
        # What the leader assigned from (``topic_counts``: metadata as last seen).
        self.group_topics: frozenset[str] = frozenset()
        self.assigned_topic_counts: dict[str, int] = {}
        self._awaiting_members: list[GroupMember] | None = None

    # -- subscription --------------------------------------------------------------------------

    def subscribe(self, topics: Collection[str]) -> None:
        topic_set = frozenset(topics)
        changed = not self.subscribed or self.pattern is not None or topic_set != self.subscribed_topics
        self.pattern = None
        self.subscribed_topics = topic_set
        self.subscribed = True
        if changed:
            self._request_rejoin("subscription changed")

    def subscribe_pattern(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.subscribed = True
        self.subscribed_topics = self._pattern_topics()
        self._request_rejoin("subscription changed")

    def _pattern_topics(self) -> frozenset[str]:
        # The classic path matches at the start of a name (re.match), the consumer protocol the
        # whole name: kept as it was.
        assert self.pattern is not None
        return topics_matching(self.pattern, self.topic_counts, whole_name=False)

    def metadata_topics(self) -> frozenset[str] | None:
        """Topics whose metadata this member needs, or None for every topic (pattern)."""
        if self.pattern is not None:
            return None
        return self.subscribed_topics | self.group_topics

    def metadata_updated(
        self, topic_counts: Mapping[str, int], now_ms: int, topic_ids: Mapping[str, uuid.UUID] | None = None
    ) -> None:
        """The client's view of topics changed: partition count of every topic it knows (the
        classic protocol names topics, so ``topic_ids`` is not needed here)."""
        self.topic_counts = dict(topic_counts)
        if self._rematch_pattern(whole_name=False):
            self._request_rejoin("the subscription pattern matches other topics")
        if self.state is MemberState.ASSIGNING:
            self._assign(now_ms)
        elif self.state is MemberState.STABLE and self.leader_id == self.member_id and self.group_topics:
            current = {
                topic: self.topic_counts[topic] for topic in self.group_topics if topic in self.topic_counts
            }
            if current != self.assigned_topic_counts:
                self._request_rejoin("partitions of a subscribed topic changed")

    def _request_rejoin(self, reason: str) -> None:
        if not self.subscribed or self.state is MemberState.FATAL:
            return
        self.rejoin_needed = True
        self.rejoin_reason = reason

    # -- the application thread ----------------------------------------------------------------

    def begin_poll(self, now_ms: int) -> list[RebalanceEvent]:
        """The application polled: raise what poll must raise, else the rebalance events to run
        now, in order. Call ``callbacks_done`` once they ran (a join may be waiting on them)."""
        self._poll_started(now_ms)
        events: list[RebalanceEvent] = []
        if self.pending_assignment is not None:
            events.extend(self._apply_assignment())
        if (
            self.subscribed
            and not self._join_prepared
            and (
                self.state is MemberState.UNJOINED
                or (self.state is MemberState.STABLE and self.rejoin_needed)
            )
        ):
            events.extend(self._prepare_join())
            self._preparing_in_poll = True
        return events

    def callbacks_done(self, now_ms: int) -> None:
        """The events of the last ``begin_poll`` ran: a prepared join may go out now."""
        if self._preparing_in_poll:
            self._preparing_in_poll = False
            self._join_prepared = True
            self.rejoin_needed = False
            self._transition_to(MemberState.PREPARING)
            self.tick(now_ms)

    def _apply_assignment(self) -> list[RebalanceEvent]:
        assert self.pending_assignment is not None
        assigned = set(self.pending_assignment)
        self.pending_assignment = None
        revoked = self.owned - assigned
        added = assigned - self.owned
        events: list[RebalanceEvent] = []
        if revoked:
            events.append(PartitionsRevoked(sorted(revoked)))
            if self.rebalance_protocol is RebalanceProtocol.COOPERATIVE:
                # KIP-429: what moved is revoked now and handed over in a follow-up rebalance.
                self._request_rejoin("partitions were revoked for reassignment")
        self.owned = assigned
        events.append(PartitionsAssigned(sorted(added)))
        return events

    def _prepare_join(self) -> list[RebalanceEvent]:
        events: list[RebalanceEvent] = []
        if self.partitions_lost:
            self.partitions_lost = False
            if self.owned:
                events.append(PartitionsLost(sorted(self.owned)))
                self.owned = set()
        elif self.rebalance_protocol is RebalanceProtocol.EAGER:
            if self.owned:
                events.append(PartitionsRevoked(sorted(self.owned)))
                self.owned = set()
        else:
            unsubscribed = {tp for tp in self.owned if tp.topic not in self.subscribed_topics}
            if unsubscribed:
                events.append(PartitionsRevoked(sorted(unsubscribed)))
                self.owned -= unsubscribed
        return events

    # -- time ----------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Time passed: send what is due (FindCoordinator, JoinGroup, Heartbeat), enforce the poll
        interval and the session timeout."""
        if self.state is MemberState.FATAL:
            return
        if self.state is MemberState.STABLE and self._poll_overdue(now_ms):
            self._poll_timeout_expired(now_ms)
        if self.coordinator is None:
            wanted = self.coordinator_wanted or self.subscribed or self.state is not MemberState.UNJOINED
            self._find_coordinator_when_due(now_ms, wanted)
            return
        if (
            self.state is MemberState.PREPARING
            and self._join_prepared
            and not self._kind_in_flight(RequestKind.JOIN_GROUP)
            and now_ms >= self._join_retry_at_ms
        ):
            self._send_join()
        if self.state is MemberState.STABLE:
            if now_ms - self._last_heartbeat_ok_ms > self.settings.session_timeout_ms:
                # No heartbeat answered within the session: assume the coordinator is gone.
                self._coordinator_lost(now_ms)
                return
            if not self._kind_in_flight(RequestKind.HEARTBEAT) and now_ms >= self._next_heartbeat_ms:
                self._next_heartbeat_ms = now_ms + self.settings.heartbeat_interval_ms
                self._send(
                    RequestKind.HEARTBEAT,
                    HeartbeatRequest(
                        group_id=self.settings.group_id,
                        generation_id=self.generation_id,
                        member_id=self.member_id,
                        group_instance_id=self.settings.group_instance_id,
                    ),
                )

    def next_deadline_ms(self, now_ms: int) -> int:
        """When ``tick`` next has something to do (the shell sleeps until then or a wakeup)."""
        deadlines = [now_ms + self.settings.heartbeat_interval_ms]
        if self.coordinator is None:
            deadlines.append(self._find_retry_at_ms)
        if self.state is MemberState.PREPARING:
            deadlines.append(self._join_retry_at_ms)
        if self.state is MemberState.STABLE:
            deadlines.append(self._next_heartbeat_ms)
            deadlines.append(self._poll_deadline_ms())
            deadlines.append(self._last_heartbeat_ok_ms + self.settings.session_timeout_ms + 1)
        return max(now_ms, min(deadlines))

    def _poll_timeout_expired(self, now_ms: int) -> None:
        # Java's behaviour: a dynamic member leaves at once so the group rebalances without it; a
        # static member just stops heartbeating and lets its session expire (a restart within the
        # session keeps its partitions).
        self.pending_error = self._poll_timeout_error()
        if not self.is_static:
            self._send_leave("consumer poll timeout has expired")
        self._reset_generation(now_ms)

    # -- coordinator ---------------------------------------------------------------------------

    def _coordinator_lost(self, now_ms: int) -> None:
        super()._coordinator_lost(now_ms)
        # A join or sync that was in flight restarts from the join.
        if self.state in (MemberState.ASSIGNING, MemberState.SYNCING):
            self._awaiting_members = None
            self._transition_to(MemberState.PREPARING)
        # The session clock restarts with the new coordinator.
        self._last_heartbeat_ok_ms = now_ms

    def _on_find_coordinator(self, response: FindCoordinatorResponse, now_ms: int) -> bool:
        found = super()._on_find_coordinator(response, now_ms)
        if found:
            # The session clock starts with the new coordinator.
            self._last_heartbeat_ok_ms = now_ms
            self.tick(now_ms)
        return found

    # -- join ----------------------------------------------------------------------------------

    def _subscription_for(self, assignor: Assignor) -> bytes:
        owned = sorted(self.owned)
        topics = sorted(self.subscribed_topics)
        subscription = Subscription(
            topics=topics,
            user_data=assignor.subscription_user_data(
                set(topics), [(tp.topic, tp.partition) for tp in owned], self.generation_id
            ),
            owned_partitions=[(tp.topic, tp.partition) for tp in owned],
            generation_id=self.generation_id,
            rack_id=self.settings.client_rack or None,
        )
        return encode_subscription(subscription)

    def _send_join(self) -> None:
        request = JoinGroupRequest(
            group_id=self.settings.group_id,
            session_timeout_ms=self.settings.session_timeout_ms,
            rebalance_timeout_ms=self.settings.max_poll_interval_ms,
            member_id=self.member_id,
            group_instance_id=self.settings.group_instance_id,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocols=[
                JoinGroupRequest.JoinGroupRequestProtocol(
                    name=name, metadata=self._subscription_for(self.assignors[name])
                )
                for name in self._assignor_order
            ],
            reason=self.rejoin_reason or None,
        )
        # The coordinator may hold a JoinGroup for the whole rebalance timeout.
        self._send(
            RequestKind.JOIN_GROUP,
            request,
            self.settings.max_poll_interval_ms + self.settings.request_timeout_ms,
        )

    def _retry_join_after(self, now_ms: int, delay_ms: int) -> None:
        self._awaiting_members = None
        if self.state is not MemberState.PREPARING:
            self._transition_to(MemberState.PREPARING)
        self._join_retry_at_ms = now_ms + delay_ms

    def _on_join(self, response: JoinGroupResponse, now_ms: int) -> None:
        code = response.error_code
        if code == ErrorCode.NONE:
            self.member_id = response.member_id
            self.generation_id = response.generation_id
            self.protocol_name = response.protocol_name
            self.leader_id = response.leader
            self.rejoin_reason = ""
            if self.protocol_name not in self.assignors:
                self._fail(
                    GroupError(
                        f"the group chose assignor {self.protocol_name!r}, which this member does not offer"
                    )
                )
                return
            if self.leader_id == self.member_id and not response.skip_assignment:
                self._start_assignment(response, now_ms)
            else:
                self._transition_to(MemberState.SYNCING)
                self._send_sync([])
            return
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            # KIP-394: the coordinator gave us an id; join again with it at once.
            self.member_id = response.member_id
            self._retry_join_after(now_ms, 0)
        elif code in _GENERATION_ERRORS:
            self.member_id = ""
            self._retry_join_after(now_ms, 0)
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            self._retry_join_after(now_ms, 0)
        elif code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            self._retry_join_after(now_ms, self.settings.retry_backoff_ms)
        elif code in COORDINATOR_ERRORS:
            self._coordinator_lost(now_ms)
            self._retry_join_after(now_ms, 0)
        else:
            self._fail_with_code(code, "JoinGroup")

    def _start_assignment(self, response: JoinGroupResponse, now_ms: int) -> None:
        members: list[GroupMember] = []
        try:
            for member in response.members:
                members.append(
                    GroupMember(
                        member.member_id, member.group_instance_id, decode_subscription(member.metadata)
                    )
                )
        except DecodeError as error:
            self._assignment_failed(f"a member's subscription does not decode: {error}", now_ms)
            return
        self._awaiting_members = members
        self.group_topics = frozenset(topic for member in members for topic in member.subscription.topics)
        self._transition_to(MemberState.ASSIGNING)
        self._outputs.append(RefreshMetadata(self.group_topics))

    def _assign(self, now_ms: int) -> None:
        members = self._awaiting_members
        assert members is not None and self.protocol_name is not None
        self._awaiting_members = None
        counts = {
            topic: self.topic_counts[topic] for topic in self.group_topics if topic in self.topic_counts
        }
        try:
            result = self.assignors[self.protocol_name].assign(counts, members)
        except AssignmentError as error:
            self._assignment_failed(str(error), now_ms)
            return
        self.assigned_topic_counts = counts
        self._transition_to(MemberState.SYNCING)
        self._send_sync(
            [
                SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=member_id, assignment=encode_assignment(assignment)
                )
                for member_id, assignment in sorted(result.items())
            ]
        )

    def _assignment_failed(self, reason: str, now_ms: int) -> None:
        self.pending_error = GroupError(
            f"group {self.settings.group_id!r}: the leader cannot assign: {reason}"
        )
        self._retry_join_after(now_ms, self.settings.retry_backoff_ms)

    def _send_sync(self, assignments: list[SyncGroupRequest.SyncGroupRequestAssignment]) -> None:
        self._send(
            RequestKind.SYNC_GROUP,
            SyncGroupRequest(
                group_id=self.settings.group_id,
                generation_id=self.generation_id,
                member_id=self.member_id,
                group_instance_id=self.settings.group_instance_id,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocol_name=self.protocol_name,
                assignments=assignments,
            ),
            self.settings.max_poll_interval_ms + self.settings.request_timeout_ms,
        )

    def _on_sync(self, response: SyncGroupResponse, now_ms: int) -> None:
        code = response.error_code
        if code == ErrorCode.NONE:
            try:
                assignment = decode_assignment(response.assignment)
            except DecodeError as error:
                self._fail(
                    GroupError(f"group {self.settings.group_id!r}: the assignment does not decode: {error}")
                )
                return
            assert self.protocol_name is not None
            self.assignors[self.protocol_name].on_assignment(
                Assignment(list(assignment.partitions), assignment.user_data), self.generation_id
            )
            self.pending_assignment = [
                TopicPartition(topic, partition) for topic, partition in assignment.partitions
            ]
            self._join_prepared = False
            self._transition_to(MemberState.STABLE)
            self._last_heartbeat_ok_ms = now_ms
            self._next_heartbeat_ms = now_ms + self.settings.heartbeat_interval_ms
            return
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self._retry_join_after(now_ms, 0)
        elif code in _GENERATION_ERRORS:
            self._reset_generation(now_ms)
            self._join_prepared = False
        elif code in COORDINATOR_ERRORS:
            self._coordinator_lost(now_ms)
            self._retry_join_after(now_ms, 0)
        else:
            self._fail_with_code(code, "SyncGroup")

    # -- heartbeat -----------------------------------------------------------------------------

    def _on_heartbeat(self, response: HeartbeatResponse, now_ms: int) -> None:
        code = response.error_code
        if self.state is not MemberState.STABLE:
            return
        if code == ErrorCode.NONE:
            self._last_heartbeat_ok_ms = now_ms
        elif code == ErrorCode.REBALANCE_IN_PROGRESS:
            # The member is still in the group until it rejoins, so keep heartbeating meanwhile.
            self._last_heartbeat_ok_ms = now_ms
            self._request_rejoin("the group is rebalancing")
        elif code in _GENERATION_ERRORS:
            self._reset_generation(now_ms)
        elif code in COORDINATOR_ERRORS:
            self._coordinator_lost(now_ms)
        elif code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            self._next_heartbeat_ms = now_ms + self.settings.retry_backoff_ms
        else:
            self._fail_with_code(code, "Heartbeat")

    # -- losing the generation, leaving, failing -----------------------------------------------

    def _reset_generation(self, now_ms: int) -> None:
        """The member's generation is gone: it is no longer in the group and whatever it owns is
        lost (not revoked — another member may own it already, so no commit). It rejoins as new."""
        self.generation_id = -1
        self.member_id = ""
        self.leader_id = ""
        self._awaiting_members = None
        self._forget(*_MEMBER_REQUESTS)
        self.partitions_lost = True
        self._join_prepared = False
        self.rejoin_needed = self.subscribed
        self._transition_to(MemberState.UNJOINED)
        self._join_retry_at_ms = now_ms

    def _send_leave(self, reason: str) -> None:
        if self.coordinator is None or not self.member_id:
            return
        self._send(
            RequestKind.LEAVE_GROUP,
            LeaveGroupRequest(
                group_id=self.settings.group_id,
                members=[
                    LeaveGroupRequest.MemberIdentity(
                        member_id=self.member_id,
                        group_instance_id=self.settings.group_instance_id,
                        reason=reason,
                    )
                ],
            ),
        )

    def leave_group(self, reason: str) -> None:
        """Leave now (close, unsubscribe). Static members send no LeaveGroup: the coordinator keeps
        their place for a restart within the session timeout (KIP-345)."""
        if self.state is MemberState.FATAL:
            return
        if not self.is_static:
            self._send_leave(reason)
        self.generation_id = -1
        self.member_id = ""
        self.leader_id = ""
        self.owned = set()
        self.pending_assignment = None
        self.partitions_lost = False
        self._join_prepared = False
        self._preparing_in_poll = False
        self.rejoin_needed = False
        self._forget(*_MEMBER_REQUESTS)
        self._transition_to(MemberState.UNJOINED)

    def _fail_with_code(self, code: int, what: str) -> None:
        known = error_code(code)
        if known == ErrorCode.FENCED_INSTANCE_ID:
            self._fail(
                FencedInstanceIdError(
                    f"{what}: another consumer joined group {self.settings.group_id!r} with "
                    f"group.instance.id {self.settings.group_instance_id!r}; this one is fenced",
                    known,
                )
            )
        else:
            self._fail(GroupError(f"{what} for group {self.settings.group_id!r} failed: {known.name}", known))

    # -- responses -----------------------------------------------------------------------------

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        """The answer to a ``SendRequest``. Answers to requests no longer awaited are dropped."""
        kind = self._answered(request_id)
        if kind is None:
            return
        if kind is RequestKind.FIND_COORDINATOR:
            self._on_find_coordinator(response, now_ms)
        elif kind is RequestKind.JOIN_GROUP:
            self._on_join(response, now_ms)
        elif kind is RequestKind.SYNC_GROUP:
            self._on_sync(response, now_ms)
        elif kind is RequestKind.HEARTBEAT:
            self._on_heartbeat(response, now_ms)
        self.tick(now_ms)

    def on_request_failed(self, request_id: int, error: KafkaError, now_ms: int) -> None:
        """A ``SendRequest`` got no answer (connection lost, timeout, version refused)."""
        kind = self._answered(request_id)
        if kind is None:
            return
        if kind is RequestKind.FIND_COORDINATOR:
            self._find_retry_at_ms = now_ms + self.settings.retry_backoff_ms
        elif kind is RequestKind.LEAVE_GROUP:
            return
        else:
            self._coordinator_lost(now_ms)
            if (
                kind in (RequestKind.JOIN_GROUP, RequestKind.SYNC_GROUP)
                and self.state is not MemberState.UNJOINED
            ):
                self._retry_join_after(now_ms, self.settings.retry_backoff_ms)
        self.tick(now_ms)

    # -- offset commits ------------------------------------------------------------------------

    def commit_request(
        self, offsets: Mapping[TopicPartition, int], metadata: str = ""
    ) -> OffsetCommitRequest:
        """The OffsetCommit for ``offsets`` as this member (a subscribed member commits with its
        generation; a consumer with manual assignment commits as generation -1)."""
        if self.subscribed and self.generation_id < 0:
            raise CommitFailedError(
                f"cannot commit to group {self.settings.group_id!r}: this member is not part of an active "
                "generation (it is rejoining after a rebalance or an error); its partitions may have moved",
                None,
            )
        return offset_commit_request(
            self.settings.group_id,
            offsets,
            metadata,
            generation_id_or_member_epoch=self.generation_id,
            member_id=self.member_id,
            group_instance_id=self.settings.group_instance_id if self.generation_id >= 0 else None,
        )

    def on_commit_response(
        self, response: OffsetCommitResponse, now_ms: int
    ) -> dict[TopicPartition, ErrorCode]:
        """Per-partition error codes of a commit; group-level consequences applied here (rejoin,
        generation lost, coordinator moved, fenced)."""
        errors = dict(commit_error_codes(response))
        codes = set(errors.values())
        if codes & COORDINATOR_ERRORS:
            self.coordinator_disconnected(now_ms)
        if ErrorCode.FENCED_INSTANCE_ID in codes:
            self._fail_with_code(ErrorCode.FENCED_INSTANCE_ID, "OffsetCommit")
        elif codes & _GENERATION_ERRORS and self.state is not MemberState.UNJOINED and self.subscribed:
            self._reset_generation(now_ms)
        elif ErrorCode.REBALANCE_IN_PROGRESS in codes:
            self._request_rejoin("the group is rebalancing")
        return errors

    def commit_refused(self, codes: Collection[ErrorCode]) -> KafkaError | None:
        """The error a commit answered with ``codes`` raises, None when it succeeded."""
        bad = {code for code in codes if code != ErrorCode.NONE}
        if not bad:
            return None
        if bad & (_GENERATION_ERRORS | {ErrorCode.REBALANCE_IN_PROGRESS}):
            return CommitFailedError(
                f"commit to group {self.settings.group_id!r} refused ({', '.join(sorted(c.name for c in bad))}): "
                "the group rebalanced and these partitions may belong to another member now",
                lowest_error(bad),
            )
        if ErrorCode.FENCED_INSTANCE_ID in bad:
            return self.fatal_error or FencedInstanceIdError(
                f"commit to group {self.settings.group_id!r}: fenced by another instance",
                ErrorCode.FENCED_INSTANCE_ID,
            )
        first = lowest_error(bad)
        return KafkaError(f"commit to group {self.settings.group_id!r} failed: {first.name}", first)

    def commit_outcome(
        self, response: OffsetCommitResponse, offsets: Mapping[TopicPartition, int], now_ms: int
    ) -> KafkaError | None:
        """Apply a commit's answer (``on_commit_response``) and give the error it raises, if any."""
        return self.commit_refused(self.on_commit_response(response, now_ms).values())

    def offset_fetch_member(self) -> tuple[str, int] | None:
        """The member id and epoch an OffsetFetch carries (v9+): none for a classic group."""
        return None
