"""The consumer group protocol's membership (KIP-848) driven by a scripted coordinator and a manual
clock: heartbeat requests as built, reconciliation of assignments, fencing, leaving, commits."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from strom.base.clock import ManualClock
from strom.client.cluster import TopicPartition
from strom.client.config import ConsumerConfig
from strom.client.consumer.consumer_membership import (
    ALLOWED_PREVIOUS,
    ConsumerGroupMembership,
    ConsumerMembershipSettings,
    ConsumerMemberState,
    InvalidTransitionError,
    StaleMemberEpochError,
)
from strom.client.consumer.membership import (
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RefreshMetadata,
    RequestKind,
    SendRequest,
)
from strom.client.errors import (
    CommitFailedError,
    ConfigError,
    FencedInstanceIdError,
    GroupError,
    KafkaConnectionError,
    MaxPollIntervalExceededError,
    UnsupportedVersionError,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from strom.protocol.messages.find_coordinator import FindCoordinatorResponse
from strom.protocol.messages.offset_commit import OffsetCommitResponse

GROUP = "g"
MAX_POLL_MS = 60_000
BACKOFF_MS = 100
INTERVAL_MS = 500
TOPIC_IDS = {name: uuid.UUID(int=index + 1) for index, name in enumerate(["a", "b", "c", "logs-1", "logs-2"])}


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def assignment(**topics: list[int]) -> ConsumerGroupHeartbeatResponse.Assignment:
    return ConsumerGroupHeartbeatResponse.Assignment(
        topic_partitions=[
            ConsumerGroupHeartbeatResponse.TopicPartitions(topic_id=TOPIC_IDS[name], partitions=partitions)
            for name, partitions in topics.items()
        ]
    )


def owned_in(request: ConsumerGroupHeartbeatRequest) -> set[TopicPartition] | None:
    if request.topic_partitions is None:
        return None
    names = {topic_id: name for name, topic_id in TOPIC_IDS.items()}
    return {
        tp(names[entry.topic_id], partition)
        for entry in request.topic_partitions
        for partition in entry.partitions
    }


class Harness:
    """A membership, its clock, and a coordinator that answers its heartbeats as scripted."""

    def __init__(
        self,
        *,
        instance_id: str | None = None,
        rack: str | None = None,
        assignor: str | None = None,
        version: int = 1,
    ) -> None:
        self.clock = ManualClock()
        self.version = version
        self.member = ConsumerGroupMembership(
            ConsumerMembershipSettings(
                group_id=GROUP,
                group_instance_id=instance_id,
                max_poll_interval_ms=MAX_POLL_MS,
                retry_backoff_ms=BACKOFF_MS,
                client_rack=rack,
                server_assignor=assignor,
            ),
            self.clock.monotonic_ms(),
        )
        self.unclaimed: list[SendRequest] = []
        self.refreshes: list[RefreshMetadata] = []
        self.epoch = 0

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
        self.unclaimed.extend(new)
        return new

    def tick(self, advance_ms: int = 0) -> list[SendRequest]:
        self.clock.advance(advance_ms)
        self.member.tick(self.now)
        return self.drain()

    def take(self, kind: RequestKind) -> SendRequest:
        self.drain()
        matching = [request for request in self.unclaimed if request.kind is kind]
        assert len(matching) == 1, f"expected one {kind.name}, got {self.unclaimed}"
        self.unclaimed.remove(matching[0])
        return matching[0]

    def nothing_sent(self) -> bool:
        self.drain()
        return not self.unclaimed

    def heartbeat(self) -> tuple[SendRequest, ConsumerGroupHeartbeatRequest]:
        """The heartbeat sent, fitted to the coordinator's version as the shell does."""
        send = self.take(RequestKind.CONSUMER_GROUP_HEARTBEAT)
        return send, self.member.fit_heartbeat(send.request, self.version)

    def answer(self, send: SendRequest, response: Any) -> None:
        self.member.on_response(send.request_id, response, self.now)
        self.drain()

    def ok(
        self,
        send: SendRequest,
        *,
        epoch: int | None = None,
        assigned: ConsumerGroupHeartbeatResponse.Assignment | None = None,
        member_id: str | None = None,
    ) -> None:
        self.epoch = self.epoch + 1 if epoch is None else epoch
        self.answer(
            send,
            ConsumerGroupHeartbeatResponse(
                member_id=member_id,
                member_epoch=self.epoch,
                heartbeat_interval_ms=INTERVAL_MS,
                assignment=assigned,
            ),
        )

    def error(self, send: SendRequest, code: ErrorCode, message: str | None = None) -> None:
        self.answer(send, ConsumerGroupHeartbeatResponse(error_code=code, error_message=message))

    def poll(self) -> list[Any]:
        events = self.member.begin_poll(self.now)
        self.member.callbacks_done(self.now)
        self.drain()
        return list(events)

    def metadata(self, *names: str) -> None:
        self.member.metadata_updated(
            dict.fromkeys(names, 4), self.now, {name: TOPIC_IDS[name] for name in names}
        )
        self.tick()  # the shell wakes its loop after feeding a change

    def find_coordinator(self) -> None:
        find = self.take(RequestKind.FIND_COORDINATOR)
        self.answer(
            find,
            FindCoordinatorResponse(
                coordinators=[FindCoordinatorResponse.Coordinator(key=GROUP, node_id=3, host="h", port=9092)]
            ),
        )

    def join(self, topics: list[str]) -> ConsumerGroupHeartbeatRequest:
        """Subscribe, poll, find the coordinator; returns the join heartbeat (unanswered, kept in
        ``join_send``)."""
        self.metadata(*topics)
        self.member.subscribe(topics)
        assert self.poll() == []
        self.find_coordinator()
        self.join_send, request = self.heartbeat()
        return request

    def start(self, topics: list[str], **assigned: list[int]) -> None:
        """A member of the group owning ``assigned``, acknowledged."""
        self.join(topics)
        self.ok(self.join_send, assigned=assignment(**assigned))
        events = self.poll()
        expected = sorted(tp(name, p) for name, partitions in assigned.items() for p in partitions)
        assert events == [PartitionsAssigned(expected)]
        send, request = self.heartbeat()
        assert owned_in(request) == set(expected)
        self.ok(send, epoch=self.epoch)


