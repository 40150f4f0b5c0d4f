"""The consumer's group membership state machine, driven by scripted responses and a manual clock."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from strom.assignors import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    get_assignor,
)
from strom.base.clock import ManualClock
from strom.client.cluster import TopicPartition
from strom.client.consumer.membership import (
    ALLOWED_PREVIOUS,
    GroupMembership,
    InvalidTransitionError,
    MembershipSettings,
    MemberState,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RefreshMetadata,
    RequestKind,
    SendRequest,
)
from strom.client.errors import (
    CommitFailedError,
    FencedInstanceIdError,
    GroupError,
    KafkaConnectionError,
    MaxPollIntervalExceededError,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.find_coordinator import FindCoordinatorResponse
from strom.protocol.messages.heartbeat import HeartbeatResponse
from strom.protocol.messages.join_group import JoinGroupResponse
from strom.protocol.messages.offset_commit import OffsetCommitResponse
from strom.protocol.messages.sync_group import SyncGroupResponse

GROUP = "g"
SESSION_MS = 10_000
HEARTBEAT_MS = 1_000
MAX_POLL_MS = 60_000
BACKOFF_MS = 100


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


class Harness:
    """A membership, its clock, and helpers that answer its requests the way a coordinator would."""

    def __init__(self, *, assignors: tuple[str, ...] = ("range",), instance_id: str | None = None) -> None:
        self.clock = ManualClock()
        self.member = GroupMembership(
            MembershipSettings(
                group_id=GROUP,
                group_instance_id=instance_id,
                session_timeout_ms=SESSION_MS,
                heartbeat_interval_ms=HEARTBEAT_MS,
                max_poll_interval_ms=MAX_POLL_MS,
                retry_backoff_ms=BACKOFF_MS,
            ),
            [get_assignor(name) for name in assignors],
            self.clock.monotonic_ms(),
        )
        self.sent: list[SendRequest] = []
        # Requests sent that no test step has looked at yet.
        self.unclaimed: list[SendRequest] = []
        self.refreshes: list[RefreshMetadata] = []

    @property
    def now(self) -> int:
        return self.clock.monotonic_ms()

    def drain(self) -> list[SendRequest]:
        new: list[SendRequest] = []
        for output in self.member.take_outputs():
            if isinstance(output, SendRequest):
                new.append(output)
            else:
                self.refreshes.append(output)
        self.sent.extend(new)
        self.unclaimed.extend(new)
        return new

    def tick(self, advance_ms: int = 0) -> list[SendRequest]:
        self.clock.advance(advance_ms)
        self.member.tick(self.now)
        return self.drain()

    def only(self, kind: RequestKind, requests: list[SendRequest] | None = None) -> SendRequest:
        if requests is None:
            self.drain()
            requests = self.unclaimed
        matching = [request for request in requests if request.kind is kind]
        assert len(matching) == 1, f"expected one {kind.name}, got {requests}"
        self.unclaimed = [request for request in self.unclaimed if request is not matching[0]]
        return matching[0]

    def answer(self, request: SendRequest, response: Any) -> list[SendRequest]:
        self.member.on_response(request.request_id, response, self.now)
        return self.drain()

    def poll(self) -> list[Any]:
        events = self.member.begin_poll(self.now)
        self.member.callbacks_done(self.now)
        return list(events)

    # -- scripted coordinator answers ----------------------------------------------------------

    def find_coordinator(self) -> None:
        find = self.only(RequestKind.FIND_COORDINATOR, self.tick())
        assert find.coordinator is None
        self.answer(
            find,
            FindCoordinatorResponse(
                coordinators=[FindCoordinatorResponse.Coordinator(key=GROUP, node_id=7, host="h", port=9092)]
            ),
        )
        assert self.member.coordinator is not None and self.member.coordinator.node_id == 7

    def join_response(
        self,
        *,
        member_id: str,
        generation: int,
        leader: str,
        members: list[tuple[str, Subscription]] | None = None,
    ) -> JoinGroupResponse:
        return JoinGroupResponse(
            error_code=0,
            generation_id=generation,
            protocol_type="consumer",
            protocol_name=self.member.protocol_name or next(iter(self.member.assignors)),
            leader=leader,
            member_id=member_id,
            members=[
                JoinGroupResponse.JoinGroupResponseMember(
                    member_id=mid, metadata=encode_subscription(subscription)
                )
                for mid, subscription in (members or [])
            ],
        )

    def join_as_follower(
        self,
        partitions: list[TopicPartition],
        *,
        generation: int = 1,
        member_id: str = "m-1",
        join: SendRequest | None = None,
    ) -> None:
        """From 'subscribed, nothing sent' (or a prepared rejoin) to STABLE with ``partitions`` pending."""
        if self.member.coordinator is None:
            self.find_coordinator()
        if join is None:
            join = self.only(RequestKind.JOIN_GROUP)
        sync = self.only(
            RequestKind.SYNC_GROUP,
            self.answer(join, self.join_response(member_id=member_id, generation=generation, leader="other")),
        )
        assert sync.request.assignments == []
        assert sync.request.generation_id == generation
        self.answer(
            sync,
            SyncGroupResponse(
                protocol_type="consumer",
                assignment=encode_assignment(Assignment([(p.topic, p.partition) for p in partitions])),
            ),
        )
        assert self.member.state is MemberState.STABLE

    def start(self, topics: list[str], partitions: list[TopicPartition]) -> None:
        """Subscribe, join as a follower, apply the assignment in a poll."""
        self.member.subscribe(topics)
        assert self.poll() == []
        self.join_as_follower(partitions)
        events = self.poll()
        assert events == [PartitionsAssigned(sorted(partitions))]


# -- the state table ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "target"), list(itertools.product(MemberState, MemberState)), ids=lambda state: state.name
)
def test_state_table_allows_exactly_the_listed_moves(source: MemberState, target: MemberState) -> None:
    member = Harness().member
    member.state = source
    if source in ALLOWED_PREVIOUS[target]:
        member._transition_to(target)
        assert member.state is target
    else:
        with pytest.raises(InvalidTransitionError, match=f"{source.name} -> {target.name}"):
            member._transition_to(target)


def test_fatal_is_final() -> None:
    assert all(MemberState.FATAL not in previous for previous in ALLOWED_PREVIOUS.values())


# -- joining -----------------------------------------------------------------------------------


def test_nothing_is_sent_without_a_subscription() -> None:
    harness = Harness()
    assert harness.tick(100_000) == []
    assert harness.poll() == []
    assert harness.tick() == []


def test_find_coordinator_then_join_after_the_poll_prepares_it() -> None:
    harness = Harness()
    harness.member.subscribe(["t"])
    find = harness.only(RequestKind.FIND_COORDINATOR, harness.tick())
    assert find.request.coordinator_keys == [GROUP]
    # The coordinator is known, but a join waits for the application's poll.
    harness.answer(
        find,
        FindCoordinatorResponse(
            coordinators=[FindCoordinatorResponse.Coordinator(key=GROUP, node_id=3, host="h", port=1)]
        ),
    )
    assert harness.drain() == []
    assert harness.poll() == []
    join = harness.only(RequestKind.JOIN_GROUP)
    assert join.coordinator is not None and join.coordinator.node_id == 3
    request = join.request
    assert request.member_id == "" and request.group_id == GROUP
    assert request.session_timeout_ms == SESSION_MS and request.rebalance_timeout_ms == MAX_POLL_MS
    assert [protocol.name for protocol in request.protocols] == ["range"]
    assert decode_subscription(request.protocols[0].metadata).topics == ["t"]
    assert join.timeout_ms > MAX_POLL_MS  # the coordinator may hold a join for the rebalance timeout


def test_find_coordinator_errors_retry_after_backoff() -> None:
    harness = Harness()
    harness.member.subscribe(["t"])
    find = harness.only(RequestKind.FIND_COORDINATOR, harness.tick())
    harness.answer(find, FindCoordinatorResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE))
    assert harness.tick(BACKOFF_MS - 1) == []
    assert harness.only(RequestKind.FIND_COORDINATOR, harness.tick(1))


def test_find_coordinator_old_version_answer_is_read() -> None:
    harness = Harness()
    harness.member.subscribe(["t"])
    find = harness.only(RequestKind.FIND_COORDINATOR, harness.tick())
    harness.answer(find, FindCoordinatorResponse(node_id=4, host="old", port=2))
    assert harness.member.coordinator is not None and harness.member.coordinator.host == "old"


def test_member_id_required_retries_the_join_with_the_given_id() -> None:
    harness = Harness()
    harness.member.subscribe(["t"])
    harness.find_coordinator()
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    second = harness.only(
        RequestKind.JOIN_GROUP,
        harness.answer(join, JoinGroupResponse(error_code=ErrorCode.MEMBER_ID_REQUIRED, member_id="m-given")),
    )
    assert second.request.member_id == "m-given"
    assert harness.member.state is MemberState.PREPARING


def test_follower_syncs_with_no_assignments_and_applies_its_share_at_the_next_poll() -> None:
    harness = Harness()
    harness.member.subscribe(["t"])
    harness.poll()
    harness.join_as_follower([tp("t", 1)])
    # Not applied until the application polls: callbacks run on its thread.
    assert harness.member.owned == set()
    assert harness.poll() == [PartitionsAssigned([tp("t", 1)])]
    assert harness.member.owned == {tp("t", 1)}
    assert harness.member.member_id == "m-1" and harness.member.generation_id == 1


def test_leader_fetches_metadata_of_every_member_topic_then_assigns() -> None:
    harness = Harness()
    harness.member.subscribe(["a"])
    harness.find_coordinator()
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    response = harness.join_response(
        member_id="m-1",
        generation=3,
        leader="m-1",
        members=[("m-1", Subscription(topics=["a"])), ("m-2", Subscription(topics=["a", "b"]))],
    )
    assert harness.answer(join, response) == []
    assert harness.member.state is MemberState.ASSIGNING
    assert harness.refreshes == [RefreshMetadata(frozenset({"a", "b"}))]
    harness.member.metadata_updated({"a": 2, "b": 1, "unrelated": 5}, harness.now)
    sync = harness.only(RequestKind.SYNC_GROUP)
    assignments = {
        entry.member_id: decode_assignment(entry.assignment).partitions for entry in sync.request.assignments
    }
    assert assignments == {"m-1": [("a", 0)], "m-2": [("a", 1), ("b", 0)]}
    assert harness.member.assigned_topic_counts == {"a": 2, "b": 1}


def test_leader_assignment_error_is_reported_to_poll_and_the_member_rejoins() -> None:
    harness = Harness()
    harness.member.subscribe(["a"])
    harness.find_coordinator()
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    bad = JoinGroupResponse(
        generation_id=1,
        protocol_name="range",
        leader="m-1",
        member_id="m-1",
        members=[JoinGroupResponse.JoinGroupResponseMember(member_id="m-1", metadata=b"\x00")],
    )
    harness.answer(join, bad)
    with pytest.raises(GroupError, match="cannot assign"):
        harness.member.begin_poll(harness.now)
    assert harness.member.state is MemberState.PREPARING
    assert harness.only(RequestKind.JOIN_GROUP, harness.tick(BACKOFF_MS))


def test_join_coordinator_load_in_progress_retries_after_backoff() -> None:
    harness = Harness()
    harness.member.subscribe(["t"])
    harness.find_coordinator()
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    assert harness.answer(join, JoinGroupResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)) == []
    assert harness.tick(BACKOFF_MS - 1) == []
    assert harness.only(RequestKind.JOIN_GROUP, harness.tick(1))


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
def test_join_not_coordinator_finds_the_coordinator_again_then_rejoins(code: ErrorCode) -> None:
    harness = Harness()
    harness.member.subscribe(["t"])
    harness.find_coordinator()
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    harness.answer(join, JoinGroupResponse(error_code=code))
    assert harness.member.coordinator is None
    harness.clock.advance(BACKOFF_MS)
    harness.find_coordinator()
    assert harness.only(RequestKind.JOIN_GROUP)


def test_join_unknown_member_id_rejoins_as_new() -> None:
    harness = Harness()
    harness.member.subscribe(["t"])
    harness.find_coordinator()
    harness.member.member_id = "stale"
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    assert join.request.member_id == "stale"
    again = harness.only(
        RequestKind.JOIN_GROUP,
        harness.answer(join, JoinGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID)),
    )
    assert again.request.member_id == ""


def test_join_refused_for_good_is_fatal() -> None:
    harness = Harness()
    harness.member.subscribe(["t"])
    harness.find_coordinator()
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    harness.answer(join, JoinGroupResponse(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
    assert harness.member.state is MemberState.FATAL
    for _ in range(2):
        with pytest.raises(GroupError, match="INCONSISTENT_GROUP_PROTOCOL"):
            harness.member.begin_poll(harness.now)
    assert harness.tick(SESSION_MS) == []


def test_sync_rebalance_in_progress_rejoins_keeping_the_member_id() -> None:
    harness = Harness()
    harness.member.subscribe(["t"])
    harness.find_coordinator()
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    sync = harness.only(
        RequestKind.SYNC_GROUP,
        harness.answer(join, harness.join_response(member_id="m-1", generation=1, leader="x")),
    )
    again = harness.only(
        RequestKind.JOIN_GROUP,
        harness.answer(sync, SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)),
    )
    assert again.request.member_id == "m-1"


def test_answers_to_requests_no_longer_awaited_are_dropped() -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    heartbeat = harness.only(RequestKind.HEARTBEAT, harness.tick(HEARTBEAT_MS))
    harness.member.on_response(heartbeat.request_id, HeartbeatResponse(), harness.now)
    # The same answer twice, or an answer to a request never sent, changes nothing.
    harness.member.on_response(
        heartbeat.request_id, HeartbeatResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID), harness.now
    )
    harness.member.on_response(9_999, HeartbeatResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID), harness.now)
    assert harness.member.state is MemberState.STABLE and harness.member.member_id == "m-1"


# -- heartbeats --------------------------------------------------------------------------------


def test_heartbeats_every_interval_without_polls_and_one_at_a_time() -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    assert harness.tick(HEARTBEAT_MS - 1) == []
    heartbeat = harness.only(RequestKind.HEARTBEAT, harness.tick(1))
    assert (heartbeat.request.generation_id, heartbeat.request.member_id) == (1, "m-1")
    # While one is unanswered no second goes out.
    assert harness.tick(HEARTBEAT_MS) == []
    harness.answer(heartbeat, HeartbeatResponse())  # overdue: the next goes out at once
    assert harness.only(RequestKind.HEARTBEAT)


def test_no_heartbeat_answer_within_the_session_means_the_coordinator_is_gone() -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    harness.only(RequestKind.HEARTBEAT, harness.tick(HEARTBEAT_MS))
    harness.tick(SESSION_MS)
    assert harness.member.coordinator is None
    assert harness.member.state is MemberState.STABLE  # still owns its partitions
    assert harness.only(RequestKind.FIND_COORDINATOR, harness.tick(BACKOFF_MS))


def test_heartbeat_rebalance_in_progress_rejoins_at_the_next_poll_eager_revokes_everything() -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0), tp("t", 1)])
    heartbeat = harness.only(RequestKind.HEARTBEAT, harness.tick(HEARTBEAT_MS))
    assert harness.answer(heartbeat, HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)) == []
    assert harness.member.rejoin_needed
    # Heartbeats continue until the application polls.
    harness.only(RequestKind.HEARTBEAT, harness.tick(HEARTBEAT_MS))
    events = harness.member.begin_poll(harness.now)
    assert events == [PartitionsRevoked([tp("t", 0), tp("t", 1)])]
    # Nothing goes out before the revocation callbacks (and their commit) are done.
    assert harness.tick() == []
    harness.member.callbacks_done(harness.now)
    join = harness.only(RequestKind.JOIN_GROUP)
    assert join.request.member_id == "m-1"
    assert decode_subscription(join.request.protocols[0].metadata).owned_partitions == []


@pytest.mark.parametrize("code", [ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID])
def test_heartbeat_generation_errors_lose_the_partitions_and_rejoin_as_new(code: ErrorCode) -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    heartbeat = harness.only(RequestKind.HEARTBEAT, harness.tick(HEARTBEAT_MS))
    harness.answer(heartbeat, HeartbeatResponse(error_code=code))
    assert harness.member.state is MemberState.UNJOINED
    assert harness.member.member_id == "" and harness.member.generation_id == -1
    assert harness.tick(HEARTBEAT_MS) == []  # no heartbeats outside a generation
    assert harness.poll() == [PartitionsLost([tp("t", 0)])]
    join = harness.only(RequestKind.JOIN_GROUP)
    assert join.request.member_id == ""


def test_heartbeat_fenced_instance_is_fatal_and_surfaces_at_every_poll() -> None:
    harness = Harness(instance_id="i-1")
    harness.start(["t"], [tp("t", 0)])
    heartbeat = harness.only(RequestKind.HEARTBEAT, harness.tick(HEARTBEAT_MS))
    assert heartbeat.request.group_instance_id == "i-1"
    harness.answer(heartbeat, HeartbeatResponse(error_code=ErrorCode.FENCED_INSTANCE_ID))
    assert harness.member.state is MemberState.FATAL
    with pytest.raises(FencedInstanceIdError, match="i-1"):
        harness.member.begin_poll(harness.now)
    with pytest.raises(FencedInstanceIdError):
        harness.member.begin_poll(harness.now)
    assert harness.tick(HEARTBEAT_MS) == []


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
def test_heartbeat_not_coordinator_rediscovers_and_keeps_heartbeating_the_new_one(code: ErrorCode) -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    heartbeat = harness.only(RequestKind.HEARTBEAT, harness.tick(HEARTBEAT_MS))
    harness.answer(heartbeat, HeartbeatResponse(error_code=code))
    assert harness.member.coordinator is None
    harness.clock.advance(BACKOFF_MS)
    harness.find_coordinator()
    heartbeat = harness.only(RequestKind.HEARTBEAT)
    assert heartbeat.request.member_id == "m-1"
    assert harness.member.owned == {tp("t", 0)}


def test_a_broken_connection_rediscovers_the_coordinator() -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    heartbeat = harness.only(RequestKind.HEARTBEAT, harness.tick(HEARTBEAT_MS))
    harness.member.on_request_failed(heartbeat.request_id, KafkaConnectionError("gone"), harness.now)
    assert harness.member.coordinator is None
    assert harness.only(RequestKind.FIND_COORDINATOR, harness.tick(BACKOFF_MS))


def test_a_join_lost_with_its_connection_is_sent_again_to_the_new_coordinator() -> None:
    harness = Harness()
    harness.member.subscribe(["t"])
    harness.find_coordinator()
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    harness.member.on_request_failed(join.request_id, KafkaConnectionError("gone"), harness.now)
    harness.clock.advance(BACKOFF_MS)
    harness.find_coordinator()
    assert harness.only(RequestKind.JOIN_GROUP)


def test_heartbeat_coordinator_load_in_progress_retries_after_backoff() -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    heartbeat = harness.only(RequestKind.HEARTBEAT, harness.tick(HEARTBEAT_MS))
    harness.answer(heartbeat, HeartbeatResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
    assert harness.member.state is MemberState.STABLE
    assert harness.only(RequestKind.HEARTBEAT, harness.tick(BACKOFF_MS))


# -- cooperative -------------------------------------------------------------------------------


def test_cooperative_revokes_only_what_moved_then_rejoins() -> None:
    harness = Harness(assignors=("cooperative-sticky",))
    harness.start(["t"], [tp("t", 0), tp("t", 1), tp("t", 2)])
    heartbeat = harness.only(RequestKind.HEARTBEAT, harness.tick(HEARTBEAT_MS))
    harness.answer(heartbeat, HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
    # Cooperative: nothing is revoked before the join; the join reports what it owns.
    assert harness.poll() == []
    join = harness.only(RequestKind.JOIN_GROUP)
    subscription = decode_subscription(join.request.protocols[0].metadata)
    assert subscription.owned_partitions == [("t", 0), ("t", 1), ("t", 2)]
    assert subscription.generation_id == 1
    # First rebalance: partition 2 moves away (left out of both assignments).
    harness.join_as_follower([tp("t", 0), tp("t", 1)], generation=2, join=join)
    assert harness.poll() == [PartitionsRevoked([tp("t", 2)]), PartitionsAssigned([])]
    # ...and the member rejoins at once to let the partition be handed over.
    join = harness.only(RequestKind.JOIN_GROUP)
    assert decode_subscription(join.request.protocols[0].metadata).owned_partitions == [("t", 0), ("t", 1)]
    harness.join_as_follower([tp("t", 0), tp("t", 1)], generation=3, join=join)
    # Second rebalance: what stayed was never revoked.
    assert harness.poll() == [PartitionsAssigned([])]
    assert harness.member.owned == {tp("t", 0), tp("t", 1)}
    assert harness.tick() == []


def test_cooperative_gains_partitions_without_revoking_any() -> None:
    harness = Harness(assignors=("cooperative-sticky",))
    harness.start(["t"], [tp("t", 0)])
    harness.member._request_rejoin("test")
    harness.poll()
    harness.join_as_follower([tp("t", 0), tp("t", 1)], generation=2)
    assert harness.poll() == [PartitionsAssigned([tp("t", 1)])]


def test_cooperative_subscription_change_revokes_only_the_dropped_topics_before_joining() -> None:
    harness = Harness(assignors=("cooperative-sticky",))
    harness.start(["a", "b"], [tp("a", 0), tp("b", 0)])
    harness.member.subscribe(["a"])
    events = harness.member.begin_poll(harness.now)
    assert events == [PartitionsRevoked([tp("b", 0)])]
    harness.member.callbacks_done(harness.now)
    join = harness.only(RequestKind.JOIN_GROUP)
    assert decode_subscription(join.request.protocols[0].metadata).topics == ["a"]


def test_protocol_is_cooperative_only_when_every_assignor_supports_it() -> None:
    assert Harness(assignors=("cooperative-sticky",)).member.rebalance_protocol.name == "COOPERATIVE"
    assert Harness(assignors=("range", "cooperative-sticky")).member.rebalance_protocol.name == "EAGER"


def test_join_offers_every_assignor_in_preference_order() -> None:
    harness = Harness(assignors=("range", "cooperative-sticky"))
    harness.member.subscribe(["t"])
    harness.find_coordinator()
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    assert [protocol.name for protocol in join.request.protocols] == ["range", "cooperative-sticky"]


# -- rejoin triggers ---------------------------------------------------------------------------


def test_subscription_change_rejoins_and_same_subscription_does_not() -> None:
    harness = Harness()
    harness.start(["a"], [tp("a", 0)])
    harness.member.subscribe(["a"])
    assert harness.poll() == []
    assert harness.tick() == []
    harness.member.subscribe(["a", "b"])
    assert harness.poll() == [PartitionsRevoked([tp("a", 0)])]
    join = harness.only(RequestKind.JOIN_GROUP)
    assert decode_subscription(join.request.protocols[0].metadata).topics == ["a", "b"]


def test_pattern_picks_up_a_new_topic_and_rejoins() -> None:
    harness = Harness()
    harness.member.metadata_updated({"orders-1": 1, "other": 1}, harness.now)
    harness.member.subscribe_pattern(re.compile(r"orders-.*"))
    assert harness.member.subscribed_topics == {"orders-1"}
    assert harness.member.metadata_topics() is None
    harness.poll()
    harness.join_as_follower([tp("orders-1", 0)])
    harness.poll()
    harness.member.metadata_updated({"orders-1": 1, "other": 1, "__consumer_offsets": 50}, harness.now)
    assert not harness.member.rejoin_needed
    harness.member.metadata_updated({"orders-1": 1, "orders-2": 3, "other": 1}, harness.now)
    assert harness.member.rejoin_needed
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    assert decode_subscription(join.request.protocols[0].metadata).topics == ["orders-1", "orders-2"]


def _leader_stable(harness: Harness) -> None:
    harness.member.subscribe(["a"])
    harness.find_coordinator()
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    harness.answer(
        join,
        harness.join_response(
            member_id="m-1",
            generation=1,
            leader="m-1",
            members=[("m-1", Subscription(topics=["a"])), ("m-2", Subscription(topics=["b"]))],
        ),
    )
    harness.member.metadata_updated({"a": 2}, harness.now)
    sync = harness.only(RequestKind.SYNC_GROUP)
    harness.answer(sync, SyncGroupResponse(assignment=encode_assignment(Assignment([("a", 0), ("a", 1)]))))
    harness.poll()
    assert harness.member.metadata_topics() == frozenset({"a", "b"})


def test_leader_rejoins_when_a_group_topic_changes_partition_count_or_appears() -> None:
    harness = Harness()
    _leader_stable(harness)
    harness.member.metadata_updated({"a": 2, "x": 9}, harness.now)
    assert not harness.member.rejoin_needed
    harness.member.metadata_updated({"a": 2, "b": 1}, harness.now)  # m-2's topic was created
    assert harness.member.rejoin_needed
    harness = Harness()
    _leader_stable(harness)
    harness.member.metadata_updated({"a": 4}, harness.now)
    assert harness.member.rejoin_needed


def test_a_follower_does_not_rejoin_on_partition_count_changes() -> None:
    harness = Harness()
    harness.start(["a"], [tp("a", 0)])
    harness.member.metadata_updated({"a": 1}, harness.now)
    harness.member.metadata_updated({"a": 8}, harness.now)
    assert not harness.member.rejoin_needed


# -- max.poll.interval.ms ----------------------------------------------------------------------


def test_poll_interval_exceeded_leaves_raises_once_then_rejoins_with_partitions_lost() -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    for _ in range(MAX_POLL_MS // HEARTBEAT_MS):
        for request in harness.tick(HEARTBEAT_MS):
            harness.answer(request, HeartbeatResponse())
    assert harness.member.state is MemberState.STABLE  # heartbeats alone keep it in the group
    leave = harness.only(RequestKind.LEAVE_GROUP, harness.tick(1))
    assert leave.request.members[0].member_id == "m-1"
    assert harness.member.state.name == "UNJOINED"
    with pytest.raises(MaxPollIntervalExceededError, match=r"max\.poll\.interval\.ms"):
        harness.member.begin_poll(harness.now)
    assert harness.tick() == []  # the poll that raised does not rejoin
    assert harness.poll() == [PartitionsLost([tp("t", 0)])]
    assert harness.only(RequestKind.JOIN_GROUP).request.member_id == ""


def test_static_member_poll_timeout_sends_no_leave_group() -> None:
    harness = Harness(instance_id="i-1")
    harness.start(["t"], [tp("t", 0)])
    harness.member.last_poll_ms = harness.now - MAX_POLL_MS - 1
    assert [request.kind for request in harness.tick()] == []
    with pytest.raises(MaxPollIntervalExceededError):
        harness.member.begin_poll(harness.now)


# -- static membership, leaving ----------------------------------------------------------------


def test_static_member_joins_with_its_instance_id_and_never_sends_leave_group() -> None:
    harness = Harness(instance_id="i-1")
    harness.member.subscribe(["t"])
    harness.find_coordinator()
    harness.poll()
    join = harness.only(RequestKind.JOIN_GROUP)
    assert join.request.group_instance_id == "i-1"
    harness.sent.clear()
    harness.join_as_follower([tp("t", 0)], join=join)
    assert harness.sent[-1].request.group_instance_id == "i-1"  # SyncGroup too
    harness.poll()
    harness.member.leave_group("closing")
    assert harness.drain() == []
    assert harness.member.state is MemberState.UNJOINED


def test_dynamic_member_leaves_with_leave_group_on_close() -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    harness.member.leave_group("closing")
    leave = harness.only(RequestKind.LEAVE_GROUP)
    assert leave.request.group_id == GROUP
    assert (leave.request.members[0].member_id, leave.request.members[0].reason) == ("m-1", "closing")
    assert harness.tick(HEARTBEAT_MS * 5) == []


def test_unsubscribe_leaves_and_stops_joining() -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    harness.member.unsubscribe()
    assert harness.only(RequestKind.LEAVE_GROUP)
    assert harness.poll() == []
    assert harness.tick(HEARTBEAT_MS * 5) == []


# -- commits -----------------------------------------------------------------------------------


def _commit_response(code: ErrorCode) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(
                name="t",
                partitions=[
                    OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=0, error_code=code)
                ],
            )
        ]
    )


def test_commit_request_carries_the_generation() -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    request = harness.member.commit_request({tp("t", 0): 42, tp("t", 1): 7})
    assert (request.generation_id_or_member_epoch, request.member_id) == (1, "m-1")
    assert [(p.partition_index, p.committed_offset) for p in request.topics[0].partitions] == [
        (0, 42),
        (1, 7),
    ]
    errors = harness.member.on_commit_response(_commit_response(ErrorCode.NONE), harness.now)
    assert harness.member.commit_refused(errors.values()) is None


def test_commit_without_a_generation_fails_when_subscribed_and_not_when_assigned_by_hand() -> None:
    harness = Harness()
    harness.member.subscribe(["t"])
    with pytest.raises(CommitFailedError):
        harness.member.commit_request({tp("t", 0): 1})
    manual = Harness()
    assert manual.member.commit_request({tp("t", 0): 1}).generation_id_or_member_epoch == -1


@pytest.mark.parametrize("code", [ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID])
def test_commit_generation_errors_fail_the_commit_and_lose_the_partitions(code: ErrorCode) -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    errors = harness.member.on_commit_response(_commit_response(code), harness.now)
    assert isinstance(harness.member.commit_refused(errors.values()), CommitFailedError)
    assert harness.member.state is MemberState.UNJOINED
    assert harness.poll() == [PartitionsLost([tp("t", 0)])]


def test_commit_rebalance_in_progress_fails_the_commit_and_rejoins() -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    errors = harness.member.on_commit_response(_commit_response(ErrorCode.REBALANCE_IN_PROGRESS), harness.now)
    assert isinstance(harness.member.commit_refused(errors.values()), CommitFailedError)
    assert harness.member.rejoin_needed


def test_commit_not_coordinator_rediscovers() -> None:
    harness = Harness()
    harness.start(["t"], [tp("t", 0)])
    errors = harness.member.on_commit_response(_commit_response(ErrorCode.NOT_COORDINATOR), harness.now)
    assert harness.member.coordinator is None
    error = harness.member.commit_refused(errors.values())
    assert error is not None and error.retriable


def test_a_commit_alone_looks_for_the_coordinator() -> None:
    harness = Harness()
    assert harness.tick() == []
    harness.member.need_coordinator()
    assert harness.only(RequestKind.FIND_COORDINATOR, harness.tick())
