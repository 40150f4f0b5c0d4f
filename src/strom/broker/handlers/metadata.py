"""Metadata 0-12: brokers, cluster id, controller, and topics with their partitions.

A single node leads every partition, with itself as the only replica and in-sync replica. Topics
that do not exist are created when ``auto.create.topics.enable`` is on and the request allows it
(v4+ carries the client's wish; older versions always allow it), as Kafka does.
"""

from __future__ import annotations

import uuid

from strom.broker.context import RequestContext
from strom.broker.registry import handles
from strom.broker.state import BrokerState
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.storage import (
    PartitionBudgetError,
    StorageError,
    TopicExistsError,
    TopicMetadata,
    validate_topic_name,
)

ZERO_UUID = uuid.UUID(int=0)
LEADER_EPOCH = 0


def describe_topic(state: BrokerState, topic: TopicMetadata) -> MetadataResponse.MetadataResponseTopic:
    node = state.node_id
    return MetadataResponse.MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=[
            MetadataResponse.MetadataResponsePartition(
                error_code=ErrorCode.NONE,
                partition_index=index,
                leader_id=node,
                leader_epoch=LEADER_EPOCH,
                replica_nodes=[node],
                isr_nodes=[node],
                offline_replicas=[],
            )
            for index in range(topic.partitions)
        ],
    )


async def auto_create(state: BrokerState, name: str) -> TopicMetadata | ErrorCode:
    """Create ``name`` with the broker's defaults, or say why not."""
    if validate_topic_name(name) is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if not state.config.get_bool("auto.create.topics.enable"):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    try:
        return await state.create_topic(name, state.config.get_int("num.partitions"))
    except TopicExistsError:  # another request is creating it right now: the client retries
        return ErrorCode.LEADER_NOT_AVAILABLE
    except PartitionBudgetError:
        return ErrorCode.POLICY_VIOLATION
    except StorageError:
        return ErrorCode.KAFKA_STORAGE_ERROR


def _missing_topic(
    name: str | None, topic_id: uuid.UUID, error: ErrorCode
) -> MetadataResponse.MetadataResponseTopic:
    return MetadataResponse.MetadataResponseTopic(
        error_code=error, name=name, topic_id=topic_id, partitions=[]
    )


@handles(MetadataRequest, MetadataResponse, 0, 12)
async def handle_metadata(context: RequestContext, request: MetadataRequest) -> MetadataResponse:
    state = context.broker
    version = context.api_version
    topics: list[MetadataResponse.MetadataResponseTopic] = []
    # v0: an empty list means every topic; v1+: null means every topic, empty means none.
    every_topic = request.topics is None or (version == 0 and not request.topics)
    if every_topic:
        for name in sorted(state.logs.topic_names()):
            found = state.logs.topic(name)
            if found is not None:
                topics.append(describe_topic(state, found))
    else:
        allow_auto_create = request.allow_auto_topic_creation if version >= 4 else True
        for wanted in request.topics or []:
            if wanted.name is None:
                by_id = state.logs.topic_by_id(wanted.topic_id)
                if by_id is None:
                    topics.append(_missing_topic(None, wanted.topic_id, ErrorCode.UNKNOWN_TOPIC_ID))
                else:
                    topics.append(describe_topic(state, by_id))
                continue
            existing = state.logs.topic(wanted.name)
            if existing is None and allow_auto_create:
                created = await auto_create(state, wanted.name)
                if isinstance(created, ErrorCode):
                    topics.append(_missing_topic(wanted.name, ZERO_UUID, created))
                    continue
                existing = created
            if existing is None:
                error = (
                    ErrorCode.INVALID_TOPIC_EXCEPTION
                    if validate_topic_name(wanted.name) is not None
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                topics.append(_missing_topic(wanted.name, ZERO_UUID, error))
            else:
                topics.append(describe_topic(state, existing))
    return MetadataResponse(
        brokers=[
            MetadataResponse.MetadataResponseBroker(
                node_id=state.node_id,
                host=state.config.advertised_host,
                port=state.config.advertised_port,
                rack=None,
            )
        ],
        cluster_id=state.cluster_id,
        controller_id=state.node_id,
        topics=topics,
    )
