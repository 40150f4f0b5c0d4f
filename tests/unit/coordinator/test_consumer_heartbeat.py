"""ConsumerGroupHeartbeat (KIP-848): joining, epochs, reconciliation, leaving, errors and timeouts."""

from __future__ import annotations

import uuid

import pytest

from strom.coordinator.consumer_group import MemberState
from strom.coordinator.timers import consumer_rebalance_key, consumer_session_key
from strom.protocol.errors import ErrorCode
from tests.unit.coordinator.consumer_harness import (
    ConsumerHarness,
    SimulatedMember,
    assert_exclusive,
    assignment_of,
)


def settle(members: list[SimulatedMember], rounds: int = 6) -> None:
    for _ in range(rounds):
        for member in members:
            member.beat()
            assert member.last is not None and member.last.error_code == ErrorCode.NONE, member.last
            assert_exclusive(members)


def test_a_member_joins_gets_an_id_an_epoch_and_every_partition() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 4)
    response = harness.heartbeat("g", "", 0, names=["t"], version=0)
    assert response.error_code == ErrorCode.NONE
    assert response.member_id  # v0: the coordinator makes the id
    assert response.member_epoch == 1
    assert response.heartbeat_interval_ms == 1000
    assert assignment_of(response) == {topic: frozenset({0, 1, 2, 3})}
    # A heartbeat with nothing new: same epoch, no assignment sent.
    again = harness.heartbeat("g", response.member_id or "", 1, owned={topic: frozenset({0, 1, 2, 3})})
    assert again.error_code == ErrorCode.NONE and again.member_epoch == 1
    assert again.assignment is None
    (described,) = harness.describe("g")
    assert (
        described.group_state == "Stable" and described.group_epoch == 1 and described.assignment_epoch == 1
    )
    assert described.assignor_name == "uniform"
    (member,) = described.members
    assert member.member_epoch == 1 and member.subscribed_topic_names == ["t"]
    assert [(tp.topic_name, tp.partitions) for tp in member.assignment.topic_partitions] == [
        ("t", [0, 1, 2, 3])
    ]


def test_a_v1_member_keeps_its_own_id() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 1)
    response = harness.heartbeat("g", "my-own-id", 0, names=["t"])
    assert response.error_code == ErrorCode.NONE and response.member_id == "my-own-id"


def test_partitions_move_to_a_second_member_only_after_the_first_revoked_them() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 4)
    first = SimulatedMember(harness, ["t"])
    first.beat()
    assert first.owned == {topic: frozenset({0, 1, 2, 3})} and first.epoch == 1
    second = SimulatedMember(harness, ["t"])
    response = second.beat()
    # The group moved to epoch 2, but the partitions the second member is to get are still the
    # first's: it gets the new epoch and nothing yet.
    assert response.member_epoch == 2
    assert sum(len(parts) for parts in second.owned.values()) == 0
    assert_exclusive([first, second])
    # The first member's heartbeat: it is told to keep only its share (epoch unchanged until it
    # has revoked the rest).
    response = first.beat()
    assert response.member_epoch == 1
    kept = first.partitions()
    assert len(kept) == 2
    group = harness.coordinator.group("g")
    assert group is not None and group.consumer is not None
    assert group.consumer.current_of(first.member_id).state is MemberState.UNREVOKED_PARTITIONS
    # Its next heartbeat says it let them go: it moves to epoch 2.
    response = first.beat()
    assert response.member_epoch == 2 and first.partitions() == kept
    # Now the second member gets the released partitions.
    second.beat()
    assert len(second.partitions()) == 2
    assert_exclusive([first, second])
    assert first.partitions() | second.partitions() == {(topic, p) for p in range(4)}
    (described,) = harness.describe("g")
    assert described.group_state == "Stable"


def test_a_member_that_keeps_partitions_never_loses_them_while_others_join() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 12)
    members = [SimulatedMember(harness, ["t"])]
    settle(members)
    for _ in range(5):
        before = {member.member_id: member.partitions() for member in members}
        newcomer = SimulatedMember(harness, ["t"])
        members.append(newcomer)
        for _ in range(6):
            for member in members:
                member.beat()
                assert_exclusive(members)
                target = before.get(member.member_id)
                if target is not None:
                    # What a member keeps in the end it owned throughout.
                    final = harness.coordinator.group("g").consumer.target_of(member.member_id)  # type: ignore[union-attr]
                    kept = {(t, p) for t, parts in final.items() for p in parts} & target
                    assert kept <= member.partitions()
    sizes = sorted(len(member.partitions()) for member in members)
    assert sizes == [2] * 6


