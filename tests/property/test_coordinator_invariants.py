"""Seeded random group scenarios: after every step, no partition has two owners in a generation,
committed offsets never go backwards unless a client committed so, and replay rebuilds the state."""

from __future__ import annotations

import random

import pytest

from strom.coordinator import GroupState
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.join_group import JoinGroupResponse
from tests.unit.coordinator.harness import Harness
from tests.unit.coordinator.test_load import reload, snapshot

PARTITIONS = [("t", index) for index in range(6)]


def encode_assignment(partitions: list[tuple[str, int]]) -> bytes:
    return ",".join(f"{topic}-{index}" for topic, index in partitions).encode()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_scenario_keeps_invariants(seed: int) -> None:
    rng = random.Random(seed)
    harness = Harness()
    # client state: member id -> (instance id, generation, assignment known)
    clients: dict[str, dict[str, object]] = {}
    owners: dict[int, dict[str, str]] = {}  # generation -> partition -> member
    expected_offsets: dict[tuple[str, int], int] = {}

    def record_assignment(generation: int, member_id: str, assignment: bytes) -> None:
        per_generation = owners.setdefault(generation, {})
        for item in filter(None, assignment.decode().split(",")):
            assert per_generation.setdefault(item, member_id) == member_id, (
                f"{item} owned twice in {generation}"
            )

    def on_join(box: list[JoinGroupResponse], instance_id: str | None) -> None:
        if box and box[0].error_code == ErrorCode.NONE:
            response = box[0]
            clients[response.member_id] = {"instance": instance_id, "generation": response.generation_id}
            if response.leader == response.member_id and response.members:
                ids = [member.member_id for member in response.members]
                plan = {
                    member_id: [p for i, p in enumerate(PARTITIONS) if i % len(ids) == n]
                    for n, member_id in enumerate(ids)
                }
                result = harness.sync(
                    "g",
                    response.member_id,
                    response.generation_id,
                    {m: encode_assignment(p) for m, p in plan.items()},
                )
                if result and result[0].error_code == ErrorCode.NONE:
                    # a restarted static member owns what its instance owned: identify owners by instance
                    owner = instance_id or response.member_id
                    record_assignment(response.generation_id, owner, result[0].assignment)

    parked: list[tuple[list[JoinGroupResponse], str | None]] = []
    for _step in range(1500):
        action = rng.random()
        if action < 0.15 and len(clients) < 6:
            instance_id = rng.choice([None, None, "s1", "s2"])
            if instance_id is None:
                first = harness.join(session_timeout_ms=8_000)
                box = harness.join(member_id=first[0].member_id, session_timeout_ms=8_000)
            else:
                box = harness.join(instance_id=instance_id, session_timeout_ms=8_000)
            parked.append((box, instance_id))
        elif action < 0.45 and clients:
            member_id = rng.choice(sorted(clients))
            generation = int(clients[member_id]["generation"])  # type: ignore[call-overload]
            error = harness.heartbeat("g", member_id, generation)
            if error == ErrorCode.REBALANCE_IN_PROGRESS:
                instance = clients[member_id]["instance"]
                assert instance is None or isinstance(instance, str)
                rejoin = harness.join(member_id=member_id, instance_id=instance, session_timeout_ms=8_000)
                parked.append((rejoin, instance))
            elif error == ErrorCode.NONE:
                result = harness.sync("g", member_id, generation)
                if result and result[0].error_code == ErrorCode.NONE:
                    owner = str(clients[member_id]["instance"] or member_id)
                    record_assignment(generation, owner, result[0].assignment)
            else:
                clients.pop(member_id)
        elif action < 0.55 and clients:
            member_id = rng.choice(sorted(clients))
            harness.leave("g", [(member_id, None)])
            clients.pop(member_id)
        elif action < 0.75:
            key = rng.choice(PARTITIONS)
            offset = expected_offsets.get(key, 0) + rng.randint(0, 5)
            if clients:
                member_id = rng.choice(sorted(clients))
                generation = int(clients[member_id]["generation"])  # type: ignore[call-overload]
                commit_result = harness.commit(
                    "g", {key: offset}, member_id=member_id, generation_id=generation
                )
            else:
                commit_result = harness.commit("g", {key: offset})
            if commit_result.get(key) == ErrorCode.NONE:
                expected_offsets[key] = offset
        else:
            harness.advance(rng.choice([100, 1_000, 3_000, 9_000]))
        still_parked = []
        for box, instance_id in parked:
            if box:
                on_join(box, instance_id)
            else:
                still_parked.append((box, instance_id))
        parked = still_parked
        group = harness.coordinator.group("g")
        if group is not None:
            committed = {key: value.offset for key, value in group.offsets.items()}
            assert committed == expected_offsets
            if group.state is GroupState.STABLE:
                record_assignment(group.generation_id, "", b"")  # ownership map exists for the generation
                seen: set[str] = set()
                for member in group.members.values():
                    for item in filter(None, member.assignment.decode().split(",")):
                        assert item not in seen
                        seen.add(item)
        if _step % 100 == 0:
            fresh, _ = reload(harness)
            loaded, live = snapshot(fresh), snapshot(harness.coordinator)
            for group_id, live_state in live.items():
                if live_state[0] in (GroupState.STABLE, GroupState.EMPTY):
                    assert loaded[group_id][1:] == live_state[1:] or live_state[0] is GroupState.EMPTY
                    assert loaded[group_id][-1] == live_state[-1]
