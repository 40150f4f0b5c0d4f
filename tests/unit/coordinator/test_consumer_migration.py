"""Classic members in a consumer group; a classic group upgraded online and downgraded back."""

from __future__ import annotations

from typing import Any

from strom.assignors.protocol import Assignment as ProtocolAssignment
from strom.assignors.protocol import Subscription, decode_assignment, encode_assignment, encode_subscription
from strom.coordinator.state import GroupState
from strom.protocol.errors import ErrorCode
from tests.unit.coordinator.consumer_harness import ConsumerHarness, SimulatedMember, assert_exclusive
from tests.unit.coordinator.harness import Harness
from tests.unit.coordinator.test_consumer_admin_offsets import list_groups


def classic_heartbeat(harness: ConsumerHarness, member_id: str, generation: int) -> ErrorCode:
    """The classic Heartbeat (ConsumerHarness.heartbeat is the consumer protocol's)."""
    return Harness.heartbeat(harness, "g", member_id, generation)


class ClassicMember:
    """A cooperative classic consumer: JoinGroup with what it owns, SyncGroup, Heartbeat."""

    def __init__(self, harness: ConsumerHarness, topics: list[str], member_id: str = "") -> None:
        self.harness = harness
        self.topics = topics
        self.member_id = member_id
        self.generation = -1
        self.owned: set[tuple[str, int]] = set()

    def protocols(self) -> list[tuple[str, bytes]]:
        subscription = Subscription(topics=self.topics, owned_partitions=sorted(self.owned))
        return [("cooperative-sticky", encode_subscription(subscription, 1))]

    def join_and_sync(self) -> None:
        box = self.harness.join("g", self.member_id, protocols=self.protocols(), version=7)
        assert box and box[0].error_code == ErrorCode.NONE, box
        response = box[0]
        self.member_id = response.member_id
        self.generation = response.generation_id
        assert response.leader != self.member_id  # the coordinator assigns
        synced = self.harness.sync(
            "g",
            self.member_id,
            self.generation,
            version=5,
            protocol_type="consumer",
            protocol_name=response.protocol_name,
        )
        assert synced and synced[0].error_code == ErrorCode.NONE, synced
        # Cooperative: it gives up what is missing, keeps the rest, takes what is new.
        self.owned = set(decode_assignment(synced[0].assignment).partitions)

    def heartbeat(self) -> ErrorCode:
        return classic_heartbeat(self.harness, self.member_id, self.generation)

    def step(self) -> None:
        error = self.heartbeat()
        if error == ErrorCode.REBALANCE_IN_PROGRESS:
            self.join_and_sync()
        else:
            assert error == ErrorCode.NONE, error


def classic_group(harness: ConsumerHarness, topic: str, partitions: int) -> tuple[list[str], int]:
    """Two cooperative classic members, Stable, each with half the partitions; offsets committed."""
    subscription = encode_subscription(Subscription(topics=[topic]), 1)
    ids, generation = harness.stable_group("g", members=2, protocols=[("cooperative-sticky", subscription)])
    halves = {
        ids[0]: [(topic, p) for p in range(partitions) if p % 2 == 0],
        ids[1]: [(topic, p) for p in range(partitions) if p % 2 == 1],
    }
    # Redo the sync with real assignments (stable_group syncs dummy bytes): a new generation.
    for member_id in ids:
        harness.join("g", member_id, protocols=[("cooperative-sticky", subscription)])
    harness.advance(0)
    group = harness.coordinator.group("g")
    assert group is not None
    generation = group.generation_id
    leader = group.leader_id
    assert leader is not None
    for member_id in ids:
        if member_id != leader:
            harness.sync("g", member_id, generation)
    harness.sync(
        "g", leader, generation, {m: encode_assignment(ProtocolAssignment(partitions=halves[m])) for m in ids}
    )
    assert group.state is GroupState.STABLE
    for member_id in ids:
        assert harness.commit("g", {(topic, 0): 100}, member_id=member_id, generation_id=generation) == {
            (topic, 0): ErrorCode.NONE
        }
    return ids, generation