def test_leaving_frees_the_partitions_for_the_others() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 4)
    first, second = SimulatedMember(harness, ["t"]), SimulatedMember(harness, ["t"])
    settle([first, second])
    response = first.leave()
    assert response.error_code == ErrorCode.NONE and response.member_epoch == -1
    second.beat()
    assert second.partitions() == {(topic, p) for p in range(4)}
    assert second.epoch == 3
    # The one that left is unknown now.
    response = harness.heartbeat("g", first.member_id, 2, owned={})
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_wrong_epochs_are_fenced_but_the_previous_one_is_accepted_when_it_owns_nothing_more() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 2)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    assert member.epoch == 1
    response = harness.heartbeat("g", member.member_id, 5, owned=member.owned)
    assert response.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    # A second member bumps the group; the first moves to epoch 3 but misses the answer.
    other = SimulatedMember(harness, ["t"])
    other.beat()
    harness.heartbeat("g", member.member_id, 1, owned=member.owned)  # told to revoke one
    current = harness.coordinator.group("g").consumer.current_of(member.member_id)  # type: ignore[union-attr]
    kept = current.assigned
    moved = harness.heartbeat("g", member.member_id, 1, owned=dict(kept))
    assert moved.member_epoch == 2
    # The answer is lost: the member retries with epoch 1, owning only what it was assigned.
    retry = harness.heartbeat("g", member.member_id, 1, owned=dict(kept))
    assert retry.error_code == ErrorCode.NONE and retry.member_epoch == 2
    # Epoch 1 with a partition it no longer has is fenced.
    fenced = harness.heartbeat("g", member.member_id, 1, owned={topic: frozenset({0, 1})})
    assert fenced.error_code == ErrorCode.FENCED_MEMBER_EPOCH


def test_a_fenced_member_rejoins_with_epoch_zero_and_its_id() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 2)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    rejoin = harness.heartbeat("g", member.member_id, 0, names=["t"])
    assert rejoin.error_code == ErrorCode.NONE
    assert rejoin.member_epoch == 1
    assert assignment_of(rejoin) == {topic: frozenset({0, 1})}


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"group_id": "", "names": ["t"]}, ErrorCode.INVALID_REQUEST),
        ({"names": None}, ErrorCode.INVALID_REQUEST),
        ({"names": ["t"], "rebalance_timeout_ms": 0}, ErrorCode.INVALID_REQUEST),
        ({"names": ["t"], "owned": {uuid.UUID(int=1): frozenset({0})}}, ErrorCode.INVALID_REQUEST),
        ({"names": ["t"], "instance_id": ""}, ErrorCode.INVALID_REQUEST),
        ({"names": ["t"], "assignor": "sticky"}, ErrorCode.UNSUPPORTED_ASSIGNOR),
        ({"regex": "t(["}, ErrorCode.INVALID_REGULAR_EXPRESSION),
        ({"regex": "a" * 1001}, ErrorCode.INVALID_REGULAR_EXPRESSION),
        ({"epoch": 3, "member_id": "nobody", "owned": {}}, ErrorCode.UNKNOWN_MEMBER_ID),
        ({"epoch": 3, "member_id": ""}, ErrorCode.INVALID_REQUEST),
        ({"epoch": -3, "member_id": "x"}, ErrorCode.INVALID_REQUEST),
        ({"names": ["t"], "member_id": "m" * 1001}, ErrorCode.INVALID_REQUEST),
        ({"names": ["x"] * 10_001}, ErrorCode.INVALID_REQUEST),
    ],
)
def test_malformed_or_unknown_heartbeats_get_kafkas_errors(
    kwargs: dict[str, object], error: ErrorCode
) -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 1)
    arguments: dict[str, object] = {"group_id": "g", "member_id": "m", "epoch": 0}
    arguments.update(kwargs)
    response = harness.heartbeat(**arguments)  # type: ignore[arg-type]
    assert response.error_code == error, response
    assert harness.coordinator.group("g") is None or not harness.coordinator.group("g").is_consumer_group  # type: ignore[union-attr]


