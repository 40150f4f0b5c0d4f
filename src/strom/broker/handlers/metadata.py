"""Metadata 0-12 and DescribeTopicPartitions 0: brokers, cluster id, controller, and topics with
their partitions.

The brokers, topics and partitions come from the ``Replication``: a single node leads every
partition, with itself as the only replica and in-sync replica; a broker of a cluster answers from
the controller's metadata (every live broker, each partition's leader, replicas, ISR, offline
replicas and leader epoch, LEADER_NOT_AVAILABLE while a partition has no leader). Topics
that do not exist are created when ``auto.create.topics.enable`` is on and the request allows it
(v4+ carries the client's wish; older versions always allow it), as Kafka does. A v12 request may
name a topic by id alone (null name); v10 and v11 have the field but not the meaning, so such a
topic is answered INVALID_REQUEST there, as Kafka does. Authorized operations are reported when
asked (from the authorizer; every operation without one). With authorization on, a topic needs
DESCRIBE: a listing of every topic leaves out the others, a topic asked for by name is answered
TOPIC_AUTHORIZATION_FAILED whether it exists or not, and auto-creating one needs CREATE on the
cluster or the topic (else TOPIC_AUTHORIZATION_FAILED), as Kafka answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from strom.base import limits
from strom.broker.authorization import cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.refused import Refused
from strom.broker.registry import handles
from strom.broker.replication import TopicView
from strom.broker.state import BrokerState
from strom.protocol.acl import (
    CLUSTER_OPERATION_LIST,
    CLUSTER_OPERATIONS,
    OPERATIONS_NOT_PROVIDED,
    TOPIC_OPERATION_LIST,
    TOPIC_OPERATIONS,
    AclOperation,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.security.acl import CLUSTER_NAME, Authorizer, ResourceType
from strom.storage import (
    InvalidPartitionsError,
    InvalidTopicError,
    PartitionBudgetError,
    StorageError,
    TopicExistsError,
    validate_topic_name,
)

ZERO_UUID = uuid.UUID(int=0)
_MetadataPartition = MetadataResponse.MetadataResponsePartition
# Metadata versions whose topic entries may name a topic by id alone.
TOPIC_ID_LOOKUP_MIN_VERSION = 12
CLUSTER_OPERATIONS_VERSIONS = range(8, 11)


def topic_operations(context: RequestContext, name: str, authorizer: Authorizer | None) -> int:
    """The topic's authorized-operations field: every topic operation without an authorizer."""
    if authorizer is None:
        return TOPIC_OPERATIONS
    return authorizer.authorized_operations(
        context.principal, context.client_host, ResourceType.TOPIC, name, TOPIC_OPERATION_LIST
    )


def cluster_operations(context: RequestContext) -> int:
    """The cluster's authorized-operations field: every cluster operation without an authorizer."""
    authorizer = context.broker.authorizer
    if authorizer is None:
        return CLUSTER_OPERATIONS
    return authorizer.authorized_operations(
        context.principal, context.client_host, ResourceType.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATION_LIST
    )


def _may(authorizer: Authorizer | None, context: RequestContext, operation: AclOperation, name: str) -> bool:
    """Whether the principal may; ``authorizer`` is the broker's, taken once per request."""
    return authorizer is None or authorizer.authorize(
        context.principal, context.client_host, operation, ResourceType.TOPIC, name
    )


def describe_topic(
    context: RequestContext,
    topic: TopicView,
    include_operations: bool = False,
    authorizer: Authorizer | None = None,
) -> MetadataResponse.MetadataResponseTopic:
    """``authorizer``: the broker's (read once per request), for the authorized operations."""
    state = context.broker
    return MetadataResponse.MetadataResponseTopic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        # Positional (error code, index, leader, leader epoch, replicas, ISR, offline): an answer
        # about every topic builds one per partition of the cluster.
        partitions=[
            _MetadataPartition(
                view.error,
                view.partition_index,
                view.leader,
                view.leader_epoch,
                view.replicas,
                view.isr,
                view.offline,
            )
            for view in state.replication.describe_partitions(topic, 0, topic.partitions)
        ],
        topic_authorized_operations=(
            topic_operations(context, topic.name, authorizer)
            if include_operations
            else OPERATIONS_NOT_PROVIDED
        ),
    )


