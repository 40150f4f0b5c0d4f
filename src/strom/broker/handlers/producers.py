"""DescribeProducers 0 (KIP-664): the active producers of partitions this broker leads.

Per producer: id, epoch, last sequence, last timestamp, the coordinator epoch of its last
transaction marker, and the first offset of its transaction in progress (-1 when none) — what an
operator needs to find a hanging transaction that holds a partition's last stable offset back.
Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere, UNKNOWN_TOPIC_OR_PARTITION for a
partition that does not exist), as for Fetch.
"""

from __future__ import annotations

from strom.broker.authorization import topic_allowed
from strom.broker.context import RequestContext
from strom.broker.registry import handles
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.describe_producers import DescribeProducersRequest, DescribeProducersResponse

CONSUMER = -1  # reading as a client, not as a follower
ANY_LEADER_EPOCH = -1


@handles(DescribeProducersRequest, DescribeProducersResponse, 0, 0)
async def handle_describe_producers(
    context: RequestContext, request: DescribeProducersRequest
) -> DescribeProducersResponse:
    replication = context.broker.replication
    topics = []
    authorizer = context.broker.authorizer
    for topic in request.topics:
        partitions = []
        # With authorization on: READ on the topic, whether it exists or not.
        refused = authorizer is not None and not topic_allowed(context, AclOperation.READ, topic.name)
        for index in topic.partition_indexes:
            access = (
                ErrorCode.TOPIC_AUTHORIZATION_FAILED
                if refused
                else replication.readable(topic.name, index, ANY_LEADER_EPOCH, CONSUMER)
            )
            if isinstance(access, ErrorCode):
                partitions.append(
                    DescribeProducersResponse.PartitionResponse(
                        partition_index=index, error_code=access, error_message=None, active_producers=[]
                    )
                )
                continue
            partitions.append(
                DescribeProducersResponse.PartitionResponse(
                    partition_index=index,
                    error_code=ErrorCode.NONE,
                    error_message=None,
                    active_producers=[
                        DescribeProducersResponse.ProducerState(
                            producer_id=producer.producer_id,
                            producer_epoch=producer.producer_epoch,
                            last_sequence=producer.last_sequence,
                            last_timestamp=producer.last_timestamp_ms,
                            coordinator_epoch=producer.coordinator_epoch,
                            current_txn_start_offset=producer.current_txn_start_offset,
                        )
                        for producer in access.log.producers()
                    ],
                )
            )
        topics.append(DescribeProducersResponse.TopicResponse(name=topic.name, partitions=partitions))
    return DescribeProducersResponse(topics=topics)