# -- the state table ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", list(ConsumerMemberState))
@pytest.mark.parametrize("source", list(ConsumerMemberState))
def test_state_table_allows_exactly_the_listed_moves(
    source: ConsumerMemberState, target: ConsumerMemberState
) -> None:
    member = Harness().member
    member.state = source
    if source in ALLOWED_PREVIOUS[target]:
        member._transition_to(target)
        assert member.state is target
    else:
        with pytest.raises(InvalidTransitionError, match=f"{source.name} -> {target.name}"):
            member._transition_to(target)


# -- joining -----------------------------------------------------------------------------------


def test_nothing_is_sent_before_subscribe_and_poll() -> None:
    harness = Harness()
    assert harness.tick(10_000) == []
    harness.member.subscribe(["a"])
    assert harness.tick(10_000) == []  # joining waits for the first poll, as in the classic path
    harness.poll()
    assert [send.kind for send in harness.unclaimed] == [RequestKind.FIND_COORDINATOR]


def test_join_is_a_complete_heartbeat_with_epoch_zero_and_a_generated_member_id() -> None:
    harness = Harness(instance_id="i-1", rack="r1", assignor="range")
    request = harness.join(["b", "a"])
    assert request.member_epoch == 0
    assert len(request.member_id) == 22  # a UUID in Kafka's base64 text form, chosen by the member (v1)
    assert request.instance_id == "i-1" and request.rack_id == "r1"
    assert request.rebalance_timeout_ms == MAX_POLL_MS
    assert request.subscribed_topic_names == ["a", "b"]
    assert request.subscribed_topic_regex == ""  # no regex (clears one a rejoining member had)
    assert request.server_assignor == "range"
    assert request.topic_partitions == []
    assert harness.join_send.coordinator is not None and harness.join_send.coordinator.node_id == 3
    member_id = request.member_id
    harness.ok(harness.join_send, epoch=5)
    assert harness.member.state is ConsumerMemberState.STABLE
    assert harness.member.member_epoch == 5 and harness.member.member_id == member_id


def test_v0_joins_without_a_member_id_and_takes_the_coordinators() -> None:
    harness = Harness(version=0)
    request = harness.join(["a"])
    assert request.member_id == ""
    harness.ok(harness.join_send, member_id="from-coordinator")
    assert harness.member.member_id == "from-coordinator"
    harness.tick(INTERVAL_MS)
    _, request = harness.heartbeat()
    assert request.member_id == "from-coordinator" and request.member_epoch == 1


