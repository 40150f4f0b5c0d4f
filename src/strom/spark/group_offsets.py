"""Committing a pipeline's progress to a consumer group, so ``strom groups describe`` shows its lag.

The commit is a plain OffsetCommit with generation -1 and an empty member id, which the broker
accepts for a group that has no members (the pipeline never joins: it assigns partitions itself).
The Admin client's ``alter_group_offsets(group_id, {tp: offset})`` does exactly this; until that
method exists in the client, ``_commit_directly`` below sends the two requests itself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from strom.client.admin import Admin
from strom.client.cluster import TopicPartition
from strom.client.config import AdminConfig
from strom.client.errors import KafkaError, error_for_code
from strom.client.transport import LoopThread, Transport
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.protocol.messages.offset_commit import OffsetCommitRequest
from strom.spark.options import TopicPartitionKey
from strom.spark.planning import admin_config

__all__ = ["commit_group_offsets"]

log = logging.getLogger(__name__)

_GROUP_KEY_TYPE = 0


def commit_group_offsets(
    client_config: Mapping[str, str], group_id: str, offsets: Mapping[TopicPartitionKey, int]
) -> None:
    """Store ``offsets`` (the next offset to read, per partition) as ``group_id``'s committed offsets."""
    if not offsets:
        return
    config = admin_config(client_config)
    with Admin(config) as admin:
        alter = getattr(admin, "alter_group_offsets", None)
        if alter is not None:
            alter(group_id, {TopicPartition(*tp): offset for tp, offset in offsets.items()})
            return
    _commit_directly(config, group_id, offsets)


def _commit_directly(
    config: Mapping[str, str], group_id: str, offsets: Mapping[TopicPartitionKey, int]
) -> None:
    loop_thread = LoopThread("strom-spark-group-commit")
    admin_settings = AdminConfig.from_settings(dict(config))

    async def commit() -> None:
        transport = Transport(admin_settings)
        try:
            await transport.refresh_metadata([])
            found: Any = await transport.send_any(
                FindCoordinatorRequest(key=group_id, key_type=_GROUP_KEY_TYPE, coordinator_keys=[group_id])
            )
            if found.coordinators:
                answer = found.coordinators[0]
                code, node_id = answer.error_code, answer.node_id
            else:
                code, node_id = found.error_code, found.node_id
            if code != ErrorCode.NONE:
                raise error_for_code(code, context=f"find coordinator of group {group_id!r}")
            topics: dict[str, OffsetCommitRequest.OffsetCommitRequestTopic] = {}
            for (topic, partition), offset in sorted(offsets.items()):
                topics.setdefault(
                    topic, OffsetCommitRequest.OffsetCommitRequestTopic(name=topic)
                ).partitions.append(
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=partition, committed_offset=offset, committed_leader_epoch=-1
                    )
                )
            request = OffsetCommitRequest(
                group_id=group_id,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                retention_time_ms=-1,
                topics=list(topics.values()),
            )
            response: Any = await transport.send(node_id, request)
            for topic_response in response.topics:
                for partition_response in topic_response.partitions:
                    if partition_response.error_code != ErrorCode.NONE:
                        raise error_for_code(
                            partition_response.error_code,
                            context=f"commit offsets of group {group_id!r} for "
                            f"{topic_response.name}-{partition_response.partition_index}",
                        )
        finally:
            await transport.close()

    try:
        loop_thread.run(commit(), timeout_s=admin_settings.request_timeout_ms / 1000 * 2 + 5)
    except KafkaError:
        raise
    finally:
        loop_thread.stop()
