"""CreateTopics 0-7, DeleteTopics 0-6 and CreatePartitions 0-3.

What a create, delete or growth does is the ``Replication``'s: on a single node one broker holds one
replica of everything (a replication factor above 1 or a replica assignment naming another broker
is refused with INVALID_REPLICATION_FACTOR / INVALID_REPLICA_ASSIGNMENT rather than quietly
ignored); in a cluster the replicas are placed over the live brokers (or as assigned) and written
to ZooKeeper, and the answer comes once the controller has elected the new partitions' leaders.

A create that would take the broker past the partitions it can serve (``storage.budget``: derived
from its open files limit, at most ``limits.partitions_per_broker_max``) is refused with
POLICY_VIOLATION and a message saying how many it holds and accepts. The file work runs in the
broker's admin thread (``BrokerState.create_topic`` and friends), so a topic of thousands of
partitions stalls no other client; a create is all or nothing on disk, and a delete is answered
once committed, its directories being removed in the background.
"""

from __future__ import annotations

import uuid

from strom.base import limits
from strom.broker.authorization import cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.refused import Refused
from strom.broker.registry import handles
from strom.broker.state import BrokerState
from strom.broker.topic_configs import topic_config_entries
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.create_partitions import CreatePartitionsRequest, CreatePartitionsResponse
from strom.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from strom.protocol.messages.delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from strom.security.acl import ResourceType
from strom.storage import (
    ConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogFileError,
    PartitionBudgetError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
    validate_topic_name,
)

ZERO_UUID = uuid.UUID(int=0)
DEFAULT_FROM_BROKER = -1
INTERNAL_PREFIX = "__"


def _refusal(error: StorageError) -> Refused:
    """The Kafka error for a storage refusal of an admin operation."""
    if isinstance(error, ConfigError):
        return Refused(ErrorCode.INVALID_CONFIG, str(error))
    if isinstance(error, InvalidTopicError):
        return Refused(ErrorCode.INVALID_TOPIC_EXCEPTION, str(error))
    if isinstance(error, InvalidPartitionsError):
        return Refused(ErrorCode.INVALID_PARTITIONS, str(error))
    if isinstance(error, TopicExistsError):
        return Refused(ErrorCode.TOPIC_ALREADY_EXISTS, str(error))
    if isinstance(error, UnknownTopicError):
        return Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(error))
    if isinstance(error, PartitionBudgetError):
        return Refused(ErrorCode.POLICY_VIOLATION, str(error))
    if isinstance(error, LogFileError):
        return Refused(ErrorCode.KAFKA_STORAGE_ERROR, str(error))
    raise error