def test_not_coordinator_and_loading() -> None:
    harness = ConsumerHarness()
    harness.coordinator.unload(0)
    assert harness.heartbeat("g", "m", 0, names=["t"]).error_code == ErrorCode.NOT_COORDINATOR
    harness.coordinator.begin_loading(0)
    assert harness.heartbeat("g", "m", 0, names=["t"]).error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


def test_group_max_size() -> None:
    harness = ConsumerHarness(consumer_group_max_size=1)
    harness.topics.create("t", 1)
    assert harness.heartbeat("g", "a", 0, names=["t"]).error_code == ErrorCode.NONE
    assert harness.heartbeat("g", "b", 0, names=["t"]).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    # A member already in the group may rejoin.
    assert harness.heartbeat("g", "a", 0, names=["t"]).error_code == ErrorCode.NONE


def test_session_timeout_removes_the_member_and_bumps_the_epoch() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 2)
    first, second = SimulatedMember(harness, ["t"]), SimulatedMember(harness, ["t"])
    settle([first, second])
    for _ in range(12):
        harness.advance(1000)
        second.beat()
    # The first never heartbeated in 12 s (session 10 s): gone, its partition is the second's.
    assert second.partitions() == {(topic, 0), (topic, 1)}
    assert (
        harness.heartbeat("g", first.member_id, first.epoch, owned={}).error_code
        == ErrorCode.UNKNOWN_MEMBER_ID
    )
    assert harness.timer.due_in_ms(consumer_session_key("g", first.member_id)) is None


def test_a_member_that_does_not_revoke_in_its_rebalance_timeout_is_fenced() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 2)
    first = SimulatedMember(harness, ["t"])
    first.beat()
    second = SimulatedMember(harness, ["t"])
    second.beat()
    # The first is asked to revoke but keeps saying it owns both.
    response = harness.heartbeat("g", first.member_id, 1, owned={topic: frozenset({0, 1})})
    assert response.member_epoch == 1
    assert harness.timer.due_in_ms(consumer_rebalance_key("g", first.member_id)) == 5000
    for _ in range(4):
        harness.advance(1000)
        harness.heartbeat("g", first.member_id, 1, owned={topic: frozenset({0, 1})})
        second.beat()
    assert second.partitions() == set()  # not yet: the first still holds both
    harness.advance(1000)
    second.beat()
    assert second.partitions() == {(topic, 0), (topic, 1)}
    response = harness.heartbeat("g", first.member_id, 1, owned={topic: frozenset({0, 1})})
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_heartbeat_without_owned_partitions_does_not_count_as_a_revocation() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 2)
    first = SimulatedMember(harness, ["t"])
    first.beat()
    SimulatedMember(harness, ["t"]).beat()
    harness.heartbeat("g", first.member_id, 1, owned={topic: frozenset({0, 1})})
    still = harness.heartbeat("g", first.member_id, 1)  # owned partitions left out: unchanged
    assert still.member_epoch == 1
    done = harness.heartbeat("g", first.member_id, 1, owned={})
    assert done.member_epoch == 2


def test_static_member_instance_id_errors() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 2)
    static = SimulatedMember(harness, ["t"], instance_id="i-1")
    static.beat()
    # A second instance with the same id while the first is active: UNRELEASED_INSTANCE_ID.
    response = harness.heartbeat("g", "second", 0, names=["t"], instance_id="i-1")
    assert response.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    # Another member id naming the instance id: FENCED_INSTANCE_ID.
    other = SimulatedMember(harness, ["t"])
    other.beat()
    response = harness.heartbeat("g", other.member_id, other.epoch, owned={}, instance_id="i-1")
    assert response.error_code == ErrorCode.FENCED_INSTANCE_ID
    # An unknown instance id on a heartbeat: UNKNOWN_MEMBER_ID.
    response = harness.heartbeat("g", other.member_id, other.epoch, owned={}, instance_id="i-9")
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # Leaving for a while, then the old member id is no more once the new instance took over.
    assert static.leave(static=True).member_epoch == -2
    restarted = SimulatedMember(harness, ["t"], instance_id="i-1")
    assert restarted.beat().error_code == ErrorCode.NONE
    response = harness.heartbeat("g", static.member_id, 1, owned={})
    assert response.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert all(member.member_id != static.member_id for member in harness.describe("g")[0].members)