async def auto_create(state: BrokerState, name: str) -> TopicView | ErrorCode:
    """Create ``name`` with the broker's defaults, or say why not (a cluster's new topic has no
    leaders yet: LEADER_NOT_AVAILABLE, and the client asks again)."""
    if validate_topic_name(name) is not None:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if not state.config.get_bool("auto.create.topics.enable"):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    try:
        await state.replication.create_topic(
            name, state.config.get_int("num.partitions"), -1, {}, {}, validate_only=False
        )
    except TopicExistsError:  # another request is creating it right now: the client retries
        return ErrorCode.LEADER_NOT_AVAILABLE
    except InvalidTopicError:
        # A valid name may still collide with an existing topic ('a.b' and 'a_b').
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    except PartitionBudgetError:
        return ErrorCode.POLICY_VIOLATION
    except InvalidPartitionsError:
        return ErrorCode.INVALID_PARTITIONS
    except StorageError:
        return ErrorCode.KAFKA_STORAGE_ERROR
    except Refused as refused:
        return refused.error
    created = state.replication.topic(name)
    return created if created is not None else ErrorCode.LEADER_NOT_AVAILABLE


def _missing_topic(
    name: str | None, topic_id: uuid.UUID, error: ErrorCode
) -> MetadataResponse.MetadataResponseTopic:
    return MetadataResponse.MetadataResponseTopic(
        error_code=error, name=name, topic_id=topic_id, partitions=[]
    )