def test_a_classic_group_is_upgraded_online_and_downgraded_back() -> None:
    harness = ConsumerHarness()
    topic_id = harness.topics.create("t", 4)
    ids, generation = classic_group(harness, "t", 4)
    classic = [ClassicMember(harness, ["t"], member_id) for member_id in ids]
    for member in classic:
        member.generation = generation
        member.owned = {("t", p) for p in range(4) if p % 2 == ids.index(member.member_id)}

    # The first consumer-protocol member: the group becomes a consumer group with all three.
    newcomer = SimulatedMember(harness, ["t"])
    response = newcomer.beat()
    assert response.error_code == ErrorCode.NONE, response
    assert response.member_epoch == generation + 1
    assert newcomer.partitions() == set()  # the classic members still own everything
    assert list_groups(harness) == [("g", "consumer", "Reconciling", "consumer")]
    described = harness.describe("g")[0]
    assert len(described.members) == 3
    # Offsets survived the conversion.
    assert harness.fetch("g", {"t": [0]}) == {("t", 0): (100, "meta")}

    def all_owned() -> list[set[tuple[Any, int]]]:
        return [{(topic_id, p) for _, p in member.owned} for member in classic] + [newcomer.partitions()]

    def exclusive() -> None:
        seen: set[tuple[Any, int]] = set()
        for owned in all_owned():
            assert seen.isdisjoint(owned), all_owned()
            seen |= owned

    for _ in range(6):
        for member in classic:
            member.step()
            exclusive()
        newcomer.beat()
        exclusive()
    assert harness.describe("g")[0].group_state == "Stable"
    sizes = sorted(len(owned) for owned in all_owned())
    assert sizes == [1, 1, 2]
    # A classic member commits with its generation (= its member epoch).
    member = classic[0]
    assert harness.commit(
        "g", {("t", 1): 7}, member_id=member.member_id, generation_id=member.generation
    ) == {("t", 1): ErrorCode.NONE}
    assert harness.commit(
        "g", {("t", 1): 7}, member_id=member.member_id, generation_id=member.generation - 1
    ) == {("t", 1): ErrorCode.ILLEGAL_GENERATION}

    # The consumer-protocol member leaves: only classic members remain, back to a classic group.
    assert newcomer.leave().error_code == ErrorCode.NONE
    group = harness.coordinator.group("g")
    assert group is not None and group.consumer is None
    assert group.state is GroupState.PREPARING_REBALANCE
    assert list_groups(harness) == [("g", "consumer", "PreparingRebalance", "classic")]
    # The classic members are told to rejoin, and the classic protocol takes over.
    errors = [member.heartbeat() for member in classic]
    assert errors == [ErrorCode.REBALANCE_IN_PROGRESS] * 2
    boxes = [
        harness.join("g", member.member_id, protocols=member.protocols(), version=7) for member in classic
    ]
    harness.advance(0)
    assert all(box and box[0].error_code == ErrorCode.NONE for box in boxes), boxes
    assert harness.fetch("g", {"t": [0, 1]}) == {("t", 0): (100, "meta"), ("t", 1): (7, "meta")}


def test_a_classic_member_joins_a_consumer_group_and_leaves_it() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 2)
    consumer_member = SimulatedMember(harness, ["t"])
    consumer_member.beat()
    classic = ClassicMember(harness, ["t"])
    classic.join_and_sync()
    assert classic.owned == set()  # both partitions are the other's until it revokes one
    for _ in range(3):
        consumer_member.beat()
        classic.step()
    assert len(classic.owned) == 1 and len(consumer_member.partitions()) == 1
    assert_exclusive([consumer_member])
    # Unknown member, wrong generation.
    assert classic_heartbeat(harness, "nobody", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert (
        classic_heartbeat(harness, classic.member_id, classic.generation + 5) == ErrorCode.ILLEGAL_GENERATION
    )
    response = harness.leave("g", [(classic.member_id, None)])
    assert response.members[0].error_code == ErrorCode.NONE
    consumer_member.beat()
    consumer_member.beat()
    assert len(consumer_member.partitions()) == 2
    group = harness.coordinator.group("g")
    assert (
        group is not None
        and group.consumer is not None
        and list(group.consumer.members) == [consumer_member.member_id]
    )


def test_an_empty_consumer_group_becomes_classic_on_a_classic_join_and_back() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 1)
    member = SimulatedMember(harness, ["t"])
    member.beat()
    member.leave()
    ids, _ = harness.stable_group("g", members=1)
    assert list_groups(harness) == [("g", "consumer", "Stable", "classic")]
    harness.leave("g", [(ids[0], None)])
    assert list_groups(harness) == [("g", "consumer", "Empty", "classic")]
    again = SimulatedMember(harness, ["t"])
    assert again.beat().error_code == ErrorCode.NONE
    assert list_groups(harness) == [("g", "consumer", "Stable", "consumer")]
    # And the log says the same after a reload.
    from tests.unit.coordinator.test_consumer_replay import consumer_snapshot, reload

    for compacted in (False, True):
        fresh, _ = reload(harness, compacted=compacted)
        assert consumer_snapshot(fresh) == consumer_snapshot(harness.coordinator)


