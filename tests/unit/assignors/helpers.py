"""Building members and reading results in assignor tests."""

from __future__ import annotations

from strom.assignors import Assignment, GroupMember, Subscription, TopicPartition


def member(
    member_id: str,
    topics: list[str],
    owned: list[TopicPartition] | None = None,
    generation: int = -1,
    user_data: bytes | None = None,
    instance_id: str | None = None,
    rack_id: str | None = None,
) -> GroupMember:
    return GroupMember(
        member_id=member_id,
        group_instance_id=instance_id,
        subscription=Subscription(
            topics=topics,
            user_data=user_data,
            owned_partitions=owned or [],
            generation_id=generation,
            rack_id=rack_id,
        ),
    )


def partitions_of(result: dict[str, Assignment]) -> dict[str, list[TopicPartition]]:
    return {member_id: sorted(assignment.partitions) for member_id, assignment in result.items()}


def spread(topic: str, *partitions: int) -> list[TopicPartition]:
    return [(topic, partition) for partition in partitions]
