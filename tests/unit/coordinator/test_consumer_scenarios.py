"""Seeded scenarios of whole consumer groups: members join, heartbeat (sometimes without saying
what they own, sometimes late), leave, crash, leave for a while as static members; topics appear
and grow; the coordinator is reloaded from its log. Invariants checked at every step:

- no partition is owned by two members (the members' own view, as their callbacks would show it),
- the coordinator's ownership index matches the members' current assignments,
- a reload from the log (whole or compacted) gives the same group,
and once everyone heartbeats for a while with nothing changing, the group is Stable with every
partition of the subscribed topics owned by exactly one member.
"""

from __future__ import annotations

import random

import pytest

from strom.coordinator.consumer_group import MemberState
from strom.protocol.errors import ErrorCode
from tests.unit.coordinator.consumer_harness import ConsumerHarness, SimulatedMember, assert_exclusive
from tests.unit.coordinator.test_consumer_replay import consumer_snapshot, reload


class Member(SimulatedMember):
    """A simulated member that may forget to report what it owns and may crash."""

    def step(self, rng: random.Random) -> None:
        if self.epoch == 0:
            self.beat()
        else:
            response = self.harness.heartbeat(
                self.group_id,
                self.member_id,
                self.epoch,
                owned=None if rng.random() < 0.2 else self.owned,
                instance_id=self.instance_id,
            )
            self.last = response
            if response.error_code == ErrorCode.NONE:
                self.epoch = response.member_epoch
                if response.assignment is not None:
                    self.owned = {
                        entry.topic_id: frozenset(entry.partitions)
                        for entry in response.assignment.topic_partitions
                        if entry.partitions
                    }
            else:
                # Fenced or unknown: it lets everything go and joins again.
                assert response.error_code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID), (
                    response
                )
                self.owned = {}
                self.epoch = 0


def check_index(harness: ConsumerHarness) -> None:
    group = harness.coordinator.group("g")
    if group is None or group.consumer is None:
        return
    consumer = group.consumer
    owners: dict[tuple[object, int], str] = {}
    for member_id, current in consumer.current.items():
        for partition in current.owned_partitions():
            assert partition not in owners, f"{partition} owned by {owners[partition]} and {member_id}"
            owners[partition] = member_id
    assert owners == consumer.partition_owners


@pytest.mark.parametrize("seed", range(12))
def test_random_scenario(seed: int) -> None:
    rng = random.Random(seed)
    harness = ConsumerHarness(real_assignors=True, consumer_group_session_timeout_ms=5000)
    harness.topics.create("a", rng.randint(1, 12))
    harness.topics.create("b", rng.randint(1, 6))
    live: list[Member] = []
    gone: list[Member] = []
    instance = 0
    for _ in range(120):
        action = rng.random()
        if action < 0.12 and len(live) < 8:
            static = rng.random() < 0.3
            if static:
                instance += 1
            live.append(
                Member(
                    harness,
                    rng.choice([["a"], ["a", "b"], ["b"]]) if rng.random() < 0.8 else None,
                    regex=None if rng.random() < 0.8 else "a|b",
                    instance_id=f"i-{instance}" if static else None,
                )
            )
            if live[-1].names is None and live[-1].regex is None:
                live[-1].names = ["a"]
        elif action < 0.18 and live:
            member = live.pop(rng.randrange(len(live)))
            member.leave(static=member.instance_id is not None and rng.random() < 0.5)
            gone.append(member)
        elif action < 0.21 and live:
            # A crash: it stops heartbeating (its session expires) and owns nothing from now on.
            member = live.pop(rng.randrange(len(live)))
            member.owned = {}
            gone.append(member)
        elif action < 0.24:
            name = rng.choice(["a", "b"])
            spec = harness.topics.topic(name)
            assert spec is not None
            harness.topics.create(name, spec.partition_count + rng.randint(1, 3))
            harness.coordinator.topics_changed([name])
        elif action < 0.27:
            harness.advance(rng.randint(100, 2500))
        elif action < 0.29:
            expected = consumer_snapshot(harness.coordinator) if harness.coordinator.group("g") else None
            for compacted in (False, True):
                fresh, _ = reload(harness, compacted=compacted)
                if expected is not None:
                    assert consumer_snapshot(fresh) == expected
        for member in live:
            if rng.random() < 0.8:
                member.step(rng)
            assert_exclusive(live)
        check_index(harness)
        harness.advance(rng.randint(0, 400))

    # Quiet: everyone heartbeats until the group settles.
    for _ in range(40):
        for member in live:
            member.step(rng)
            assert_exclusive(live)
        harness.advance(500)
        group = harness.coordinator.group("g")
        if group is not None and group.consumer is not None and group.consumer.state().value == "Stable":
            break
    group = harness.coordinator.group("g")
    if not live:
        return
    assert group is not None and group.consumer is not None
    consumer = group.consumer
    assert consumer.state().value == "Stable", consumer.state()
    assert set(consumer.members) == {member.member_id for member in live}
    assert all(consumer.current_of(m.member_id).state is MemberState.STABLE for m in live)
    subscribed = set()
    for member in live:
        names = set(member.names or []) | ({"a", "b"} if member.regex else set())
        subscribed |= names
    expected = {
        (spec.topic_id, p)
        for name in subscribed
        if (spec := harness.topics.topic(name)) is not None
        for p in range(spec.partition_count)
    }
    owned = set().union(*(member.partitions() for member in live))
    assert owned == expected