def test_heartbeats_go_at_the_interval_the_coordinator_gives_one_at_a_time() -> None:
    harness = Harness()
    harness.join(["a"])
    harness.ok(harness.join_send)
    assert harness.tick(INTERVAL_MS - 1) == []
    send, request = harness.heartbeat() if harness.tick(1) else (None, None)
    assert send is not None and request is not None
    assert harness.tick(10 * INTERVAL_MS) == []  # the last one is still unanswered
    harness.ok(send, epoch=harness.epoch)
    assert harness.tick(INTERVAL_MS) != []


def test_a_steady_heartbeat_carries_only_what_changed() -> None:
    harness = Harness(instance_id="i-1", rack="r1", assignor="uniform")
    harness.start(["a"], a=[0, 1])
    harness.tick(INTERVAL_MS)
    _, request = harness.heartbeat()
    assert request.member_epoch == harness.epoch and request.member_id
    assert (request.instance_id, request.rack_id, request.server_assignor) == (None, None, None)
    assert request.rebalance_timeout_ms == -1
    assert request.subscribed_topic_names is None and request.subscribed_topic_regex is None
    assert request.topic_partitions is None


def test_a_subscription_change_is_sent_at_once_and_only_then() -> None:
    harness = Harness()
    harness.start(["a"], a=[0])
    harness.member.subscribe(["a", "b"])
    harness.tick()
    send, request = harness.heartbeat()
    assert request.subscribed_topic_names == ["a", "b"]
    harness.ok(send, epoch=harness.epoch)
    harness.tick(INTERVAL_MS)
    _, request = harness.heartbeat()
    assert request.subscribed_topic_names is None


# -- reconciliation ----------------------------------------------------------------------------


def test_an_assignment_is_applied_by_the_next_poll_and_acknowledged_at_once() -> None:
    harness = Harness()
    harness.join(["a", "b"])
    harness.ok(harness.join_send, assigned=assignment(a=[0, 1], b=[2]))
    assert harness.member.state is ConsumerMemberState.RECONCILING
    assert harness.member.owned == set()
    events = harness.poll()
    assert events == [PartitionsAssigned([tp("a", 0), tp("a", 1), tp("b", 2)])]
    assert harness.member.state is ConsumerMemberState.STABLE
    _, request = harness.heartbeat()  # without waiting for the interval
    assert owned_in(request) == {tp("a", 0), tp("a", 1), tp("b", 2)}


def test_revocation_comes_before_assignment_and_the_ack_lists_what_is_kept() -> None:
    harness = Harness()
    harness.start(["a"], a=[0, 1, 2])
    harness.tick(INTERVAL_MS)
    send, _ = harness.heartbeat()
    # The coordinator takes 1 and 2 away (they go to another member once this one lets go) and gives 3.
    harness.ok(send, assigned=assignment(a=[0, 3]))
    events = harness.poll()
    assert events == [PartitionsRevoked([tp("a", 1), tp("a", 2)]), PartitionsAssigned([tp("a", 3)])]
    _, request = harness.heartbeat()
    assert owned_in(request) == {tp("a", 0), tp("a", 3)}
    assert request.member_epoch == harness.epoch


def test_heartbeats_go_on_while_the_application_has_not_polled_yet() -> None:
    harness = Harness()
    harness.start(["a"], a=[0, 1])
    harness.tick(INTERVAL_MS)
    send, _ = harness.heartbeat()
    harness.ok(send, assigned=assignment(a=[0]))
    assert harness.member.state is ConsumerMemberState.RECONCILING
    for _ in range(3):
        harness.tick(INTERVAL_MS)
        send, request = harness.heartbeat()
        assert request.topic_partitions is None  # nothing changed on this side yet
        harness.ok(send, epoch=harness.epoch)
    assert harness.member.owned == {tp("a", 0), tp("a", 1)}