def test_upgrade_is_refused_when_the_policy_says_so() -> None:
    harness = ConsumerHarness(consumer_group_migration_policy="downgrade")
    harness.topics.create("t", 2)
    harness.stable_group(
        "g", members=1, protocols=[("range", encode_subscription(Subscription(topics=["t"]), 1))]
    )
    response = SimulatedMember(harness, ["t"]).beat()
    assert response.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_a_classic_member_of_a_consumer_group_expires_after_its_own_session_timeout() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 2)
    consumer_member = SimulatedMember(harness, ["t"])
    consumer_member.beat()
    classic = ClassicMember(harness, ["t"])
    classic.join_and_sync()  # session timeout 10 s (the harness's JoinGroup)
    for _ in range(3):
        consumer_member.beat()
        classic.step()
    for _ in range(11):
        harness.advance(1000)
        consumer_member.beat()
    assert classic.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID
    assert len(consumer_member.partitions()) == 2


def test_a_classic_group_in_the_middle_of_a_rebalance_is_upgraded_and_its_parked_join_answered() -> None:
    harness = ConsumerHarness()
    harness.topics.create("t", 2)
    subscription = encode_subscription(Subscription(topics=["t"]), 1)
    (first, second), generation = classic_group(harness, "t", 2)
    # The first rejoins: the group is PreparingRebalance, its JoinGroup parked.
    parked = harness.join("g", first, protocols=[("cooperative-sticky", subscription)])
    group = harness.coordinator.group("g")
    assert group is not None and group.state is GroupState.PREPARING_REBALANCE and parked == []
    newcomer = SimulatedMember(harness, ["t"])
    assert newcomer.beat().error_code == ErrorCode.NONE
    # The parked JoinGroup is answered as a member of the consumer group, with its epoch.
    assert parked and parked[0].error_code == ErrorCode.NONE
    assert parked[0].generation_id == generation and parked[0].leader == ""
    synced = harness.sync("g", first, generation, version=5)
    assert synced and synced[0].error_code == ErrorCode.NONE
    # Its heartbeat says it is behind the new target: join again.
    assert classic_heartbeat(harness, first, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    assert list_groups(harness)[0][3] == "consumer"
    assert second in {member.member_id for member in harness.describe("g")[0].members}


def test_a_mixed_group_reloads_with_its_classic_members() -> None:
    from tests.unit.coordinator.test_consumer_replay import consumer_snapshot, reload

    harness = ConsumerHarness()
    harness.topics.create("t", 4)
    ids, generation = classic_group(harness, "t", 4)
    newcomer = SimulatedMember(harness, ["t"])
    newcomer.beat()
    classic = ClassicMember(harness, ["t"], ids[0])
    classic.generation = generation
    classic.step()
    expected = consumer_snapshot(harness.coordinator)
    classic_members = [m for m in expected["members"].values() if m.classic is not None]
    assert len(classic_members) == 2 and classic_members[0].classic.session_timeout_ms == 10_000
    for compacted in (False, True):
        fresh, _ = reload(harness, compacted=compacted)
        assert consumer_snapshot(fresh) == expected
        group = fresh.group("g")
        assert group is not None and group.state is GroupState.EMPTY and not group.members