@pytest.mark.parametrize("seed", range(8))
def test_random_mixed_scenario(seed: int) -> None:
    """Consumer-protocol and classic (cooperative) members together, joining and leaving at random
    around one consumer-protocol member that stays (so the group stays a consumer group; the way
    back to classic is test_consumer_migration's): never two owners across both kinds; Stable and
    complete once quiet."""
    from tests.unit.coordinator.test_consumer_migration import ClassicMember

    rng = random.Random(1000 + seed)
    harness = ConsumerHarness(real_assignors=True)
    spec = harness.topics.create("a", rng.randint(2, 10))
    anchor = Member(harness, ["a"])
    anchor.beat()
    consumers: list[Member] = [anchor]
    classics: list[ClassicMember] = []

    def classic_step(member: ClassicMember) -> None:
        error = member.heartbeat()
        if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            if error == ErrorCode.UNKNOWN_MEMBER_ID:
                member.member_id = ""
            member.owned = set()
            member.join_and_sync()
        elif error == ErrorCode.REBALANCE_IN_PROGRESS:
            member.join_and_sync()
        else:
            assert error == ErrorCode.NONE, error

    def exclusive() -> None:
        seen: set[tuple[object, int]] = set()
        for member in consumers:
            assert seen.isdisjoint(member.partitions())
            seen |= member.partitions()
        for classic in classics:
            owned = {(spec, p) for _, p in classic.owned}
            assert seen.isdisjoint(owned), (seen, owned)
            seen |= owned

    for _ in range(80):
        action = rng.random()
        if action < 0.12 and len(consumers) + len(classics) < 6:
            if rng.random() < 0.5:
                consumers.append(Member(harness, ["a"]))
            else:
                classic = ClassicMember(harness, ["a"])
                classic.join_and_sync()
                classics.append(classic)
        elif action < 0.18 and len(consumers) > 1:
            consumers.pop(rng.randrange(1, len(consumers))).leave()
        elif action < 0.22 and classics:
            leaving = classics.pop(rng.randrange(len(classics)))
            harness.leave("g", [(leaving.member_id, None)])
        for member in consumers:
            if rng.random() < 0.8:
                member.step(rng)
            exclusive()
        for classic in classics:
            if rng.random() < 0.8:
                classic_step(classic)
            exclusive()
        harness.advance(rng.randint(0, 300))

    for _ in range(30):
        for member in consumers:
            member.step(rng)
            exclusive()
        for classic in classics:
            classic_step(classic)
            exclusive()
        harness.advance(300)
    owned = set().union(*(m.partitions() for m in consumers)) | {
        (spec, p) for classic in classics for _, p in classic.owned
    }
    group = harness.coordinator.group("g")
    assert group is not None and group.consumer is not None
    assert group.consumer.state().value == "Stable"
    assert owned == {(spec, p) for p in range(harness.topics.specs["a"].partition_count)}
