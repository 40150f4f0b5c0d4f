"""One member's step towards its target assignment (KIP-848's reconciliation), as a pure function.

The coordinator computes a target assignment for the whole group; each member then moves towards
its own target one heartbeat at a time, so that no partition is ever owned by two members:

1. A member that owns partitions outside its target first has to give them up: it stays at its
   epoch, in UNREVOKED_PARTITIONS, with those partitions pending revocation, and is told to own
   only the rest. It moves on once a heartbeat's owned partitions show it let them go.
2. It then moves to the target's epoch and gets every partition of its target that nobody else
   owns (assigned or pending revocation). Those still owned by a member that has not revoked
   them yet are handed over later (UNRELEASED_PARTITIONS), when that member has let them go.

A member that keeps a partition keeps it throughout: only partitions leaving it are revoked.
"""

from __future__ import annotations

from collections.abc import Callable

from strom.coordinator.consumer_group import (
    Assignment,
    MemberAssignment,
    MemberState,
    TopicPartition,
    assignment_of,
    partitions_of,
)


def reconcile(
    current: MemberAssignment,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owned_by_another: Callable[[TopicPartition], bool],
) -> MemberAssignment:
    """The member's next current assignment.

    ``owned`` is what the member's heartbeat says it owns (None when the heartbeat left it out:
    unchanged since the last one, so it may still own what it was asked to revoke);
    ``owned_by_another(partition)`` whether another member owns the partition now.
    """
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if _still_owns_any(owned, current.pending_revocation):
            return current
        # Revocation acknowledged: the partitions are free; move on from what the member kept.
        current = MemberAssignment(
            member_epoch=current.member_epoch,
            previous_member_epoch=current.previous_member_epoch,
            state=MemberState.UNRELEASED_PARTITIONS,
            assigned=current.assigned,
        )
        return _next(current, target_epoch, target, owned, owned_by_another)
    if current.member_epoch == target_epoch:
        if current.state is MemberState.STABLE:
            return current
        # Waiting for partitions others held: take those released since.
        return _take_free(current, target_epoch, target, owned_by_another, current.previous_member_epoch)
    return _next(current, target_epoch, target, owned, owned_by_another)


def _next(
    current: MemberAssignment,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owned_by_another: Callable[[TopicPartition], bool],
) -> MemberAssignment:
    assigned = partitions_of(current.assigned)
    wanted = partitions_of(target)
    revoked = assigned - wanted
    if revoked and _still_owns_any(owned, assignment_of(revoked)):
        return MemberAssignment(
            member_epoch=current.member_epoch,
            previous_member_epoch=current.previous_member_epoch,
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=assignment_of(assigned & wanted),
            pending_revocation=assignment_of(revoked),
        )
    kept = MemberAssignment(
        member_epoch=current.member_epoch,
        previous_member_epoch=current.previous_member_epoch,
        state=current.state,
        assigned=assignment_of(assigned & wanted),
    )
    return _take_free(kept, target_epoch, target, owned_by_another, current.member_epoch)


def _take_free(
    current: MemberAssignment,
    target_epoch: int,
    target: Assignment,
    owned_by_another: Callable[[TopicPartition], bool],
    previous_member_epoch: int,
) -> MemberAssignment:
    assigned = partitions_of(current.assigned)
    missing = partitions_of(target) - assigned
    free = {partition for partition in missing if not owned_by_another(partition)}
    return MemberAssignment(
        member_epoch=target_epoch,
        previous_member_epoch=previous_member_epoch,
        state=MemberState.UNRELEASED_PARTITIONS if missing - free else MemberState.STABLE,
        assigned=assignment_of(assigned | free),
    )


def _still_owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    if not partitions:
        return False
    if owned is None:
        return True
    return not partitions_of(owned).isdisjoint(partitions_of(partitions))
