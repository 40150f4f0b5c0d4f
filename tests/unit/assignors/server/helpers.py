"""Building server-side assignor inputs by topic name and reading results back by topic name."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from strom.assignors.server import GroupSpec, MemberSpec, TargetAssignment, TopicSpec


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, f"strom-test-topic:{name}")


def topic(name: str, partition_count: int, racks: Iterable[Iterable[str]] = ()) -> TopicSpec:
    return TopicSpec(
        topic_id=topic_id(name),
        name=name,
        partition_count=partition_count,
        partition_racks=tuple(frozenset(partition_racks) for partition_racks in racks),
    )


def member(
    member_id: str,
    topics: Iterable[str],
    assigned: Mapping[str, Iterable[int]] | None = None,
    instance_id: str | None = None,
    rack: str | None = None,
) -> MemberSpec:
    return MemberSpec(
        member_id=member_id,
        instance_id=instance_id,
        rack_id=rack,
        subscribed_topic_ids=frozenset(topic_id(name) for name in topics),
        assigned={topic_id(name): frozenset(partitions) for name, partitions in (assigned or {}).items()},
    )


def group(members: Iterable[MemberSpec], topics: Iterable[TopicSpec]) -> GroupSpec:
    return GroupSpec(
        members={spec.member_id: spec for spec in members},
        topics={spec.topic_id: spec for spec in topics},
    )


def by_name(
    result: Mapping[str, TargetAssignment], topics: Iterable[TopicSpec]
) -> dict[str, dict[str, list[int]]]:
    """member id -> topic name -> sorted partitions."""
    names = {spec.topic_id: spec.name for spec in topics}
    return {
        member_id: {
            names[tid]: sorted(partitions)
            for tid, partitions in sorted(assignment.items(), key=lambda item: names[item[0]])
        }
        for member_id, assignment in result.items()
    }


def counts(result: Mapping[str, TargetAssignment]) -> dict[str, int]:
    return {
        member_id: sum(len(partitions) for partitions in assignment.values())
        for member_id, assignment in result.items()
    }


def with_current(spec: GroupSpec, result: Mapping[str, TargetAssignment]) -> GroupSpec:
    """The group with every member's current target set to ``result`` (members absent from it: none)."""
    return GroupSpec(
        members={
            member_id: MemberSpec(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                subscribed_topic_ids=m.subscribed_topic_ids,
                assigned=dict(result.get(member_id, {})),
            )
            for member_id, m in spec.members.items()
        },
        topics=spec.topics,
    )
