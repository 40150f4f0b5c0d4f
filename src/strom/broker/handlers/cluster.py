"""DescribeCluster 0-1: the live brokers, the cluster id and the controller (a single node: itself),
and the cluster's authorized operations when asked (from the authorizer; all of them without one).
Like Metadata, it is answered to every principal, as Kafka does."""

from __future__ import annotations

from strom.broker.context import RequestContext
from strom.broker.handlers.metadata import cluster_operations
from strom.broker.registry import handles
from strom.protocol.acl import OPERATIONS_NOT_PROVIDED
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse

ENDPOINT_TYPE_BROKERS = 1


@handles(DescribeClusterRequest, DescribeClusterResponse, 0, 1)
async def handle_describe_cluster(
    context: RequestContext, request: DescribeClusterRequest
) -> DescribeClusterResponse:
    state = context.broker
    if context.api_version >= 1 and request.endpoint_type != ENDPOINT_TYPE_BROKERS:
        return DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message=f"endpoint type {request.endpoint_type} is not served here",
            endpoint_type=request.endpoint_type,
            cluster_id=state.cluster_id,
        )
    replication = state.replication
    return DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        endpoint_type=ENDPOINT_TYPE_BROKERS,
        cluster_id=state.cluster_id,
        controller_id=replication.controller_id(),
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=broker.node_id, host=broker.host, port=broker.port, rack=broker.rack
            )
            for broker in replication.brokers(context.listener)
        ],
        cluster_authorized_operations=(
            cluster_operations(context)
            if request.include_cluster_authorized_operations
            else OPERATIONS_NOT_PROVIDED
        ),
    )
