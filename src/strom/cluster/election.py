"""Leader election rules, as pure functions of a partition's assignment, ISR and the live brokers.

"Live" here means registered in ZooKeeper and not in controlled shutdown: a broker that asked to
shut down is never given a new leadership.

* **Offline** (the leader is gone, or the partition is new): the first replica in assignment order
  that is live and in the ISR. Every ISR member has every acknowledged record, so this loses
  nothing. When no ISR member is live, ``unclean.leader.election.enable`` decides: off, the
  partition stays without a leader until an ISR member returns; on, the first live replica leads
  (it may lack acknowledged records: the election is reported as unclean).
* **Preferred** (ElectLeaders, auto leader rebalance): the first replica of the assignment, if it
  is live and in the ISR.
* **Controlled shutdown**: the first live ISR replica other than the brokers shutting down.

The ISR never becomes empty: when every member is gone it is kept as it was, so that the first
member to come back is elected cleanly (it has everything that was acknowledged).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from strom.cluster.model import NO_LEADER


@dataclass(frozen=True)
class Election:
    leader: int  # NO_LEADER when nobody can lead
    isr: tuple[int, ...]
    unclean: bool = False


def live_isr(isr: Sequence[int], live: Collection[int]) -> tuple[int, ...]:
    """The ISR without the brokers that are gone; unchanged when none of it is left."""
    remaining = tuple(replica for replica in isr if replica in live)
    return remaining if remaining else tuple(isr)


def elect_offline(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], *, unclean_allowed: bool
) -> Election:
    for replica in replicas:
        if replica in live and replica in isr:
            return Election(replica, live_isr(isr, live))
    if unclean_allowed:
        for replica in replicas:
            if replica in live:
                return Election(replica, (replica,), unclean=True)
    return Election(NO_LEADER, live_isr(isr, live))


def elect_for_new_partition(replicas: Sequence[int], live: Collection[int]) -> Election | None:
    """A new partition: its live replicas form the ISR, the first of them leads; None if none is live."""
    isr = tuple(replica for replica in replicas if replica in live)
    if not isr:
        return None
    return Election(isr[0], isr)


def preferred_leader(replicas: Sequence[int], isr: Sequence[int], live: Collection[int]) -> int | None:
    """The preferred replica if it can lead now, else None."""
    if not replicas:
        return None
    preferred = replicas[0]
    return preferred if preferred in live and preferred in isr else None


def elect_for_shutdown(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], shutting_down: Collection[int]
) -> Election | None:
    """Move leadership off brokers shutting down; None if no other ISR member can take it."""
    remaining = tuple(replica for replica in isr if replica not in shutting_down)
    for replica in replicas:
        if replica in live and replica in remaining:
            return Election(replica, tuple(member for member in remaining if member in live) or remaining)
    return None
