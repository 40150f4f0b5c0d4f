"""Membership of a consumer group under KIP-848's consumer group protocol (``group.protocol=consumer``),
a pure state machine like the classic ``GroupMembership`` beside it, with the same interface to the
shell (``coordinator.py``) and to the Consumer.

One request does everything: ConsumerGroupHeartbeat. The member joins by sending it with epoch 0
and its subscription, then sends it every ``heartbeat_interval_ms`` the coordinator returns. The
coordinator computes the assignment and answers with the member's partitions (by topic id) when
they change; the member *reconciles*: partitions it no longer has are revoked (auto-commit first,
then the listener, then they stop being fetched), new ones are handed to the listener and start
from their committed offsets. The next heartbeat, sent at once, tells the coordinator what the
member owns now; only then does the coordinator give revoked partitions to their next owner. There
is no group-wide barrier: members that keep their partitions never stop.

Reconciliation runs the listener, so it happens on the application thread inside ``poll()``
(``begin_poll`` hands out the events, ``callbacks_done`` records the result), as in the classic
path; heartbeats go on from the loop thread meanwhile.

Requests carry only what changed since the last heartbeat (KIP-848): subscription, owned
partitions, rack, assignor, rebalance timeout. After any failure, and on every join, the request
is complete.

The life of a member::

    UNSUBSCRIBED --first poll after subscribe--> JOINING --answer--> STABLE
    STABLE --an assignment that differs from what is owned--> RECONCILING
    RECONCILING --poll ran the callbacks--> STABLE (acknowledged by the next heartbeat)
    JOINING/STABLE/RECONCILING --FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, poll timeout--> FENCED
    FENCED --poll reported the partitions lost--> JOINING (epoch 0, same member id)
    any --fenced instance, refused for good--> FATAL          any --close/unsubscribe--> UNSUBSCRIBED

Leaving sends epoch -1 (or -2 for a static member, whose place the coordinator keeps for the
session timeout). Finding the coordinator, the request bookkeeping and the OffsetCommit are
shared with the classic membership (``membership_common.MembershipCore``).
"""

from __future__ import annotations