def test_an_assignment_arriving_while_callbacks_run_is_reconciled_by_the_next_poll() -> None:
    harness = Harness()
    harness.start(["a"], a=[0])
    harness.tick(INTERVAL_MS)
    send, _ = harness.heartbeat()
    harness.ok(send, assigned=assignment(a=[0, 1]))
    events = harness.member.begin_poll(harness.now)
    assert events == [PartitionsAssigned([tp("a", 1)])]
    # Meanwhile (the loop thread) the next heartbeat brings another change.
    harness.tick(INTERVAL_MS)
    send, _ = harness.heartbeat()
    harness.ok(send, assigned=assignment(a=[0, 1, 2]))
    harness.member.callbacks_done(harness.now)
    assert harness.member.owned == {tp("a", 0), tp("a", 1)}
    assert harness.member.state is ConsumerMemberState.RECONCILING
    assert harness.poll() == [PartitionsAssigned([tp("a", 2)])]


def test_unknown_topic_ids_refresh_metadata_and_are_reconciled_once_named() -> None:
    harness = Harness()
    harness.join(["a", "c"])
    harness.metadata("a")  # c's id not known yet
    harness.member.topic_names.pop(TOPIC_IDS["c"], None)
    harness.ok(harness.join_send, assigned=assignment(a=[0], c=[1]))
    assert harness.refreshes == [RefreshMetadata(frozenset())]
    assert harness.member.metadata_topics() is None  # every topic, to learn the id
    assert harness.poll() == [PartitionsAssigned([tp("a", 0)])]
    harness.tick(10 * BACKOFF_MS)
    assert len(harness.refreshes) == 1  # one in flight at a time
    harness.metadata("a")  # the topic is too new for the broker's metadata: asked again later
    assert len(harness.refreshes) == 1
    harness.tick(BACKOFF_MS)
    assert len(harness.refreshes) == 2
    harness.metadata("a", "c")
    assert harness.member.state is ConsumerMemberState.RECONCILING
    assert harness.poll() == [PartitionsAssigned([tp("c", 1)])]
    assert harness.member.metadata_topics() == frozenset({"a", "c"})


def test_an_empty_assignment_revokes_everything() -> None:
    harness = Harness()
    harness.start(["a"], a=[0, 1])
    harness.tick(INTERVAL_MS)
    send, _ = harness.heartbeat()
    harness.ok(send, assigned=assignment())
    assert harness.poll() == [PartitionsRevoked([tp("a", 0), tp("a", 1)]), PartitionsAssigned([])]
    _, request = harness.heartbeat()
    assert request.topic_partitions == []


# -- fencing, errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("code", [ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID])
def test_fenced_loses_the_partitions_at_the_next_poll_and_rejoins_with_epoch_zero(code: ErrorCode) -> None:
    harness = Harness()
    harness.start(["a"], a=[0, 1])
    member_id = harness.member.member_id
    harness.tick(INTERVAL_MS)
    send, _ = harness.heartbeat()
    harness.error(send, code)
    assert harness.member.state is ConsumerMemberState.FENCED
    assert harness.member.generation_id == -1
    assert harness.tick(10 * INTERVAL_MS) == []  # no join before the partitions are reported lost
    assert harness.poll() == [PartitionsLost([tp("a", 0), tp("a", 1)])]
    _, request = harness.heartbeat()
    assert request.member_epoch == 0 and request.member_id == member_id
    assert request.topic_partitions == [] and request.subscribed_topic_names == ["a"]
    assert request.rebalance_timeout_ms == MAX_POLL_MS


def test_fenced_with_nothing_owned_rejoins_without_waiting_for_a_poll() -> None:
    harness = Harness()
    harness.join(["a"])
    harness.ok(harness.join_send)
    harness.tick(INTERVAL_MS)
    send, _ = harness.heartbeat()
    harness.error(send, ErrorCode.FENCED_MEMBER_EPOCH)
    assert harness.tick(BACKOFF_MS - 1) == []  # a coordinator that keeps fencing is not hammered
    harness.tick(1)
    _, request = harness.heartbeat()
    assert request.member_epoch == 0


@pytest.mark.parametrize("code", [ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE])
def test_coordinator_errors_find_it_again_and_send_a_complete_heartbeat(code: ErrorCode) -> None:
    harness = Harness(rack="r1")
    harness.start(["a"], a=[0])
    harness.tick(INTERVAL_MS)
    send, _ = harness.heartbeat()
    harness.error(send, code)
    assert harness.member.coordinator is None
    harness.tick(BACKOFF_MS)
    harness.find_coordinator()
    _, request = harness.heartbeat()
    assert request.member_epoch == harness.epoch  # still a member
    assert request.rack_id == "r1" and request.subscribed_topic_names == ["a"]
    assert owned_in(request) == {tp("a", 0)}