def test_static_member_takes_over_with_no_epoch_bump() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 4)
    static = SimulatedMember(harness, ["t"], instance_id="i-1")
    other = SimulatedMember(harness, ["t"])
    settle([static, other])
    kept = static.partitions()
    epoch = harness.describe("g")[0].group_epoch
    static.leave(static=True)
    restarted = SimulatedMember(harness, ["t"], instance_id="i-1")
    restarted.beat()
    assert restarted.partitions() == kept
    assert harness.describe("g")[0].group_epoch == epoch
    other.beat()
    assert_exclusive([restarted, other])
    assert len(other.partitions()) == 2 and topic


def test_static_member_that_does_not_come_back_is_removed_after_the_session_timeout() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 2)
    static = SimulatedMember(harness, ["t"], instance_id="i-1")
    other = SimulatedMember(harness, ["t"])
    settle([static, other])
    static.leave(static=True)
    for _ in range(11):
        harness.advance(1000)
        other.beat()
    assert other.partitions() == {(topic, 0), (topic, 1)}
    # Its instance id is free again.
    assert harness.heartbeat("g", "new", 0, names=["t"], instance_id="i-1").error_code == ErrorCode.NONE


def test_regex_subscription_and_a_topic_created_later() -> None:
    harness = ConsumerHarness()
    orders = harness.topics.create("orders-eu", 2)
    harness.topics.create("payments", 2)
    member = SimulatedMember(harness, regex="orders-.*")
    member.beat()
    assert member.owned == {orders: frozenset({0, 1})}
    later = harness.topics.create("orders-us", 1)
    harness.coordinator.topics_changed(["orders-us"])
    member.beat()
    assert member.owned == {orders: frozenset({0, 1}), later: frozenset({0})}
    assert member.epoch == 2
    (described,) = harness.describe("g")
    assert described.members[0].subscribed_topic_regex == "orders-.*"


def test_topics_changed_partitions_added_and_topic_deleted() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 2)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    harness.topics.create("t", 4)
    harness.coordinator.topics_changed(None)
    member.beat()
    assert member.owned == {topic: frozenset({0, 1, 2, 3})}
    harness.topics.delete("t")
    harness.coordinator.topics_changed(["t"])
    member.beat()
    assert member.owned == {}
    # A change to a topic nobody subscribes to bumps nothing.
    epoch = harness.describe("g")[0].group_epoch
    harness.topics.create("unrelated", 1)
    harness.coordinator.topics_changed(["unrelated"])
    assert harness.describe("g")[0].group_epoch == epoch


def test_subscription_change_moves_partitions() -> None:
    harness = ConsumerHarness()
    a = harness.topics.create("a", 1)
    b = harness.topics.create("b", 1)
    member = SimulatedMember(harness, ["a"])
    member.beat()
    assert member.owned == {a: frozenset({0})}
    response = harness.heartbeat("g", member.member_id, member.epoch, names=["b"], owned=member.owned)
    assert response.member_epoch == 1 and assignment_of(response) == {}
    response = harness.heartbeat("g", member.member_id, 1, owned={})
    assert response.member_epoch == 2 and assignment_of(response) == {b: frozenset({0})}


def test_records_wait_for_the_write_and_heartbeats_queue_behind_it() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 2)
    harness.log.defer = True
    first: list[object] = []
    second: list[object] = []
    from strom.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest

    def join(member_id: str) -> ConsumerGroupHeartbeatRequest:
        return ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id=member_id,
            member_epoch=0,
            rebalance_timeout_ms=1000,
            subscribed_topic_names=["t"],
        )

    first = harness.heartbeat_raw(join("a"))
    second = harness.heartbeat_raw(join("b"))
    assert first == [] and second == []
    harness.log.complete_deferred()
    assert len(first) == 1 and first[0].member_epoch == 1  # type: ignore[attr-defined]
    assert second == []  # computed after the first was written, now writing
    harness.log.complete_deferred()
    assert len(second) == 1 and second[0].member_epoch == 2  # type: ignore[attr-defined]


