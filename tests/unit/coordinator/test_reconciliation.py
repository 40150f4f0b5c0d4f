"""The reconciliation step (a pure function): revoke first, then take only what nobody owns."""

from __future__ import annotations

import random
import uuid

import pytest

from strom.coordinator.consumer_group import (
    JOINING,
    MemberAssignment,
    MemberState,
    TopicPartition,
    assignment_of,
    partitions_of,
)
from strom.coordinator.reconciliation import reconcile

T = uuid.UUID(int=7)


def parts(*indexes: int) -> dict[uuid.UUID, frozenset[int]]:
    return {T: frozenset(indexes)} if indexes else {}


def nobody(partition: TopicPartition) -> bool:
    return False


def stable(epoch: int, *indexes: int) -> MemberAssignment:
    return MemberAssignment(epoch, epoch - 1, MemberState.STABLE, parts(*indexes))


def test_a_joining_member_gets_its_free_target_at_the_target_epoch() -> None:
    result = reconcile(JOINING, 4, parts(0, 1), {}, nobody)
    assert result == MemberAssignment(4, 0, MemberState.STABLE, parts(0, 1))


def test_partitions_owned_by_another_are_not_given_yet() -> None:
    result = reconcile(JOINING, 4, parts(0, 1), {}, lambda partition: partition == (T, 1))
    assert result == MemberAssignment(4, 0, MemberState.UNRELEASED_PARTITIONS, parts(0))
    # Released later: the next step takes it, at the same epoch.
    later = reconcile(result, 4, parts(0, 1), None, nobody)
    assert later == MemberAssignment(4, 0, MemberState.STABLE, parts(0, 1))


def test_revocation_comes_first_and_the_epoch_waits_for_it() -> None:
    current = stable(3, 0, 1, 2)
    step = reconcile(current, 4, parts(0, 5), parts(0, 1, 2), nobody)
    assert step == MemberAssignment(3, 2, MemberState.UNREVOKED_PARTITIONS, parts(0), parts(1, 2))
    # Still owning a revoked partition (or not saying): no move.
    assert reconcile(step, 4, parts(0, 5), parts(0, 1), nobody) == step
    assert reconcile(step, 4, parts(0, 5), None, nobody) == step
    # Acknowledged: the target epoch, and the new partition.
    done = reconcile(step, 4, parts(0, 5), parts(0), nobody)
    assert done == MemberAssignment(4, 3, MemberState.STABLE, parts(0, 5))


def test_a_member_that_already_let_go_moves_on_at_once() -> None:
    result = reconcile(stable(3, 0, 1), 4, parts(0), parts(0), nobody)
    assert result == MemberAssignment(4, 3, MemberState.STABLE, parts(0))


def test_a_stable_member_at_the_target_epoch_is_unchanged() -> None:
    current = stable(4, 0, 1)
    assert reconcile(current, 4, parts(0, 1), parts(0, 1), nobody) is current


@pytest.mark.parametrize("seed", range(30))
def test_random_steps_keep_the_invariants(seed: int) -> None:
    """Whatever the current state, target and ownership: a partition is never added while another
    owns it, a partition kept by the target is never taken away, and the epoch only moves to the
    target's once nothing is left to revoke."""
    rng = random.Random(seed)
    everything = list(range(12))
    current = MemberAssignment(
        rng.randint(1, 5),
        0,
        rng.choice([MemberState.STABLE, MemberState.UNRELEASED_PARTITIONS]),
        parts(*rng.sample(everything, rng.randint(0, 6))),
    )
    target_epoch = current.member_epoch
    target = dict(current.assigned)
    for _ in range(10):
        if rng.random() < 0.6:
            # A target changes only with a new epoch.
            target = parts(*rng.sample(everything, rng.randint(0, 6)))
            target_epoch += 1
        others = set(rng.sample(everything, rng.randint(0, 6))) - partitions_of_indexes(current)
        owned = rng.choice([None, dict(current.assigned), {}])
        result = reconcile(current, target_epoch, target, owned, lambda p, others=others: p[1] in others)
        added = partitions_of(result.assigned) - partitions_of(current.assigned)
        assert all(p[1] not in others for p in added)
        kept = partitions_of(current.assigned) & partitions_of(target)
        assert kept <= partitions_of(result.assigned)
        assert partitions_of(result.assigned) <= partitions_of(target) | partitions_of(current.assigned)
        if result.state is MemberState.UNREVOKED_PARTITIONS:
            assert result.member_epoch == current.member_epoch
            if current.state is not MemberState.UNREVOKED_PARTITIONS:
                # (A revocation under way is finished even if a newer target wants a partition
                # back: the member gets it again once it acknowledged.)
                assert partitions_of(result.pending_revocation).isdisjoint(partitions_of(target))
        else:
            assert not result.pending_revocation
            assert partitions_of(result.assigned) <= partitions_of(target)
            assert result.member_epoch == target_epoch
        current = result if rng.random() < 0.7 else replace_owned(result)


def partitions_of_indexes(current: MemberAssignment) -> set[int]:
    return {p for _, p in partitions_of(current.assigned) | partitions_of(current.pending_revocation)}


def replace_owned(current: MemberAssignment) -> MemberAssignment:
    """The member acknowledged everything it was asked to revoke."""
    if current.state is not MemberState.UNREVOKED_PARTITIONS:
        return current
    return reconcile(current, current.member_epoch, current.assigned, dict(current.assigned), nobody)


def test_assignment_helpers_round_trip() -> None:
    pairs = {(T, 1), (T, 3), (uuid.UUID(int=9), 0)}
    assert partitions_of(assignment_of(pairs)) == pairs