def test_a_lost_heartbeat_makes_the_next_one_complete() -> None:
    harness = Harness()
    harness.start(["a"], a=[0])
    harness.tick(INTERVAL_MS)
    send, _ = harness.heartbeat()
    harness.member.on_request_failed(send.request_id, KafkaConnectionError("reset"), harness.now)
    harness.tick(BACKOFF_MS)
    harness.find_coordinator()
    _, request = harness.heartbeat()
    assert request.subscribed_topic_names == ["a"] and owned_in(request) == {tp("a", 0)}


def test_coordinator_loading_retries_after_the_backoff() -> None:
    harness = Harness()
    harness.join(["a"])
    harness.error(harness.join_send, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert harness.tick(BACKOFF_MS - 1) == []
    _, request = harness.heartbeat() if harness.tick(1) else (None, None)
    assert request is not None and request.member_epoch == 0


@pytest.mark.parametrize(
    ("code", "error_type"),
    [
        (ErrorCode.FENCED_INSTANCE_ID, FencedInstanceIdError),
        (ErrorCode.UNSUPPORTED_ASSIGNOR, GroupError),
        (ErrorCode.UNRELEASED_INSTANCE_ID, GroupError),
        (ErrorCode.GROUP_MAX_SIZE_REACHED, GroupError),
        (ErrorCode.INVALID_REQUEST, GroupError),
    ],
)
def test_refusals_for_good_are_fatal_and_surface_at_every_poll(code: ErrorCode, error_type: type) -> None:
    harness = Harness(instance_id="i-1", assignor="nope")
    harness.join(["a"])
    harness.error(harness.join_send, code, "told by the coordinator")
    for _ in range(2):
        with pytest.raises(error_type, match="told by the coordinator"):
            harness.poll()
    assert harness.tick(60_000) == []


def test_a_broker_without_consumer_group_heartbeat_is_a_clear_fatal_error() -> None:
    harness = Harness()
    harness.join(["a"])
    harness.member.on_request_failed(
        harness.join_send.request_id, UnsupportedVersionError("versions none"), harness.now
    )
    with pytest.raises(UnsupportedVersionError, match=re.escape("group.protocol=classic")):
        harness.poll()


def test_topic_authorization_failure_is_raised_once_and_the_member_stays() -> None:
    harness = Harness()
    harness.start(["a"], a=[0])
    harness.tick(INTERVAL_MS)
    send, _ = harness.heartbeat()
    harness.error(send, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(GroupError, match="not authorized"):
        harness.poll()
    assert harness.poll() == []
    assert harness.member.state is ConsumerMemberState.STABLE


# -- leaving -----------------------------------------------------------------------------------


def test_a_dynamic_member_leaves_with_epoch_minus_one() -> None:
    harness = Harness()
    harness.start(["a"], a=[0])
    harness.member.leave_group("closing")
    _, request = harness.heartbeat()
    assert request.member_epoch == -1 and request.member_id == harness.member.member_id
    assert harness.member.state is ConsumerMemberState.UNSUBSCRIBED and harness.member.owned == set()
    assert harness.tick(10 * INTERVAL_MS) == []


def test_a_static_member_leaves_with_epoch_minus_two_and_its_instance_id() -> None:
    harness = Harness(instance_id="i-1")
    harness.start(["a"], a=[0])
    harness.member.leave_group("closing")
    _, request = harness.heartbeat()
    assert request.member_epoch == -2 and request.instance_id == "i-1"


def test_unsubscribe_leaves_and_a_new_subscribe_joins_again_with_the_same_member_id() -> None:
    harness = Harness()
    harness.start(["a"], a=[0])
    member_id = harness.member.member_id
    harness.member.unsubscribe()
    assert harness.heartbeat()[1].member_epoch == -1
    harness.member.subscribe(["b"])
    harness.metadata("a", "b")
    harness.poll()
    _, request = harness.heartbeat()
    assert request.member_epoch == 0 and request.member_id == member_id
    assert request.subscribed_topic_names == ["b"]


def test_poll_interval_exceeded_leaves_raises_once_then_loses_the_partitions_and_rejoins() -> None:
    harness = Harness()
    harness.start(["a"], a=[0])
    harness.clock.advance(MAX_POLL_MS)
    harness.tick(INTERVAL_MS)  # heartbeats went on meanwhile in real life; here only the leave matters
    leave = [send.request for send in harness.unclaimed if send.request.member_epoch == -1]
    assert len(leave) == 1
    harness.unclaimed.clear()
    with pytest.raises(MaxPollIntervalExceededError):
        harness.poll()
    assert harness.poll() == [PartitionsLost([tp("a", 0)])]
    _, request = harness.heartbeat()
    assert request.member_epoch == 0


# -- patterns ----------------------------------------------------------------------------------


def test_a_pattern_goes_to_the_coordinator_on_v1() -> None:
    harness = Harness(version=1)
    harness.metadata("logs-1", "a")
    harness.member.subscribe_pattern(re.compile("logs-.*"))
    harness.poll()
    harness.find_coordinator()
    _, request = harness.heartbeat()
    assert request.subscribed_topic_regex == "logs-.*" and request.subscribed_topic_names == []
    assert harness.member.subscribed_topics == {"logs-1"}
    assert harness.member.metadata_topics() is None


def test_switching_between_names_and_a_pattern_clears_the_other_on_the_coordinator() -> None:
    harness = Harness(version=1)
    harness.start(["a"], a=[0])
    harness.member.subscribe_pattern(re.compile("logs-.*"))
    harness.tick()
    send, request = harness.heartbeat()
    assert (request.subscribed_topic_names, request.subscribed_topic_regex) == ([], "logs-.*")
    harness.ok(send, epoch=harness.epoch)
    harness.member.subscribe(["b"])
    harness.tick()
    _, request = harness.heartbeat()
    assert (request.subscribed_topic_names, request.subscribed_topic_regex) == (["b"], "")


def test_a_pattern_is_matched_by_the_member_on_v0_and_new_matches_are_sent_at_once() -> None:
    harness = Harness(version=0)
    harness.metadata("logs-1", "a")
    harness.member.subscribe_pattern(re.compile("logs-.*"))
    harness.poll()
    harness.find_coordinator()
    send, request = harness.heartbeat()
    assert request.subscribed_topic_regex is None and request.subscribed_topic_names == ["logs-1"]
    harness.ok(send)
    harness.metadata("logs-1", "logs-2", "a")
    send, request = harness.heartbeat()  # without waiting for the interval
    assert request.subscribed_topic_names == ["logs-1", "logs-2"]


# -- offsets -----------------------------------------------------------------------------------


def _commit_response(code: ErrorCode) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponse.OffsetCommitResponseTopic(
                name="a",
                partitions=[
                    OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=0, error_code=code)
                ],
            )
        ]
    )