def test_a_failed_write_answers_an_error_and_changes_nothing() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 2)
    harness.log.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert harness.heartbeat("g", "a", 0, names=["t"]).error_code == ErrorCode.NOT_COORDINATOR
    assert harness.coordinator.group("g") is None
    harness.log.fail_with = ErrorCode.REQUEST_TIMED_OUT
    assert harness.heartbeat("g", "a", 0, names=["t"]).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    harness.log.fail_with = ErrorCode.NONE
    assert harness.heartbeat("g", "a", 0, names=["t"]).member_epoch == 1


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_scaling_one_to_eight_and_back_with_the_real_assignors(assignor: str) -> None:
    """48 partitions, members joining one by one then leaving: no partition is ever owned twice, a
    member never loses a partition it keeps, every partition is owned once the group settles."""
    harness = ConsumerHarness(real_assignors=True)
    topic = harness.topics.create("t", 48)
    everything = {(topic, p) for p in range(48)}
    members: list[SimulatedMember] = []

    def run_until_stable() -> None:
        for _ in range(10):
            for member in members:
                before = member.partitions()
                member.beat()
                assert member.last is not None and member.last.error_code == ErrorCode.NONE
                assert_exclusive(members)
                group = harness.coordinator.group("g")
                assert group is not None and group.consumer is not None
                target = group.consumer.target_of(member.member_id)
                kept = before & {(t, p) for t, parts in target.items() for p in parts}
                assert kept <= member.partitions(), "a kept partition was taken away"
            if harness.describe("g")[0].group_state == "Stable":
                return
        raise AssertionError(f"not stable: {harness.describe('g')[0]}")

    for count in range(1, 9):
        member = SimulatedMember(harness, ["t"])
        members.append(member)
        response = harness.heartbeat("g", member.member_id, 0, names=["t"], assignor=assignor)
        member.epoch = response.member_epoch
        member.owned = assignment_of(response) or {}
        run_until_stable()
        sizes = sorted(len(m.partitions()) for m in members)
        assert sum(sizes) == 48 and sizes[-1] - sizes[0] <= 1, (count, sizes)
        assert set().union(*(m.partitions() for m in members)) == everything
    assert harness.describe("g")[0].assignor_name == assignor
    while len(members) > 1:
        members.pop(0).leave()
        run_until_stable()
        assert set().union(*(m.partitions() for m in members)) == everything


def test_the_consumer_protocol_switched_off() -> None:
    harness = ConsumerHarness(rebalance_protocols=frozenset({"classic"}))
    harness.topics.create("t", 1)
    assert harness.heartbeat("g", "a", 0, names=["t"]).error_code == ErrorCode.UNSUPPORTED_VERSION


def test_unloading_answers_the_heartbeats_in_flight_and_waiting() -> None:
    from strom.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest

    harness = ConsumerHarness()
    harness.topics.create("t", 2)
    harness.log.defer = True

    def join(member_id: str) -> ConsumerGroupHeartbeatRequest:
        return ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id=member_id,
            member_epoch=0,
            rebalance_timeout_ms=1000,
            subscribed_topic_names=["t"],
        )

    writing = harness.heartbeat_raw(join("a"))
    waiting = harness.heartbeat_raw(join("b"))
    harness.coordinator.unload(0)
    assert [response.error_code for response in waiting] == [ErrorCode.NOT_COORDINATOR]
    harness.log.complete_deferred()  # the write lands after the partition moved away
    assert [response.error_code for response in writing] == [ErrorCode.NOT_COORDINATOR]
    assert harness.timer.pending_keys() == ["offsets-expiry"]  # no member timer left behind


def test_a_topic_change_while_a_write_is_in_flight_waits_its_turn() -> None:
    harness = ConsumerHarness()
    topic = harness.topics.create("t", 2)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    harness.log.defer = True
    harness.topics.create("t", 3)
    harness.coordinator.topics_changed(["t"])  # writing the new epoch
    harness.topics.create("t", 4)
    harness.coordinator.topics_changed(["t"])  # waits for the first
    harness.log.complete_deferred()
    harness.log.complete_deferred()
    harness.log.defer = False
    member.beat()
    assert member.owned == {topic: frozenset({0, 1, 2, 3})}
    assert harness.describe("g")[0].group_epoch == 3


def test_a_leave_whose_write_fails_keeps_the_member_and_its_session() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 1)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    harness.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    response = harness.heartbeat("g", member.member_id, -1)
    assert response.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert harness.timer.due_in_ms(consumer_session_key("g", member.member_id)) == 10_000
    harness.log.fail_with = ErrorCode.NONE
    harness.advance(10_000)  # it never comes back: its session expires and it goes
    assert harness.describe("g")[0].members == []