async def _create_one(
    state: BrokerState, topic: CreateTopicsRequest.CreatableTopic, validate_only: bool
) -> CreateTopicsResponse.CreatableTopicResult:
    problem = validate_topic_name(topic.name)
    if problem is not None:
        raise Refused(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
    if state.replication.topic(topic.name) is not None:
        raise Refused(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic '{topic.name}' already exists")
    if topic.assignments and (
        topic.num_partitions != DEFAULT_FROM_BROKER or topic.replication_factor != DEFAULT_FROM_BROKER
    ):
        raise Refused(
            ErrorCode.INVALID_REQUEST,
            "give either a replica assignment or a partition count and replication factor, not both",
        )
    partitions = topic.num_partitions
    if topic.assignments:
        partitions = len(topic.assignments)
        if sorted(assignment.partition_index for assignment in topic.assignments) != list(range(partitions)):
            raise Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partition indexes must be 0..n-1")
    elif partitions == DEFAULT_FROM_BROKER:
        partitions = state.config.get_int("num.partitions")
    if not 1 <= partitions <= limits.partitions_per_topic_max:
        raise Refused(
            ErrorCode.INVALID_PARTITIONS,
            f"number of partitions must be between 1 and {limits.partitions_per_topic_max}, not {partitions}",
        )
    overrides: dict[str, str] = {}
    for entry in topic.configs:
        if entry.value is None:
            continue
        overrides[entry.name] = entry.value
    try:
        created, replication_factor = await state.replication.create_topic(
            topic.name,
            partitions,
            topic.replication_factor,
            {assignment.partition_index: assignment.broker_ids for assignment in topic.assignments},
            overrides,
            validate_only=validate_only,
        )
    except StorageError as error:
        raise _refusal(error) from None
    return CreateTopicsResponse.CreatableTopicResult(
        name=topic.name,
        topic_id=created.topic_id if not validate_only else ZERO_UUID,
        error_code=ErrorCode.NONE,
        error_message=None,  # as Kafka: null when there was no error (aiokafka checks it)
        num_partitions=partitions,
        replication_factor=replication_factor,
        configs=[
            CreateTopicsResponse.CreatableTopicConfigs(
                name=entry.name,
                value=entry.value,
                read_only=entry.read_only,
                config_source=entry.source,
                is_sensitive=False,
            )
            for entry in topic_config_entries(state, created)
        ],
    )


@handles(CreateTopicsRequest, CreateTopicsResponse, 0, 7)
async def handle_create_topics(context: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    state = context.broker
    results: list[CreateTopicsResponse.CreatableTopicResult] = []
    seen: set[str] = set()
    authorizer = state.authorizer
    cluster_may_create = authorizer is None or cluster_allowed(context, AclOperation.CREATE)
    for topic in request.topics:
        if topic.name in seen:
            results.append(
                CreateTopicsResponse.CreatableTopicResult(
                    name=topic.name,
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message=f"topic '{topic.name}' appears more than once in the request",
                )
            )
            continue
        seen.add(topic.name)
        try:
            # With authorization on: CREATE on the cluster or on the topic.
            if (
                authorizer is not None
                and not cluster_may_create
                and not authorizer.authorize(
                    context.principal,
                    context.client_host,
                    AclOperation.CREATE,
                    ResourceType.TOPIC,
                    topic.name,
                )
            ):
                raise Refused(
                    ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"not authorized to create '{topic.name}'"
                )
            result = await _create_one(state, topic, request.validate_only)
        except Refused as refused:
            result = CreateTopicsResponse.CreatableTopicResult(
                name=topic.name, error_code=refused.error, error_message=refused.message, configs=None
            )
        if context.api_version < 5:
            result.num_partitions = -1
            result.replication_factor = -1
            result.configs = []
        if context.api_version < 1:
            result.error_message = None
        results.append(result)
    return CreateTopicsResponse(topics=results)


@handles(DeleteTopicsRequest, DeleteTopicsResponse, 0, 6)
async def handle_delete_topics(context: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    state = context.broker
    version = context.api_version
    wanted: list[tuple[str | None, uuid.UUID]] = (
        [(topic.name, topic.topic_id) for topic in request.topics]
        if version >= 6
        else [(name, ZERO_UUID) for name in request.topic_names]
    )
    results: list[DeleteTopicsResponse.DeletableTopicResult] = []
    authorizer = state.authorizer
    for name, topic_id in wanted:
        found = state.replication.topic(name) if name is not None else state.replication.topic_by_id(topic_id)
        result = DeleteTopicsResponse.DeletableTopicResult(name=name)
        if version >= 6:
            result.topic_id = topic_id
        if (
            authorizer is not None
            and (name is not None or found is not None)
            and not authorizer.authorize(
                context.principal,
                context.client_host,
                AclOperation.DELETE,
                ResourceType.TOPIC,
                name if name is not None else found.name if found is not None else "",
            )
        ):
            # Whether the topic exists or not (by id: an id that exists), as Kafka answers.
            result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif found is None:
            result.error_code = (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if name is not None else ErrorCode.UNKNOWN_TOPIC_ID
            )
        elif not state.config.get_bool("delete.topic.enable"):
            result.error_code = ErrorCode.TOPIC_DELETION_DISABLED
        elif found.internal:
            result.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
        else:
            result.name = found.name
            if version >= 6:
                result.topic_id = found.topic_id
            try:
                try:
                    await state.replication.delete_topic(found.name)
                except StorageError as error:
                    raise _refusal(error) from None
            except Refused as refused:  # a cluster's ZooKeeper may refuse too
                result.error_code = refused.error
                if version >= 5:
                    result.error_message = refused.message
        results.append(result)
    return DeleteTopicsResponse(responses=results)


@handles(CreatePartitionsRequest, CreatePartitionsResponse, 0, 3)
async def handle_create_partitions(
    context: RequestContext, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    state = context.broker
    results: list[CreatePartitionsResponse.CreatePartitionsTopicResult] = []
    authorizer = state.authorizer
    for topic in request.topics:
        result = CreatePartitionsResponse.CreatePartitionsTopicResult(name=topic.name, error_message=None)
        results.append(result)
        existing = state.replication.topic(topic.name)
        try:
            if authorizer is not None and not authorizer.authorize(
                context.principal, context.client_host, AclOperation.ALTER, ResourceType.TOPIC, topic.name
            ):
                raise Refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"not authorized to alter '{topic.name}'")
            if existing is None:
                raise Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{topic.name}' does not exist")
            if topic.count <= existing.partitions:
                raise Refused(
                    ErrorCode.INVALID_PARTITIONS,
                    f"topic has {existing.partitions} partitions; the new count {topic.count} must be larger",
                )
            if topic.count > limits.partitions_per_topic_max:
                raise Refused(
                    ErrorCode.INVALID_PARTITIONS,
                    f"at most {limits.partitions_per_topic_max} partitions in a topic, not {topic.count}",
                )
            if topic.assignments and len(topic.assignments) != topic.count - existing.partitions:
                raise Refused(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "one assignment is needed for each new partition",
                )
            try:
                await state.replication.create_partitions(
                    topic.name,
                    topic.count,
                    [assignment.broker_ids for assignment in topic.assignments or []],
                    validate_only=request.validate_only,
                )
            except StorageError as error:
                raise _refusal(error) from None
        except Refused as refused:
            result.error_code = refused.error
            result.error_message = refused.message
    return CreatePartitionsResponse(results=results)