def test_commits_and_offset_fetches_carry_the_member_epoch_and_id() -> None:
    harness = Harness()
    harness.start(["a"], a=[0])
    request = harness.member.commit_request({tp("a", 0): 42})
    assert request.generation_id_or_member_epoch == harness.epoch
    assert request.member_id == harness.member.member_id
    assert harness.member.offset_fetch_member() == (harness.member.member_id, harness.epoch)


def test_a_commit_while_not_in_the_group_fails_but_a_consumer_without_subscription_commits() -> None:
    harness = Harness()
    harness.join(["a"])
    with pytest.raises(CommitFailedError):
        harness.member.commit_request({tp("a", 0): 1})
    free = Harness().member
    request = free.commit_request({tp("a", 0): 1})
    assert (request.generation_id_or_member_epoch, request.member_id) == (-1, "")
    assert free.offset_fetch_member() is None


def test_stale_member_epoch_is_retried_while_the_partitions_are_still_owned() -> None:
    harness = Harness()
    harness.start(["a"], a=[0])
    offsets = {tp("a", 0): 5}
    error = harness.member.commit_outcome(
        _commit_response(ErrorCode.STALE_MEMBER_EPOCH), offsets, harness.now
    )
    assert isinstance(error, StaleMemberEpochError) and error.retriable
    lost = {tp("a", 1): 5}
    error = harness.member.commit_outcome(_commit_response(ErrorCode.STALE_MEMBER_EPOCH), lost, harness.now)
    assert isinstance(error, CommitFailedError) and not error.retriable
    assert harness.member.commit_outcome(_commit_response(ErrorCode.NONE), offsets, harness.now) is None