async def _requested_topic(
    context: RequestContext,
    authorizer: Authorizer | None,
    wanted: MetadataRequest.MetadataRequestTopic,
    version: int,
    allow_auto_create: bool,
    include_operations: bool,
) -> MetadataResponse.MetadataResponseTopic:
    state = context.broker
    if wanted.name is None:
        if version < TOPIC_ID_LOOKUP_MIN_VERSION:
            # v10-11 carry a topic id but no way to answer for a topic without a name.
            return _missing_topic("", wanted.topic_id, ErrorCode.INVALID_REQUEST)
        by_id = state.replication.topic_by_id(wanted.topic_id)
        if by_id is None:
            return _missing_topic(None, wanted.topic_id, ErrorCode.UNKNOWN_TOPIC_ID)
        if not _may(authorizer, context, AclOperation.DESCRIBE, by_id.name):
            return _missing_topic(None, wanted.topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        return describe_topic(context, by_id, include_operations, authorizer)
    if not _may(authorizer, context, AclOperation.DESCRIBE, wanted.name):
        # Whether the topic exists or not: the answer must not tell.
        return _missing_topic(wanted.name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    existing = state.replication.topic(wanted.name)
    if (
        existing is None
        and allow_auto_create
        and authorizer is not None
        and not cluster_allowed(context, AclOperation.CREATE)
        and not _may(authorizer, context, AclOperation.CREATE, wanted.name)
        and state.config.get_bool("auto.create.topics.enable")
    ):
        return _missing_topic(wanted.name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if existing is None and allow_auto_create:
        created = await auto_create(state, wanted.name)
        if isinstance(created, ErrorCode):
            return _missing_topic(wanted.name, ZERO_UUID, created)
        existing = created
    if existing is None:
        error = (
            ErrorCode.INVALID_TOPIC_EXCEPTION
            if validate_topic_name(wanted.name) is not None
            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )
        return _missing_topic(wanted.name, ZERO_UUID, error)
    return describe_topic(context, existing, include_operations, authorizer)


@handles(MetadataRequest, MetadataResponse, 0, 12)
async def handle_metadata(context: RequestContext, request: MetadataRequest) -> MetadataResponse:
    state = context.broker
    version = context.api_version
    include_topic_operations = version >= 8 and request.include_topic_authorized_operations
    topics: list[MetadataResponse.MetadataResponseTopic] = []
    # v0: an empty list means every topic; v1+: null means every topic, empty means none.
    every_topic = request.topics is None or (version == 0 and not request.topics)
    replication = state.replication
    # A cluster broker that has just started answers once it knows the topics (or after the
    # bound, from what it knows): an empty image would say the clients' topics do not exist.
    await replication.metadata_known(limits.metadata_wait_ms)
    authorizer = state.authorizer
    if every_topic:
        for name in sorted(replication.topic_names()):
            # Topics the principal may not describe are left out, unsaid.
            if authorizer is not None and not authorizer.authorize(
                context.principal, context.client_host, AclOperation.DESCRIBE, ResourceType.TOPIC, name
            ):
                continue
            found = replication.topic(name)
            if found is not None:
                topics.append(describe_topic(context, found, include_topic_operations, authorizer))
    else:
        allow_auto_create = request.allow_auto_topic_creation if version >= 4 else True
        for wanted in request.topics or []:
            topics.append(
                await _requested_topic(
                    context, authorizer, wanted, version, allow_auto_create, include_topic_operations
                )
            )
    response = MetadataResponse(
        brokers=[
            MetadataResponse.MetadataResponseBroker(
                node_id=broker.node_id, host=broker.host, port=broker.port, rack=broker.rack
            )
            for broker in replication.brokers(context.listener)
        ],
        cluster_id=state.cluster_id,
        controller_id=replication.controller_id(),
        topics=topics,
    )
    if version in CLUSTER_OPERATIONS_VERSIONS and request.include_cluster_authorized_operations:
        response.cluster_authorized_operations = cluster_operations(context)
    return response


# -- DescribeTopicPartitions --------------------------------------------------------------------

_Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
_Partition = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition


def _describe_partitions(state: BrokerState, topic: TopicView, first: int, last: int) -> list[_Partition]:
    return [
        _Partition(
            error_code=view.error,
            partition_index=view.partition_index,
            leader_id=view.leader,
            leader_epoch=view.leader_epoch,
            replica_nodes=view.replicas,
            isr_nodes=view.isr,
            eligible_leader_replicas=[],
            last_known_elr=[],
            offline_replicas=view.offline,
        )
        for view in state.replication.describe_partitions(topic, first, last)
    ]


def _topics_from_cursor(
    state: BrokerState, request: DescribeTopicPartitionsRequest
) -> Iterator[str] | ErrorCode:
    """The topic names to describe in order: every topic (an empty list) or those asked for, from
    the cursor's topic on; INVALID_REQUEST for a cursor outside the list asked for."""
    cursor = request.cursor
    if not request.topics:
        names = set(state.replication.topic_names())
        if cursor is not None:
            # The cursor's topic may have been deleted since the previous page.
            names = {name for name in names if name >= cursor.topic_name} | {cursor.topic_name}
        return iter(sorted(names))
    asked = {topic.name for topic in request.topics}
    if cursor is not None:
        if cursor.topic_name not in asked or cursor.partition_index < 0:
            return ErrorCode.INVALID_REQUEST
        asked = {name for name in asked if name >= cursor.topic_name}
    return iter(sorted(asked))


@handles(DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, 0, 0)
async def handle_describe_topic_partitions(
    context: RequestContext, request: DescribeTopicPartitionsRequest
) -> DescribeTopicPartitionsResponse:
    """Topics sorted by name with at most ``response_partition_limit`` partitions (capped by the
    broker) per response; a ``next_cursor`` says where the next page starts. Topics asked for by
    name that do not exist are answered UNKNOWN_TOPIC_OR_PARTITION (or INVALID_TOPIC_EXCEPTION);
    with an empty list only existing topics are listed."""
    state = context.broker
    response = DescribeTopicPartitionsResponse(next_cursor=None)
    names = _topics_from_cursor(state, request)
    if isinstance(names, ErrorCode):
        response.topics = [_Topic(error_code=names, name=topic.name) for topic in request.topics]
        return response
    describe_all = not request.topics
    authorizer = state.authorizer
    remaining = max(1, min(request.response_partition_limit, limits.partitions_per_describe_response_max))
    first_partition = request.cursor.partition_index if request.cursor is not None else 0
    for name in names:
        if remaining == 0:
            response.next_cursor = DescribeTopicPartitionsResponse.Cursor(topic_name=name, partition_index=0)
            break
        if not _may(authorizer, context, AclOperation.DESCRIBE, name):
            # Left out of a listing; asked for by name, refused whether it exists or not.
            if not describe_all:
                response.topics.append(_Topic(error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name))
            first_partition = 0
            continue
        topic = state.replication.topic(name)
        if topic is None:
            if not describe_all:
                error = (
                    ErrorCode.INVALID_TOPIC_EXCEPTION
                    if validate_topic_name(name) is not None
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                response.topics.append(_Topic(error_code=error, name=name))
            first_partition = 0
            continue
        start = min(first_partition, topic.partitions)
        end = min(topic.partitions, start + remaining)
        response.topics.append(
            _Topic(
                error_code=ErrorCode.NONE,
                name=topic.name,
                topic_id=topic.topic_id,
                is_internal=topic.internal,
                partitions=_describe_partitions(state, topic, start, end),
                topic_authorized_operations=topic_operations(context, topic.name, authorizer),
            )
        )
        if end < topic.partitions:
            response.next_cursor = DescribeTopicPartitionsResponse.Cursor(
                topic_name=topic.name, partition_index=end
            )
            break
        remaining -= end - start
        first_partition = 0
    return response
