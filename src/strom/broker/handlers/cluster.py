"""DescribeCluster 0-1: this broker, its cluster id, and itself as the controller (and the cluster's
authorized operations when asked: all of them until strom has ACLs)."""

from __future__ import annotations

from strom.broker.context import RequestContext
from strom.broker.registry import handles
from strom.protocol.acl import CLUSTER_OPERATIONS, OPERATIONS_NOT_PROVIDED
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
    endpoint = state.advertised_endpoint(context.listener)
    return DescribeClusterResponse(
        error_code=ErrorCode.NONE,
        endpoint_type=ENDPOINT_TYPE_BROKERS,
        cluster_id=state.cluster_id,
        controller_id=state.node_id,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(
                broker_id=state.node_id,
                host=endpoint.host,
                port=endpoint.port,
                rack=None,
            )
        ],
        cluster_authorized_operations=(
            CLUSTER_OPERATIONS if request.include_cluster_authorized_operations else OPERATIONS_NOT_PROVIDED
        ),
    )
