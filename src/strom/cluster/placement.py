"""Replica placement: which brokers hold the partitions of a new topic (or of new partitions).

Goals, in order: every partition's replicas on distinct brokers; the first replica (the preferred
leader) of consecutive partitions on consecutive brokers, so leaderships spread evenly; the
followers of a broker's partitions spread over the other brokers rather than piling onto its
neighbour (the follower offset shifts by one every time the partitions wrap around the brokers);
and, when every broker has ``broker.rack`` set, the replicas of a partition on as many different
racks as there are (brokers are interleaved rack by rack, and a follower on a rack that already
holds a replica is skipped while some rack has none).

Pure functions: the caller picks ``start_index`` and ``replica_shift`` (at random for a new topic,
so topics do not all start on broker 0; fixed in tests).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from strom.base import limits
from strom.protocol.errors import ErrorCode


class PlacementError(ValueError):
    """The request cannot be placed; ``error`` is the code CreateTopics/CreatePartitions answer."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


def rack_alternated(brokers: Mapping[int, str | None]) -> list[int]:
    """Broker ids interleaved by rack: first broker of each rack, then the second of each, ..."""
    by_rack: dict[str, list[int]] = {}
    for node_id in sorted(brokers):
        by_rack.setdefault(brokers[node_id] or "", []).append(node_id)
    racks = [by_rack[rack] for rack in sorted(by_rack)]
    ordered: list[int] = []
    for position in range(max(len(members) for members in racks)):
        ordered.extend(members[position] for members in racks if position < len(members))
    return ordered


def _follower_index(first: int, shift: int, replica: int, broker_count: int) -> int:
    """Index of a follower: 1..broker_count-1 places after the first replica, moved by ``shift``."""
    return (first + 1 + (shift + replica) % (broker_count - 1)) % broker_count


def assign_replicas(
    brokers: Mapping[int, str | None],
    partition_count: int,
    replication_factor: int,
    *,
    start_index: int = 0,
    replica_shift: int = 0,
    first_partition: int = 0,
) -> dict[int, tuple[int, ...]]:
    """Replicas for partitions ``first_partition .. first_partition + partition_count - 1``.

    ``brokers`` maps each live broker to its rack (None when unset); placement is rack-aware only
    when every broker has a rack.
    """
    if partition_count < 1 or first_partition + partition_count > limits.partitions_per_topic_max:
        raise PlacementError(
            ErrorCode.INVALID_PARTITIONS,
            f"a topic has 1 to {limits.partitions_per_topic_max} partitions, "
            f"asked for {first_partition + partition_count}",
        )
    if replication_factor < 1:
        raise PlacementError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor must be at least 1, got {replication_factor}",
        )
    if replication_factor > len(brokers):
        raise PlacementError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {replication_factor} is larger than the {len(brokers)} available broker(s)",
        )
    rack_aware = all(rack is not None for rack in brokers.values())
    ordered = rack_alternated(brokers) if rack_aware else sorted(brokers)
    rack_of = {node_id: brokers[node_id] for node_id in ordered}
    rack_count = len(set(rack_of.values()))
    count = len(ordered)
    start = start_index % count
    # The shift grows by one each time the partitions wrap around the brokers, counted from
    # partition 0, so added partitions continue the pattern of the first ones.
    shift = replica_shift % count + max(0, first_partition - 1) // count
    assignment: dict[int, tuple[int, ...]] = {}
    for partition in range(first_partition, first_partition + partition_count):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (start + partition) % count
        replicas = [ordered[first]]
        racks_used = {rack_of[ordered[first]]}
        step = 0
        while len(replicas) < replication_factor:
            assert step < 2 * count, "placement must find a broker within two turns"
            candidate = ordered[_follower_index(first, shift, step, count)]
            step += 1
            if candidate in replicas:
                continue
            if rack_aware and rack_of[candidate] in racks_used and len(racks_used) < rack_count:
                continue
            replicas.append(candidate)
            racks_used.add(rack_of[candidate])
        assignment[partition] = tuple(replicas)
    return assignment


def validate_assignment(
    assignment: Mapping[int, Sequence[int]],
    known_brokers: Collection[int],
    *,
    first_partition: int = 0,
    replication_factor: int | None = None,
) -> dict[int, tuple[int, ...]]:
    """Check an assignment given by the user (CreateTopics / CreatePartitions); returns it sorted.

    Partitions must be exactly ``first_partition ..``; every partition the same number of replicas
    (``replication_factor`` when given), none twice, all of them registered brokers.
    """
    partitions = sorted(assignment)
    expected = list(range(first_partition, first_partition + len(partitions)))
    if not partitions or partitions != expected:
        raise PlacementError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"the assignment must cover partitions {first_partition}..{first_partition + max(len(partitions), 1) - 1}"
            f" exactly, got {partitions}",
        )
    if first_partition + len(partitions) > limits.partitions_per_topic_max:
        raise PlacementError(
            ErrorCode.INVALID_PARTITIONS, f"a topic has at most {limits.partitions_per_topic_max} partitions"
        )
    sizes = {len(assignment[partition]) for partition in partitions}
    if replication_factor is not None:
        sizes.add(replication_factor)
    if len(sizes) != 1 or 0 in sizes:
        raise PlacementError(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "every partition needs the same, non-zero number of replicas"
            + (f" ({replication_factor})" if replication_factor is not None else ""),
        )
    checked: dict[int, tuple[int, ...]] = {}
    for partition in partitions:
        replicas = tuple(assignment[partition])
        if len(set(replicas)) != len(replicas):
            raise PlacementError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"partition {partition} lists a broker twice: {list(replicas)}",
            )
        unknown = sorted(set(replicas) - set(known_brokers))
        if unknown:
            raise PlacementError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"partition {partition} names unregistered broker(s) {unknown}",
            )
        checked[partition] = replicas
    return checked
