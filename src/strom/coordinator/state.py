"""The group states and the one table of allowed transitions."""

from __future__ import annotations

from enum import Enum


class GroupState(Enum):
    EMPTY = "Empty"
    """No members; the group may still hold committed offsets.

    JoinGroup: a new member is added and the group moves to PreparingRebalance (with the initial
    rebalance delay). SyncGroup / Heartbeat: UNKNOWN_MEMBER_ID. LeaveGroup: UNKNOWN_MEMBER_ID per member.
    OffsetCommit: allowed with generation -1 and no member id (manual assignment). DeleteGroups: allowed.
    Offsets expire here; an Empty group with no offsets left goes Dead.
    """

    PREPARING_REBALANCE = "PreparingRebalance"
    """Members are (re)joining; their JoinGroup requests are parked.

    Moves on to CompletingRebalance (or Empty, if nobody is left) when every known member has
    rejoined and no pending member remains, or when the rebalance timeout (the initial delay for a
    new group) expires. SyncGroup: REBALANCE_IN_PROGRESS. Heartbeat: REBALANCE_IN_PROGRESS (re-arms
    the session). OffsetCommit: allowed for members of the current generation (as Kafka 2.6).
    DeleteGroups: NON_EMPTY_GROUP.
    """

    COMPLETING_REBALANCE = "CompletingRebalance"
    """The new generation is formed; waiting for the leader's assignment in SyncGroup.

    Follower SyncGroups are parked; the leader's assignment is written to __consumer_offsets and on
    success every parked member is answered and the group becomes Stable; a write error sends it
    back to PreparingRebalance. Heartbeat: NONE. OffsetCommit: REBALANCE_IN_PROGRESS. A JoinGroup
    with changed metadata (or a member leaving or expiring) starts a new rebalance.
    """

    STABLE = "Stable"
    """Every member has its assignment. Heartbeat, SyncGroup (returns the stored assignment) and
    OffsetCommit succeed for the current generation; a JoinGroup by the leader or with changed
    metadata, a new member, a leave or a session expiry moves it to PreparingRebalance.
    """

    DEAD = "Dead"
    """Being removed (deleted, expired or its partition unloaded): every request gets
    COORDINATOR_NOT_AVAILABLE, so the client looks the coordinator up again."""


ALLOWED_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.EMPTY,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
            GroupState.DEAD,
        }
    ),
}


class IllegalStateTransition(AssertionError):
    """A programmer error: the coordinator tried a move the table forbids."""

    def __init__(self, group_id: str, current: GroupState, target: GroupState) -> None:
        super().__init__(
            f"group {group_id!r}: illegal transition from {current.value} to {target.value} "
            f"(allowed from: {sorted(state.value for state in ALLOWED_PREVIOUS[target])})"
        )
        self.group_id = group_id
        self.current = current
        self.target = target


def check_transition(group_id: str, current: GroupState, target: GroupState) -> None:
    if current not in ALLOWED_PREVIOUS[target]:
        raise IllegalStateTransition(group_id, current, target)


def parse_state(name: str) -> GroupState | None:
    """A state by its protocol name, case-insensitively (ListGroups' states filter), or None."""
    for state in GroupState:
        if state.value.lower() == name.lower():
            return state
    return None
