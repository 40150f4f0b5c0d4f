"""What the two group memberships have in common: the classic one (``membership.py``: JoinGroup,
SyncGroup, Heartbeat) and the consumer group protocol's (``consumer_membership.py``: KIP-848's
ConsumerGroupHeartbeat).

Both are pure state machines driven by the same shell (``coordinator.py``), so they share its
vocabulary (requests out, rebalance events for poll), and ``MembershipCore`` holds the mechanics
that do not depend on the protocol: the state-table check, the request bookkeeping, the
subscription fields, the poll-interval bookkeeping, finding the coordinator and the OffsetCommit
request. What a state means, how an error is answered and when to join or heartbeat stay with each
membership.
"""

from __future__ import annotations

import enum
import itertools
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from strom.client.cluster import TopicPartition
from strom.client.errors import GroupError, KafkaError, MaxPollIntervalExceededError
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse

__all__ = [
    "COORDINATOR_ERRORS",
    "Coordinator",
    "InvalidTransitionError",
    "MembershipCore",
    "Output",
    "PartitionsAssigned",
    "PartitionsLost",
    "PartitionsRevoked",
    "RebalanceEvent",
    "RefreshMetadata",
    "RequestKind",
    "SendRequest",
    "commit_error_codes",
    "error_code",
    "lowest_error",
    "offset_commit_request",
    "read_find_coordinator",
    "topics_matching",
]

# Errors that say the coordinator moved or is gone: find it again.
COORDINATOR_ERRORS = frozenset(
    {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT}
)


class RequestKind(enum.Enum):
    FIND_COORDINATOR = "FindCoordinator"
    JOIN_GROUP = "JoinGroup"
    SYNC_GROUP = "SyncGroup"
    HEARTBEAT = "Heartbeat"
    LEAVE_GROUP = "LeaveGroup"
    # The consumer group protocol (consumer_membership.py): join, heartbeat and leave in one API.
    CONSUMER_GROUP_HEARTBEAT = "ConsumerGroupHeartbeat"


@dataclass(frozen=True, slots=True)
class Coordinator:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class SendRequest:
    """Send ``request`` to ``coordinator`` (None: any broker) and report back with ``request_id``.

    Requests are built in their newest form; the shell fits them to the negotiated version."""

    request_id: int
    kind: RequestKind
    request: Any
    coordinator: Coordinator | None
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class RefreshMetadata:
    """Refresh metadata now: of the member's ``metadata_topics()`` and of ``topics`` (a classic
    leader's group topics); answer with ``metadata_updated``."""

    topics: frozenset[str]


@dataclass(frozen=True, slots=True)
class PartitionsRevoked:
    partitions: list[TopicPartition]


@dataclass(frozen=True, slots=True)
class PartitionsAssigned:
    partitions: list[TopicPartition]


@dataclass(frozen=True, slots=True)
class PartitionsLost:
    partitions: list[TopicPartition]


RebalanceEvent = PartitionsRevoked | PartitionsAssigned | PartitionsLost
Output = SendRequest | RefreshMetadata


class InvalidTransitionError(AssertionError):
    """A programming error: the state machine was asked for a move its table forbids."""


def error_code(code: int) -> ErrorCode:
    """``code`` as an ErrorCode; a code this client does not know is UNKNOWN_SERVER_ERROR."""
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


def read_find_coordinator(response: FindCoordinatorResponse) -> tuple[int, int, str, int]:
    """Error code, node id, host and port of a FindCoordinator answer (v4+ lists per key)."""
    if response.coordinators:
        entry = response.coordinators[0]
        return entry.error_code, entry.node_id, entry.host, entry.port
    return response.error_code, response.node_id, response.host, response.port


def topics_matching(pattern: re.Pattern[str], topics: Iterable[str], *, whole_name: bool) -> frozenset[str]:
    """The topics ``pattern`` subscribes to, internal ones (``__``) left out. ``whole_name``: the
    pattern must match the whole name, else a match at its start is enough."""
    match = pattern.fullmatch if whole_name else pattern.match
    return frozenset(topic for topic in topics if match(topic) is not None and not topic.startswith("__"))


def offset_commit_request(
    group_id: str,
    offsets: Mapping[TopicPartition, int],
    metadata: str,
    *,
    generation_id_or_member_epoch: int,
    member_id: str,
    group_instance_id: str | None,
) -> OffsetCommitRequest:
    """The OffsetCommit of ``offsets`` as the member named (generation -1, member "": no member)."""
    by_topic: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
    for tp, offset in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=offset, committed_metadata=metadata
            )
        )
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id_or_member_epoch=generation_id_or_member_epoch,
        member_id=member_id,
        group_instance_id=group_instance_id,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=partitions)
            for topic, partitions in by_topic.items()
        ],
    )


