"""StromGroupHistory 0 (strom-only API key 32100): a group's rebalance history.

Kafka's protocol has no API for it, so strom adds one (``strom.protocol.group_history`` says why
this way and how Kafka clients are unaffected). The request goes to the group's coordinator
(FindCoordinator, as for DescribeGroups) and is answered from ``GroupCoordinator.group_history``:
NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS send the client to find the coordinator again,
GROUP_ID_NOT_FOUND for a group with neither state nor history here. With authorization on it needs
DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED), as DescribeGroups does.
"""

from __future__ import annotations

from strom.broker.context import RequestContext
from strom.broker.handlers.groups import _group_refused
from strom.broker.registry import handles
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.group_history import StromGroupHistoryRequest, StromGroupHistoryResponse, encode_entry


@handles(StromGroupHistoryRequest, StromGroupHistoryResponse, 0, 0)
async def handle_strom_group_history(
    context: RequestContext, request: StromGroupHistoryRequest
) -> StromGroupHistoryResponse:
    if _group_refused(context.broker.authorizer, context, AclOperation.DESCRIBE, request.group_id):
        return StromGroupHistoryResponse(
            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
            error_message="not authorized to describe the group",
        )
    error, entries = context.broker.groups.coordinator.group_history(request.group_id)
    return StromGroupHistoryResponse(
        error_code=error,
        entries=[encode_entry(entry) for entry in entries] if error == ErrorCode.NONE else [],
    )