import base64
import enum
import re
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from strom.client.cluster import TopicPartition
from strom.client.consumer.membership_common import (
    COORDINATOR_ERRORS,
    InvalidTransitionError,
    MembershipCore,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RebalanceEvent,
    RefreshMetadata,
    RequestKind,
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
    UnsupportedVersionError,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse

__all__ = [
    "ALLOWED_PREVIOUS",
    "ConsumerGroupMembership",
    "ConsumerMemberState",
    "ConsumerMembershipSettings",
    "InvalidTransitionError",
    "StaleMemberEpochError",
    "new_member_id",
]

# Member epochs with a meaning of their own (KIP-848).
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

# The member's epoch is gone: its partitions may belong to others already.
_FENCED_ERRORS = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
# Errors a commit answers when this member lost its place (ILLEGAL_GENERATION: a classic group).
_COMMIT_FENCED_ERRORS = _FENCED_ERRORS | {ErrorCode.ILLEGAL_GENERATION}


def new_member_id() -> str:
    """A member id as Kafka 4 clients make one for ConsumerGroupHeartbeat v1: a random UUID in
    Kafka's text form (URL-safe base64, no padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


class ConsumerMemberState(enum.Enum):
    """Where this member stands (the coordinator's own view is in strom.coordinator)."""

    UNSUBSCRIBED = "unsubscribed"
    """Not a member: never joined, or left. A subscribed member joins at the next poll."""
    JOINING = "joining"
    """The epoch-0 heartbeat is due or in flight."""
    STABLE = "stable"
    """A member that owns what the coordinator last assigned; heartbeats at the interval."""
    RECONCILING = "reconciling"
    """The coordinator's assignment differs from what is owned: the next poll revokes and assigns
    (heartbeats go on meanwhile)."""
    FENCED = "fenced"
    """The epoch is gone (fenced, unknown member, poll timeout): the next poll reports the owned
    partitions lost, then the member joins again with epoch 0."""
    FATAL = "fatal"
    """Refused for good (fenced instance, unsupported assignor...): every poll raises the error."""


_MEMBER_STATES = frozenset(
    {
        ConsumerMemberState.UNSUBSCRIBED,
        ConsumerMemberState.JOINING,
        ConsumerMemberState.STABLE,
        ConsumerMemberState.RECONCILING,
        ConsumerMemberState.FENCED,
    }
)
ALLOWED_PREVIOUS: dict[ConsumerMemberState, frozenset[ConsumerMemberState]] = {
    ConsumerMemberState.UNSUBSCRIBED: _MEMBER_STATES,
    ConsumerMemberState.JOINING: frozenset({ConsumerMemberState.UNSUBSCRIBED, ConsumerMemberState.FENCED}),
    ConsumerMemberState.STABLE: frozenset(
        {ConsumerMemberState.JOINING, ConsumerMemberState.STABLE, ConsumerMemberState.RECONCILING}
    ),
    ConsumerMemberState.RECONCILING: frozenset(
        {ConsumerMemberState.JOINING, ConsumerMemberState.STABLE, ConsumerMemberState.RECONCILING}
    ),
    ConsumerMemberState.FENCED: frozenset(
        {
            ConsumerMemberState.JOINING,
            ConsumerMemberState.STABLE,
            ConsumerMemberState.RECONCILING,
            ConsumerMemberState.FENCED,
        }
    ),
    ConsumerMemberState.FATAL: _MEMBER_STATES,
}
# States in which the member holds an epoch and heartbeats.
_IN_GROUP = frozenset({ConsumerMemberState.STABLE, ConsumerMemberState.RECONCILING})


class StaleMemberEpochError(CommitFailedError):
    """A commit carried an epoch older than the member's: retried with the fresh epoch while the
    member still owns the partitions (as the Java client does)."""

    @property
    def retriable(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class ConsumerMembershipSettings:
    group_id: str
    group_instance_id: str | None = None
    # How long the coordinator waits for this member to revoke partitions: the Java client sends
    # max.poll.interval.ms, since revocation runs inside poll().
    max_poll_interval_ms: int = 300_000
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30_000
    client_rack: str | None = None
    # group.remote.assignor; None: the coordinator's default.
    server_assignor: str | None = None


@dataclass(frozen=True, slots=True)
class _SentFields:
    """What the last heartbeat told the coordinator, for sending only changes."""

    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    topic_names: tuple[str, ...] | None
    topic_regex: str | None
    server_assignor: str | None
    owned: frozenset[TopicPartition]


class ConsumerGroupMembership(MembershipCore[ConsumerMemberState, ConsumerMembershipSettings]):
    """One consumer's membership in one consumer-protocol group. Not thread-safe: the shell holds a
    lock around it."""

    def __init__(self, settings: ConsumerMembershipSettings, now_ms: int) -> None:
        super().__init__(
            settings,
            now_ms,
            state=ConsumerMemberState.UNSUBSCRIBED,
            allowed_previous=ALLOWED_PREVIOUS,
            fatal=ConsumerMemberState.FATAL,
            # One API does it all: heartbeats (join, leave) are the only member requests.
            member_requests=(RequestKind.CONSUMER_GROUP_HEARTBEAT,),
        )
        self.member_epoch = JOIN_EPOCH
        # Given by the coordinator with every answer; until the first one, the retry pace.
        self.heartbeat_interval_ms = settings.retry_backoff_ms
        # A subscribed pattern goes to the coordinator when the broker speaks ConsumerGroupHeartbeat
        # v1 (SubscribedTopicRegex); on v0 it is matched here against metadata and the names are
        # sent. ``subscribed_topics``: the current matches either way.
        self.regex_on_broker = True
        # What the coordinator assigned (by topic id), and what a reconciliation in progress
        # (callbacks running) will own once done (``owned``: what the application holds now).
        self.target: dict[uuid.UUID, frozenset[int]] = {}
        self._reconciling_to: set[TopicPartition] | None = None
        # The first assignment after a join is reconciled (and the listener told) even when empty,
        # as the classic path and the Java client do: an application may wait for it.
        self._first_assignment_pending = False
        self._awaiting_first_assignment = False
        self._rejoin_prepared = False
        # Topic ids <-> names, from metadata.
        self.topic_names: dict[uuid.UUID, str] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}
        # A refresh asked for to name unknown topic ids (a topic the coordinator assigned before
        # this client's metadata saw it); asked again after a backoff while some stay unknown.
        self._metadata_pending = False
        self._metadata_retry_at_ms = now_ms
        # Heartbeats.
        self.heartbeat_version: int | None = None
        self._sent: _SentFields | None = None
        self._heartbeat_now = False

    @property
    def generation_id(self) -> int:
        """The member epoch while in the group, else -1 (what commits and transactions carry;
        the name is the classic membership's)."""
        return self.member_epoch if self.state in _IN_GROUP else -1

    # -- subscription --------------------------------------------------------------------------

    def subscribe(self, topics: Collection[str]) -> None:
        self.pattern = None
        self.subscribed_topics = frozenset(topics)
        self.subscribed = True
        self._heartbeat_now = True

    def subscribe_pattern(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.subscribed = True
        self.subscribed_topics = self._pattern_topics()
        self._heartbeat_now = True

    def _pattern_topics(self) -> frozenset[str]:
        assert self.pattern is not None
        return topics_matching(self.pattern, self.topic_counts, whole_name=True)

    def metadata_topics(self) -> frozenset[str] | None:
        """Topics whose metadata this member needs, or None for every topic (a pattern, or an
        assignment naming a topic id not seen yet)."""
        if self.pattern is not None or self._unresolved_ids():
            return None
        return self.subscribed_topics | {tp.topic for tp in self.owned}

    def metadata_updated(
        self, topic_counts: Mapping[str, int], now_ms: int, topic_ids: Mapping[str, uuid.UUID] | None = None
    ) -> None:
        """The client's view of topics changed: partition counts, and the topic ids."""
        self.topic_counts = dict(topic_counts)
        self._metadata_pending = False
        self._metadata_retry_at_ms = now_ms + self.settings.retry_backoff_ms
        for name, topic_id in (topic_ids or {}).items():
            if topic_id.int == 0:
                continue
            stale = self.topic_ids.get(name)
            if stale is not None and stale != topic_id:
                # Recreated under the same name: the old id names a deleted topic.
                self.topic_names.pop(stale, None)
            self.topic_ids[name] = topic_id
            self.topic_names[topic_id] = name
        if self._rematch_pattern(whole_name=True) and not self._regex_sent_to_broker():
            self._heartbeat_now = True
        self._settle()

    def _regex_sent_to_broker(self) -> bool:
        return self.pattern is not None and self.regex_on_broker and self.heartbeat_version != 0

    # -- the assignment ------------------------------------------------------------------------

    def _unresolved_ids(self) -> set[uuid.UUID]:
        return {topic_id for topic_id in self.target if topic_id not in self.topic_names}

    def resolved_target(self) -> set[TopicPartition]:
        """The coordinator's assignment in names, leaving out topic ids metadata does not name yet."""
        return {
            TopicPartition(self.topic_names[topic_id], partition)
            for topic_id, partitions in self.target.items()
            if topic_id in self.topic_names
            for partition in partitions
        }

    def _settle(self) -> None:
        """After the target, the owned partitions or the names changed: is there anything to
        reconcile?"""
        if self.state not in _IN_GROUP:
            return
        if self._reconciling_to is not None:
            return  # callbacks_done settles again
        if self.resolved_target() != self.owned or self._first_assignment_pending:
            self._transition_to(ConsumerMemberState.RECONCILING)
        else:
            self._transition_to(ConsumerMemberState.STABLE)

    def _ask_metadata_for_unknown_ids(self, now_ms: int | None) -> None:
        """Ask for a refresh (of every topic: only ids are known) when an assigned topic id has no
        name and none is in flight; ``now_ms`` None: a new assignment, ask without waiting."""
        if self._metadata_pending or not self._unresolved_ids():
            return
        if now_ms is not None and now_ms < self._metadata_retry_at_ms:
            return
        self._metadata_pending = True
        self._outputs.append(RefreshMetadata(frozenset()))

    # -- the application thread ----------------------------------------------------------------

    def begin_poll(self, now_ms: int) -> list[RebalanceEvent]:
        """The application polled: raise what poll must raise, else the rebalance events to run
        now, in order (revoked before assigned). Call ``callbacks_done`` once they ran."""
        self._poll_started(now_ms)
        events: list[RebalanceEvent] = []
        if self.state is ConsumerMemberState.FENCED and self._reconciling_to is None:
            if self.owned:
                events.append(PartitionsLost(sorted(self.owned)))
                self.owned = set()
            self._rejoin_prepared = self.subscribed
        elif self.state is ConsumerMemberState.UNSUBSCRIBED and self.subscribed:
            self._rejoin_prepared = True
        elif self.state is ConsumerMemberState.RECONCILING and self._reconciling_to is None:
            target = self.resolved_target()
            revoked = self.owned - target
            added = target - self.owned
            if revoked:
                events.append(PartitionsRevoked(sorted(revoked)))
            events.append(PartitionsAssigned(sorted(added)))
            self._reconciling_to = target
            self._first_assignment_pending = False
        return events

    def callbacks_done(self, now_ms: int) -> None:
        """The events of the last ``begin_poll`` ran: record the reconciliation (and acknowledge
        it with a heartbeat at once), or join."""
        if self._reconciling_to is not None:
            self.owned, self._reconciling_to = self._reconciling_to, None
            self._heartbeat_now = True
            self._settle()
        if self._rejoin_prepared:
            self._rejoin_prepared = False
            if self.state in (ConsumerMemberState.UNSUBSCRIBED, ConsumerMemberState.FENCED):
                self._start_joining(now_ms)
        self.tick(now_ms)

    def _start_joining(self, join_at_ms: int) -> None:
        self.member_epoch = JOIN_EPOCH
        self.target = {}
        self._sent = None
        self._heartbeat_now = False
        self._first_assignment_pending = False
        self._awaiting_first_assignment = False
        self._transition_to(ConsumerMemberState.JOINING)
        self._next_heartbeat_ms = join_at_ms

    # -- time ----------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Time passed: send what is due (FindCoordinator, a heartbeat), enforce the poll interval."""
        if self.state is ConsumerMemberState.FATAL:
            return
        if self.state in _IN_GROUP and self._poll_overdue(now_ms):
            self._poll_timeout_expired(now_ms)
        if (
            self.state is ConsumerMemberState.FENCED
            and self.subscribed
            and not self.owned
            and self._reconciling_to is None
            and self.pending_error is None
        ):
            # Nothing to report lost: no need to wait for a poll before joining again (after the
            # backoff, so a coordinator that keeps fencing the join is not hammered).
            self._start_joining(now_ms + self.settings.retry_backoff_ms)
        if self.state in _IN_GROUP:
            self._ask_metadata_for_unknown_ids(now_ms)
        if self.coordinator is None:
            wanted = self.coordinator_wanted or self.state in (ConsumerMemberState.JOINING, *_IN_GROUP)
            self._find_coordinator_when_due(now_ms, wanted)
            return
        if (
            self.state in (ConsumerMemberState.JOINING, *_IN_GROUP)
            and not self._kind_in_flight(RequestKind.CONSUMER_GROUP_HEARTBEAT)
            and (now_ms >= self._next_heartbeat_ms or (self._heartbeat_now and self.state in _IN_GROUP))
        ):
            self._heartbeat_now = False
            self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
            self._send(RequestKind.CONSUMER_GROUP_HEARTBEAT, self.heartbeat_request())

    def next_deadline_ms(self, now_ms: int) -> int:
        deadlines = [now_ms + max(self.heartbeat_interval_ms, 1)]
        if self.coordinator is None:
            deadlines.append(self._find_retry_at_ms)
        elif self.state in (ConsumerMemberState.JOINING, *_IN_GROUP):
            deadlines.append(now_ms if self._heartbeat_now else self._next_heartbeat_ms)
        if self.state in _IN_GROUP:
            deadlines.append(self._poll_deadline_ms())
            if self._unresolved_ids() and not self._metadata_pending:
                deadlines.append(self._metadata_retry_at_ms)
        return max(now_ms, min(deadlines))

    def _poll_timeout_expired(self, now_ms: int) -> None:
        # As the Java client: the member leaves (static: -2, its place kept for the session) and
        # the next poll reports its partitions lost and joins again.
        self.pending_error = self._poll_timeout_error()
        self._send_leave()
        self._fence(now_ms)

    # -- heartbeats ----------------------------------------------------------------------------

    def heartbeat_request(self) -> ConsumerGroupHeartbeatRequest:
        """The next heartbeat: complete when joining or after a failure, else only what changed."""
        joining = self.state is ConsumerMemberState.JOINING
        full = joining or self._sent is None
        regex_on_broker = self._regex_sent_to_broker()
        names = None if regex_on_broker else tuple(sorted(self.subscribed_topics))
        regex = self.pattern.pattern if regex_on_broker and self.pattern is not None else None
        owned = frozenset() if joining else frozenset(self.owned)
        now = _SentFields(
            instance_id=self.settings.group_instance_id,
            rack_id=self.settings.client_rack,
            rebalance_timeout_ms=self.settings.max_poll_interval_ms,
            topic_names=names,
            topic_regex=regex,
            server_assignor=self.settings.server_assignor,
            owned=owned,
        )
        last = None if full else self._sent
        subscription_changed = last is None or (last.topic_names, last.topic_regex) != (names, regex)
        request = ConsumerGroupHeartbeatRequest(
            group_id=self.settings.group_id,
            member_id=self.member_id,
            member_epoch=self.member_epoch,
            instance_id=now.instance_id if last is None else None,
            rack_id=now.rack_id if last is None else None,
            rebalance_timeout_ms=now.rebalance_timeout_ms if last is None else -1,
            server_assignor=now.server_assignor if last is None else None,
            topic_partitions=self._owned_by_topic_id(owned) if last is None or last.owned != owned else None,
        )
        if subscription_changed:
            # The coordinator subscribes a member to its names and its regex's matches, a null
            # field meaning "unchanged": a change sends both, the unused one empty (an empty regex
            # clears it; v0 has no regex field, fit_heartbeat drops it).
            request.subscribed_topic_names = [] if names is None else list(names)
            request.subscribed_topic_regex = "" if regex is None else regex
        self._sent = now
        return request

    def _owned_by_topic_id(
        self, owned: Collection[TopicPartition]
    ) -> list[ConsumerGroupHeartbeatRequest.TopicPartitions]:
        by_topic: dict[uuid.UUID, list[int]] = {}
        for tp in sorted(owned):
            by_topic.setdefault(self.topic_ids[tp.topic], []).append(tp.partition)
        return [
            ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=topic_id, partitions=partitions)
            for topic_id, partitions in by_topic.items()
        ]

    def fit_heartbeat(
        self, request: ConsumerGroupHeartbeatRequest, version: int
    ) -> ConsumerGroupHeartbeatRequest:
        """``request`` for the version the coordinator speaks: v1 needs a member id chosen by the
        member at its first join; v0 has no SubscribedTopicRegex, so a pattern is matched here."""
        self.heartbeat_version = version
        if version >= 1 and not request.member_id:
            if not self.member_id:
                self.member_id = new_member_id()
            request.member_id = self.member_id
        if version == 0 and request.subscribed_topic_regex:
            self.regex_on_broker = False
            request.subscribed_topic_names = sorted(self.subscribed_topics)
            if self._sent is not None:
                self._sent = _replace_subscription(self._sent, tuple(request.subscribed_topic_names))
        if version == 0:
            request.subscribed_topic_regex = None
        return request

    def _on_heartbeat(self, response: ConsumerGroupHeartbeatResponse, now_ms: int) -> None:
        if self.state not in (ConsumerMemberState.JOINING, *_IN_GROUP):
            return
        code = error_code(response.error_code)
        if code == ErrorCode.NONE:
            if response.member_id:
                self.member_id = response.member_id
            self.member_epoch = response.member_epoch
            if response.heartbeat_interval_ms > 0:
                self.heartbeat_interval_ms = response.heartbeat_interval_ms
                self._next_heartbeat_ms = now_ms + response.heartbeat_interval_ms
            if self.state is ConsumerMemberState.JOINING:
                self._transition_to(ConsumerMemberState.STABLE)
                self._awaiting_first_assignment = True
            if response.assignment is not None:
                self.target = {
                    entry.topic_id: frozenset(entry.partitions)
                    for entry in response.assignment.topic_partitions
                    if entry.partitions
                }
                if self._awaiting_first_assignment:
                    self._awaiting_first_assignment = False
                    self._first_assignment_pending = True
                self._ask_metadata_for_unknown_ids(None)
            self._settle()
            return
        # Whatever went wrong, the next heartbeat says everything again.
        self._sent = None
        if code in _FENCED_ERRORS:
            self._fence(now_ms)
        elif code in COORDINATOR_ERRORS:
            self._coordinator_lost(now_ms)
        elif code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            self._next_heartbeat_ms = now_ms + self.settings.retry_backoff_ms
        elif code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
            # Not fatal in the Java client: poll raises it once, the member stays.
            self.pending_error = GroupError(
                f"group {self.settings.group_id!r}: not authorized to a subscribed topic"
                + (f" ({response.error_message})" if response.error_message else ""),
                code,
            )
            self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
        else:
            self._fail_with_code(code, response.error_message)

    # -- losing the epoch, leaving, failing ----------------------------------------------------

    def _fence(self, now_ms: int) -> None:
        """The epoch is gone: owned partitions are lost (reported by the next poll, no commit) and
        the member joins again with epoch 0 and the same member id."""
        self.member_epoch = JOIN_EPOCH
        self.target = {}
        self._sent = None
        self._forget(RequestKind.CONSUMER_GROUP_HEARTBEAT)
        self._transition_to(ConsumerMemberState.FENCED)
        self._next_heartbeat_ms = now_ms

    def _leave_request(self) -> ConsumerGroupHeartbeatRequest | None:
        if self.coordinator is None or not self.member_id:
            return None
        if self.state not in (ConsumerMemberState.JOINING, *_IN_GROUP):
            return None
        return ConsumerGroupHeartbeatRequest(
            group_id=self.settings.group_id,
            member_id=self.member_id,
            member_epoch=STATIC_LEAVE_EPOCH if self.is_static else LEAVE_EPOCH,
            instance_id=self.settings.group_instance_id,
        )

    def _send_leave(self) -> None:
        request = self._leave_request()
        if request is not None:
            self._forget(RequestKind.CONSUMER_GROUP_HEARTBEAT)
            request_id = self._send(RequestKind.CONSUMER_GROUP_HEARTBEAT, request)
            # Nobody waits for the answer.
            self._in_flight.pop(request_id, None)

    def leave_group(self, reason: str) -> None:
        """Leave now (close, unsubscribe): epoch -1, or -2 for a static member (its partitions wait
        for it for the session timeout). The caller has revoked ``owned`` already."""
        if self.state is ConsumerMemberState.FATAL:
            return
        self._send_leave()
        self.member_epoch = JOIN_EPOCH
        self.owned = set()
        self.target = {}
        self._reconciling_to = None
        self._rejoin_prepared = False
        self._sent = None
        self._forget(RequestKind.CONSUMER_GROUP_HEARTBEAT)
        self._transition_to(ConsumerMemberState.UNSUBSCRIBED)

    def _fail_with_code(self, code: ErrorCode, message: str | None) -> None:
        detail = f": {message}" if message else ""
        group = self.settings.group_id
        if code == ErrorCode.FENCED_INSTANCE_ID:
            self._fail(
                FencedInstanceIdError(
                    f"another consumer joined group {group!r} with group.instance.id "
                    f"{self.settings.group_instance_id!r}; this one is fenced{detail}",
                    code,
                )
            )
        elif code == ErrorCode.UNSUPPORTED_ASSIGNOR:
            self._fail(
                GroupError(
                    f"group {group!r}: the coordinator has no assignor {self.settings.server_assignor!r} "
                    f"(group.remote.assignor){detail}",
                    code,
                )
            )
        elif code == ErrorCode.GROUP_ID_NOT_FOUND:
            self._fail(
                GroupError(
                    f"group {group!r} is not a consumer-protocol group the coordinator can convert "
                    f"(a classic group with other members?){detail}",
                    code,
                )
            )
        else:
            self._fail(
                GroupError(f"ConsumerGroupHeartbeat for group {group!r} failed: {code.name}{detail}", code)
            )

    # -- coordinator ---------------------------------------------------------------------------

    def _coordinator_lost(self, now_ms: int) -> None:
        super()._coordinator_lost(now_ms)
        # The new coordinator is told everything.
        self._sent = None

    # -- responses -----------------------------------------------------------------------------

    def on_response(self, request_id: int, response: Any, now_ms: int) -> None:
        kind = self._answered(request_id)
        if kind is None:
            return
        if kind is RequestKind.FIND_COORDINATOR:
            self._on_find_coordinator(response, now_ms)
        elif kind is RequestKind.CONSUMER_GROUP_HEARTBEAT:
            self._on_heartbeat(response, now_ms)
        self.tick(now_ms)

    def on_request_failed(self, request_id: int, error: KafkaError, now_ms: int) -> None:
        kind = self._answered(request_id)
        if kind is None:
            return
        if kind is RequestKind.FIND_COORDINATOR:
            self._find_retry_at_ms = now_ms + self.settings.retry_backoff_ms
        elif isinstance(error, UnsupportedVersionError):
            self._fail(
                UnsupportedVersionError(
                    f"group.protocol=consumer needs ConsumerGroupHeartbeat, which the coordinator of "
                    f"group {self.settings.group_id!r} does not offer ({error}); use group.protocol=classic"
                )
            )
        else:
            self._coordinator_lost(now_ms)
        self.tick(now_ms)

    # -- offsets -------------------------------------------------------------------------------

    def commit_request(
        self, offsets: Mapping[TopicPartition, int], metadata: str = ""
    ) -> OffsetCommitRequest:
        """The OffsetCommit for ``offsets`` as this member: its member id and epoch (v9 checks the
        epoch); a consumer with manual assignment commits as no member (-1)."""
        in_group = self.state in _IN_GROUP
        if self.subscribed and not in_group:
            raise CommitFailedError(
                f"cannot commit to group {self.settings.group_id!r}: this member is not in the group "
                "(joining, or rejoining after losing its epoch); its partitions may have moved",
                None,
            )
        return offset_commit_request(
            self.settings.group_id,
            offsets,
            metadata,
            generation_id_or_member_epoch=self.member_epoch if in_group else -1,
            member_id=self.member_id if in_group else "",
            group_instance_id=self.settings.group_instance_id if in_group else None,
        )

    def commit_outcome(
        self, response: OffsetCommitResponse, offsets: Mapping[TopicPartition, int], now_ms: int
    ) -> KafkaError | None:
        """Apply a commit's answer; the error the commit raises (None: committed).

        STALE_MEMBER_EPOCH (the epoch moved on while the commit travelled) is retried with the
        fresh epoch if the member still owns every partition committed, as the Java client does;
        UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH mean the member lost its place (partitions lost)."""
        bad = {code for _, code in commit_error_codes(response)} - {ErrorCode.NONE}
        if not bad:
            return None
        group = self.settings.group_id
        names = ", ".join(sorted(code.name for code in bad))
        if bad & COORDINATOR_ERRORS:
            self.coordinator_disconnected(now_ms)
        if ErrorCode.FENCED_INSTANCE_ID in bad:
            self._fail_with_code(ErrorCode.FENCED_INSTANCE_ID, None)
            assert self.fatal_error is not None
            return self.fatal_error
        if bad & _COMMIT_FENCED_ERRORS:
            if self.subscribed and self.state in (ConsumerMemberState.JOINING, *_IN_GROUP):
                self._fence(now_ms)
            return CommitFailedError(
                f"commit to group {group!r} refused ({names}): this member lost its place in the group "
                "and these partitions may belong to another member now",
                lowest_error(bad),
            )
        if ErrorCode.STALE_MEMBER_EPOCH in bad:
            still_owned = self.state in _IN_GROUP and all(tp in self.owned for tp in offsets)
            if still_owned:
                return StaleMemberEpochError(
                    f"commit to group {group!r}: stale member epoch; retrying with epoch {self.member_epoch}",
                    ErrorCode.STALE_MEMBER_EPOCH,
                )
            return CommitFailedError(
                f"commit to group {group!r} refused (STALE_MEMBER_EPOCH) and this member no longer owns "
                "all of these partitions",
                ErrorCode.STALE_MEMBER_EPOCH,
            )
        first = lowest_error(bad)
        return KafkaError(f"commit to group {group!r} failed: {first.name}", first)

    def offset_fetch_member(self) -> tuple[str, int] | None:
        """The member id and epoch an OffsetFetch v9 carries while this member is in the group."""
        if self.state in _IN_GROUP:
            return self.member_id, self.member_epoch
        return None


def _replace_subscription(sent: _SentFields, names: tuple[str, ...]) -> _SentFields:
    return _SentFields(
        instance_id=sent.instance_id,
        rack_id=sent.rack_id,
        rebalance_timeout_ms=sent.rebalance_timeout_ms,
        topic_names=names,
        topic_regex=None,
        server_assignor=sent.server_assignor,
        owned=sent.owned,
    )