def commit_error_codes(response: OffsetCommitResponse) -> list[tuple[TopicPartition, ErrorCode]]:
    """The error code an OffsetCommit answered for each partition, in the answer's order."""
    return [
        (TopicPartition(topic.name, partition.partition_index), error_code(partition.error_code))
        for topic in response.topics
        for partition in topic.partitions
    ]


def lowest_error(codes: Collection[ErrorCode]) -> ErrorCode:
    """The code an error names when a commit answered several: the lowest, so the choice is stable."""
    return min(codes, key=lambda c: c.value)


class MembershipSettingsFields(Protocol):
    """The settings both memberships read here."""

    @property
    def group_id(self) -> str: ...
    @property
    def group_instance_id(self) -> str | None: ...
    @property
    def max_poll_interval_ms(self) -> int: ...
    @property
    def retry_backoff_ms(self) -> int: ...
    @property
    def request_timeout_ms(self) -> int: ...


StateT = TypeVar("StateT", bound=enum.Enum)
SettingsT = TypeVar("SettingsT", bound=MembershipSettingsFields)


class MembershipCore(Generic[StateT, SettingsT]):
    """The protocol-independent half of a membership. ``allowed_previous`` is the membership's
    state table, ``fatal`` its state of no return, and ``member_requests`` the kinds of request
    about the membership itself: answers to them are dropped when the coordinator is lost or the
    member fails."""

    def __init__(
        self,
        settings: SettingsT,
        now_ms: int,
        *,
        state: StateT,
        allowed_previous: Mapping[StateT, frozenset[StateT]],
        fatal: StateT,
        member_requests: tuple[RequestKind, ...],
    ) -> None:
        self.settings = settings
        self.state = state
        self._allowed_previous = allowed_previous
        self._fatal = fatal
        self._member_requests = member_requests
        self.member_id = ""
        # Subscription: explicit topics, or a pattern matched against metadata.
        self.subscribed = False
        self.subscribed_topics: frozenset[str] = frozenset()
        self.pattern: re.Pattern[str] | None = None
        # What the application holds now; the partition count of every topic metadata knows.
        self.owned: set[TopicPartition] = set()
        self.topic_counts: dict[str, int] = {}
        # Coordinator discovery.
        self.coordinator: Coordinator | None = None
        self.coordinator_wanted = False
        self._find_retry_at_ms = now_ms
        # Timers.
        self.last_poll_ms = now_ms
        self._next_heartbeat_ms = now_ms
        # Errors for poll: one-shot (raised by the next poll) and fatal (raised by every poll).
        self.pending_error: KafkaError | None = None
        self.fatal_error: KafkaError | None = None
        # Requests in flight by kind, so answers to requests we no longer care about are dropped.
        self._request_ids = itertools.count(1)
        self._in_flight: dict[int, RequestKind] = {}
        self._outputs: list[Output] = []

    # -- state table ---------------------------------------------------------------------------

    def _transition_to(self, target: StateT) -> None:
        if self.state not in self._allowed_previous[target]:
            raise InvalidTransitionError(
                f"group {self.settings.group_id!r} member {self.member_id!r}: "
                f"{self.state.name} -> {target.name} is not allowed"
            )
        self.state = target

    @property
    def is_static(self) -> bool:
        return self.settings.group_instance_id is not None

    # -- requests ------------------------------------------------------------------------------

    def _kind_in_flight(self, kind: RequestKind) -> bool:
        return kind in self._in_flight.values()

    def _forget(self, *kinds: RequestKind) -> None:
        self._in_flight = {rid: kind for rid, kind in self._in_flight.items() if kind not in kinds}

    def _send(self, kind: RequestKind, request: Any, timeout_ms: int | None = None) -> int:
        request_id = next(self._request_ids)
        self._in_flight[request_id] = kind
        coordinator = None if kind is RequestKind.FIND_COORDINATOR else self.coordinator
        self._outputs.append(
            SendRequest(
                request_id,
                kind,
                request,
                coordinator,
                self.settings.request_timeout_ms if timeout_ms is None else timeout_ms,
            )
        )
        return request_id

    def take_outputs(self) -> list[Output]:
        """Requests to send and metadata to refresh, in order; each is handed out once."""
        outputs, self._outputs = self._outputs, []
        return outputs

    def _answered(self, request_id: int) -> RequestKind | None:
        """The kind of request an answer (or failure) is for; None: nobody waits for it any more
        (forgotten, or the member failed for good)."""
        kind = self._in_flight.pop(request_id, None)
        if kind is None or self.state is self._fatal:
            return None
        return kind

    # -- subscription --------------------------------------------------------------------------

    def unsubscribe(self) -> None:
        """Stop being a member; the caller has revoked ``owned`` already (see ``leave_group``)."""
        self.subscribed = False
        self.subscribed_topics = frozenset()
        self.pattern = None
        self.leave_group("the consumer unsubscribed")

    def leave_group(self, reason: str) -> None:
        raise NotImplementedError

    def _rematch_pattern(self, whole_name: bool) -> bool:
        """Match a subscribed pattern against the topics metadata knows now; True when the
        subscribed topics changed."""
        if self.pattern is None or not self.subscribed:
            return False
        matched = topics_matching(self.pattern, self.topic_counts, whole_name=whole_name)
        if matched == self.subscribed_topics:
            return False
        self.subscribed_topics = matched
        return True

    # -- polling -------------------------------------------------------------------------------

    def _poll_started(self, now_ms: int) -> None:
        """The application polled: raise the fatal error, else the one-shot error, if any."""
        self.last_poll_ms = now_ms
        if self.fatal_error is not None:
            raise self.fatal_error
        if self.pending_error is not None:
            error, self.pending_error = self.pending_error, None
            raise error

    def _poll_overdue(self, now_ms: int) -> bool:
        return now_ms - self.last_poll_ms > self.settings.max_poll_interval_ms

    def _poll_deadline_ms(self) -> int:
        """When ``_poll_overdue`` turns true."""
        return self.last_poll_ms + self.settings.max_poll_interval_ms + 1

    def _poll_timeout_error(self) -> MaxPollIntervalExceededError:
        return MaxPollIntervalExceededError(
            f"poll() was not called for more than max.poll.interval.ms="
            f"{self.settings.max_poll_interval_ms} ms: this member left group {self.settings.group_id!r} "
            "and its partitions may have been given to others; the next poll() rejoins",
            None,
        )

    # -- coordinator ---------------------------------------------------------------------------

    def need_coordinator(self) -> None:
        """Someone (a commit, an offset fetch) needs the coordinator even when not subscribed."""
        self.coordinator_wanted = True

    def coordinator_disconnected(self, now_ms: int) -> None:
        """The connection to the coordinator broke."""
        if self.coordinator is not None:
            self._coordinator_lost(now_ms)

    def _coordinator_lost(self, now_ms: int) -> None:
        self.coordinator = None
        self._find_retry_at_ms = now_ms + self.settings.retry_backoff_ms
        # Requests to the old coordinator are dead.
        self._forget(*self._member_requests)

    def _find_coordinator_when_due(self, now_ms: int, wanted: bool) -> None:
        """Ask for the coordinator (not known) if ``wanted``, none is asked yet and the backoff
        after the last attempt passed."""
        if (
            wanted
            and not self._kind_in_flight(RequestKind.FIND_COORDINATOR)
            and now_ms >= self._find_retry_at_ms
        ):
            self._send(
                RequestKind.FIND_COORDINATOR,
                FindCoordinatorRequest(key_type=0, coordinator_keys=[self.settings.group_id]),
            )

    def _on_find_coordinator(self, response: FindCoordinatorResponse, now_ms: int) -> bool:
        """Take a FindCoordinator answer; True when the coordinator is known now (the first
        heartbeat is due at once), False when asked again later or refused for good."""
        code, node_id, host, port = read_find_coordinator(response)
        if code != ErrorCode.NONE:
            if code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
                self._fail(
                    GroupError(
                        f"FindCoordinator for {self.settings.group_id!r}: not authorized", ErrorCode(code)
                    )
                )
                return False
            self._find_retry_at_ms = now_ms + self.settings.retry_backoff_ms
            return False
        self.coordinator = Coordinator(node_id, host, port)
        self._next_heartbeat_ms = now_ms
        return True

    # -- failing -------------------------------------------------------------------------------

    def _fail(self, error: KafkaError) -> None:
        self.fatal_error = error
        self._forget(*self._member_requests)
        self._transition_to(self._fatal)
