"""ConsumerGroupHeartbeat 0-1 and ConsumerGroupDescribe 0: the consumer group protocol (KIP-848).

Members of a ``consumer`` group (librdkafka's ``group.protocol=consumer``, Kafka's new consumer)
heartbeat their subscription and owned partitions; the coordinator answers with their member epoch
and, when it changed, the partitions they may own now. The coordinator
(``strom.coordinator``) decides everything; these handlers check what the principal may do, as
Kafka's broker does before the coordinator sees the request:

* ConsumerGroupHeartbeat needs READ on the group (GROUP_AUTHORIZATION_FAILED), and DESCRIBE on
  every topic the member names in ``SubscribedTopicNames`` (TOPIC_AUTHORIZATION_FAILED if it may
  not describe one of them, so a member cannot learn of topics it may not see); a regular
  expression subscription is matched by the coordinator against the topics;
* ConsumerGroupDescribe needs DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED for that group),
  and a group whose members subscribe to or are assigned a topic the principal may not describe is
  answered TOPIC_AUTHORIZATION_FAILED without its members; with ``IncludeAuthorizedOperations`` the
  group's authorized operations are filled in as DescribeGroups does.

A heartbeat may wait in the coordinator (its write to ``__consumer_offsets``), so it is parked as
the classic group requests are; only this connection's request waits.

Both APIs are served only while ``group.coordinator.rebalance.protocols`` includes ``consumer``
(the server leaves them out of its handler table otherwise, so they are not advertised either).
"""

from __future__ import annotations

import copy

from strom.broker.context import RequestContext
from strom.broker.handlers.groups import _allowed, _group_refused, _parked
from strom.broker.registry import handles
from strom.protocol.acl import GROUP_OPERATION_LIST, GROUP_OPERATIONS, AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from strom.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from strom.security.acl import Authorizer, ResourceType

# The API keys of the consumer group protocol: a broker with the protocol off serves neither.
CONSUMER_PROTOCOL_API_KEYS = frozenset(
    {ConsumerGroupHeartbeatRequest.API_KEY, ConsumerGroupDescribeRequest.API_KEY}
)

TOPICS_REFUSED_MESSAGE = "the group has topics the client is not authorized to describe"


@handles(ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, 0, 1)
async def handle_consumer_group_heartbeat(
    context: RequestContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse:
    authorizer = context.broker.authorizer
    if authorizer is not None:
        refused = _heartbeat_refused(authorizer, context, request)
        if refused is not None:
            return refused
    coordinator = context.broker.groups.coordinator
    return await _parked(
        lambda respond: coordinator.consumer_group_heartbeat(
            request, context.api_version, context.client_id or "", "/" + context.client_host, respond
        )
    )


def _heartbeat_refused(
    authorizer: Authorizer, context: RequestContext, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse | None:
    """The answer to a heartbeat the principal may not send, else None."""
    if _group_refused(authorizer, context, AclOperation.READ, request.group_id):
        return ConsumerGroupHeartbeatResponse(
            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
            error_message="not authorized to read the group",
        )
    names = request.subscribed_topic_names or []
    if any(
        not _allowed(authorizer, context, AclOperation.DESCRIBE, ResourceType.TOPIC, name) for name in names
    ):
        return ConsumerGroupHeartbeatResponse(
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            error_message="not authorized to describe some of the subscribed topics",
        )
    return None


@handles(ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, 0, 0)
async def handle_consumer_group_describe(
    context: RequestContext, request: ConsumerGroupDescribeRequest
) -> ConsumerGroupDescribeResponse:
    authorizer = context.broker.authorizer
    version = context.api_version
    coordinator = context.broker.groups.coordinator
    refused: set[str] = set()
    asked = request
    if authorizer is not None:
        refused = {
            group_id
            for group_id in request.group_ids
            if _group_refused(authorizer, context, AclOperation.DESCRIBE, group_id)
        }
        if refused:
            asked = copy.copy(request)
            asked.group_ids = [group_id for group_id in request.group_ids if group_id not in refused]
    described: dict[str, ConsumerGroupDescribeResponse.DescribedGroup] = {}
    response = ConsumerGroupDescribeResponse(groups=[])
    if asked.group_ids:
        response = coordinator.consumer_group_describe(asked, version)
        described = {group.group_id: group for group in response.groups}
    groups = []
    for group_id in request.group_ids:
        if group_id in refused:
            groups.append(
                ConsumerGroupDescribeResponse.DescribedGroup(
                    group_id=group_id,
                    error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    error_message="not authorized to describe the group",
                )
            )
            continue
        group = described.get(group_id)
        if group is None:  # the coordinator answers every group it is asked; a lost one is a bug
            raise AssertionError(f"ConsumerGroupDescribe: no answer for group {group_id!r}")
        if (
            authorizer is not None
            and group.error_code == ErrorCode.NONE
            and _has_hidden_topics(authorizer, context, group)
        ):
            group = ConsumerGroupDescribeResponse.DescribedGroup(
                group_id=group_id,
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                error_message=TOPICS_REFUSED_MESSAGE,
            )
        elif request.include_authorized_operations and group.error_code == ErrorCode.NONE:
            group.authorized_operations = (
                GROUP_OPERATIONS
                if authorizer is None
                else authorizer.authorized_operations(
                    context.principal,
                    context.client_host,
                    ResourceType.GROUP,
                    group_id,
                    GROUP_OPERATION_LIST,
                )
            )
        groups.append(group)
    response.groups = groups
    return response


def _has_hidden_topics(
    authorizer: Authorizer, context: RequestContext, group: ConsumerGroupDescribeResponse.DescribedGroup
) -> bool:
    """Whether a member of ``group`` subscribes to, owns or is to own a topic the principal may
    not describe (Kafka then tells nothing of the group's members)."""
    names: set[str] = set()
    for member in group.members:
        names.update(member.subscribed_topic_names)
        for assignment in (member.assignment, member.target_assignment):
            names.update(partitions.topic_name for partitions in assignment.topic_partitions)
    return any(
        not _allowed(authorizer, context, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        for name in sorted(names)
    )
