"""ListOffsets for Admin and Consumer alike: earliest, latest or by timestamp, sent to each leader."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from strom.client.cluster import TopicPartition
from strom.client.errors import KafkaError, error_for_code
from strom.client.transport import Transport
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse

__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "OffsetAndTimestamp", "list_offsets", "timestamp_spec"]

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    """An offset ListOffsets found, with the timestamp of its record (-1 for earliest/latest)."""

    offset: int
    timestamp: int


def timestamp_spec(spec: str | int) -> int:
    """``"earliest"``, ``"latest"`` or a timestamp in ms -> what ListOffsets takes."""
    if spec == "earliest":
        return EARLIEST_TIMESTAMP
    if spec == "latest":
        return LATEST_TIMESTAMP
    if isinstance(spec, int) and not isinstance(spec, bool):
        return spec
    raise ValueError(f"offset spec must be 'earliest', 'latest' or a timestamp in ms, not {spec!r}")


async def list_offsets(
    transport: Transport, specs: dict[TopicPartition, int], *, isolation_level: int = 0
) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    """Offsets for each partition (None where a timestamp is past the last record)."""
    for topic_partition in specs:
        transport.metadata.wanted_topics.add(topic_partition.topic)

    async def attempt() -> dict[TopicPartition, OffsetAndTimestamp | None]:
        missing = [tp for tp in specs if transport.metadata.leader_for(tp) is None]
        if missing or transport.metadata.stale(transport.clock.monotonic_ms()):
            await transport.refresh_metadata(sorted({tp.topic for tp in specs}))
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic_partition in specs:
            leader = transport.metadata.leader_for(topic_partition)
            if leader is None:
                info = transport.metadata.topics.get(topic_partition.topic)
                if info is None or (info.partitions and topic_partition.partition not in info.partitions):
                    raise error_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, context=str(topic_partition))
                raise KafkaError(f"no leader for {topic_partition}", ErrorCode.LEADER_NOT_AVAILABLE)
            by_leader.setdefault(leader, []).append(topic_partition)
        answers = await asyncio.gather(
            *(
                _ask_leader(transport, leader, tps, specs, isolation_level)
                for leader, tps in by_leader.items()
            )
        )
        results: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for answer in answers:
            results.update(answer)
        return results

    return await transport.with_retries(attempt)


async def _ask_leader(
    transport: Transport,
    leader: int,
    topic_partitions: list[TopicPartition],
    specs: dict[TopicPartition, int],
    isolation_level: int,
) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    topics: dict[str, ListOffsetsRequest.ListOffsetsTopic] = {}
    for topic_partition in topic_partitions:
        topic = topics.setdefault(
            topic_partition.topic, ListOffsetsRequest.ListOffsetsTopic(name=topic_partition.topic)
        )
        topic.partitions.append(
            ListOffsetsRequest.ListOffsetsPartition(
                partition_index=topic_partition.partition,
                current_leader_epoch=-1,
                timestamp=specs[topic_partition],
            )
        )
    request = ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=list(topics.values()))
    response: ListOffsetsResponse = await transport.send(leader, request)
    results: dict[TopicPartition, OffsetAndTimestamp | None] = {}
    for topic_response in response.topics:
        for partition in topic_response.partitions:
            topic_partition = TopicPartition(topic_response.name, partition.partition_index)
            if partition.error_code != ErrorCode.NONE:
                raise error_for_code(partition.error_code, context=f"ListOffsets {topic_partition}")
            offset = partition.offset
            if offset < 0 and partition.old_style_offsets:
                offset = partition.old_style_offsets[0]
            results[topic_partition] = None if offset < 0 else OffsetAndTimestamp(offset, partition.timestamp)
    return results
