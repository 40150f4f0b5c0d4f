"""DeleteRecords 0-2: move a partition's log start offset forward (offset -1: the high watermark)."""

from __future__ import annotations

import logging

from strom.broker.context import RequestContext
from strom.broker.registry import handles
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from strom.security.acl import ResourceType
from strom.storage import StorageError

HIGH_WATERMARK = -1

log = logging.getLogger("strom.broker")

Partition = DeleteRecordsResponse.DeleteRecordsPartitionResult


@handles(DeleteRecordsRequest, DeleteRecordsResponse, 0, 2)
async def handle_delete_records(
    context: RequestContext, request: DeleteRecordsRequest
) -> DeleteRecordsResponse:
    state = context.broker
    authorizer = state.authorizer
    topics: list[DeleteRecordsResponse.DeleteRecordsTopicResult] = []
    for topic in request.topics:
        partitions: list[Partition] = []
        # With authorization on: DELETE on the topic, whether it exists or not.
        refused = authorizer is not None and not authorizer.authorize(
            context.principal, context.client_host, AclOperation.DELETE, ResourceType.TOPIC, topic.name
        )
        for wanted in topic.partitions:
            partition = Partition(partition_index=wanted.partition_index, low_watermark=-1)
            partitions.append(partition)
            if refused:
                partition.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            access = state.replication.readable(topic.name, wanted.partition_index, -1, -1)
            if isinstance(access, ErrorCode):
                partition.error_code = access
                continue
            partition_log = access.log
            offset = partition_log.high_watermark if wanted.offset == HIGH_WATERMARK else wanted.offset
            if not 0 <= offset <= partition_log.high_watermark:
                partition.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                partition.low_watermark = partition_log.log_start_offset
                continue
            # The new start offset is durable before the client is told, like an append; the files
            # below it are removed in the background.
            try:
                partition.low_watermark = await state.delete_records(partition_log, offset)
            except StorageError as error:
                partition.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                partition.low_watermark = partition_log.log_start_offset
                log.error("DeleteRecords on %s-%d failed: %s", topic.name, wanted.partition_index, error)
        topics.append(DeleteRecordsResponse.DeleteRecordsTopicResult(name=topic.name, partitions=partitions))
    return DeleteRecordsResponse(topics=topics)