def test_a_commit_answered_unknown_member_fences_the_member() -> None:
    harness = Harness()
    harness.start(["a"], a=[0])
    error = harness.member.commit_outcome(
        _commit_response(ErrorCode.UNKNOWN_MEMBER_ID), {tp("a", 0): 5}, harness.now
    )
    assert isinstance(error, CommitFailedError)
    assert harness.member.state is ConsumerMemberState.FENCED
    assert harness.poll() == [PartitionsLost([tp("a", 0)])]


# -- configuration -----------------------------------------------------------------------------


def test_group_protocol_defaults_to_classic_and_takes_any_case() -> None:
    assert ConsumerConfig.from_settings().group_protocol == "classic"
    assert ConsumerConfig.from_settings({"group.protocol": "CONSUMER"}).group_protocol == "consumer"
    with pytest.raises(ConfigError, match=re.escape("group.protocol")):
        ConsumerConfig.from_settings({"group.protocol": "eager"})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("partition.assignment.strategy", "range"),
        ("session.timeout.ms", 10_000),
        ("heartbeat.interval.ms", 1_000),
    ],
)
def test_classic_only_settings_are_refused_with_the_consumer_protocol(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{key} cannot be set when group.protocol=consumer")):
        ConsumerConfig.from_settings({"group.protocol": "consumer", key: value})
    ConsumerConfig.from_settings({key: value})  # fine with classic


def test_remote_assignor_is_for_the_consumer_protocol_only() -> None:
    config = ConsumerConfig.from_settings({"group.protocol": "consumer", "group.remote.assignor": "uniform"})
    assert config.group_remote_assignor == "uniform"
    with pytest.raises(
        ConfigError, match=re.escape("group.remote.assignor cannot be set when group.protocol=classic")
    ):
        ConsumerConfig.from_settings({"group.remote.assignor": "uniform"})


# -- on the wire -------------------------------------------------------------------------------


def wire(message: Any, version: int) -> Any:
    """``message`` as the coordinator reads it at ``version``."""
    return type(message).decode(memoryview(message.encode(version)), version)


@pytest.mark.parametrize("version", [0, 1])
def test_every_heartbeat_encodes_at_the_version_it_is_fitted_to(version: int) -> None:
    harness = Harness(version=version, instance_id="i-1", rack="r1", assignor="uniform")
    harness.metadata("logs-1", "a")
    harness.member.subscribe_pattern(re.compile("logs-.*"))
    harness.poll()
    harness.find_coordinator()
    send, join = harness.heartbeat()
    sent = wire(join, version)
    assert sent.member_epoch == 0 and sent.topic_partitions == [] and sent.instance_id == "i-1"
    assert (sent.subscribed_topic_names, getattr(sent, "subscribed_topic_regex", None)) == (
        ([], "logs-.*") if version == 1 else (["logs-1"], None)
    )
    harness.ok(send, assigned=assignment(**{"logs-1": [0, 1]}), member_id="m" if version == 0 else None)
    harness.poll()
    send, ack = harness.heartbeat()
    assert owned_in(wire(ack, version)) == {tp("logs-1", 0), tp("logs-1", 1)}
    harness.ok(send, epoch=harness.epoch)
    harness.member.leave_group("closing")
    _, leave = harness.heartbeat()
    assert (wire(leave, version).member_epoch, wire(leave, version).instance_id) == (-2, "i-1")


@pytest.mark.parametrize("version", [8, 9])
def test_offset_fetch_names_the_member_from_v9(version: int) -> None:
    from strom.client.consumer.coordinator import _offset_fetch_request

    request = wire(_offset_fetch_request(GROUP, {"a": [0]}, version, member=("m-1", 7)), version)
    group = request.groups[0]
    assert (group.member_id, group.member_epoch) == (("m-1", 7) if version == 9 else (None, -1))


def test_the_first_assignment_after_a_join_is_reported_even_when_empty() -> None:
    harness = Harness()
    harness.join(["a"])
    harness.ok(harness.join_send, assigned=assignment())
    assert harness.poll() == [PartitionsAssigned([])]
    assert harness.member.state is ConsumerMemberState.STABLE
    assert harness.poll() == []
    harness.tick(INTERVAL_MS)
    send, _ = harness.heartbeat()
    harness.ok(send, epoch=harness.epoch, assigned=assignment())
    assert harness.poll() == []  # later: only changes
