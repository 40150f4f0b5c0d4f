"""ApiVersions 0-4: the version table, built from the handler registry and nothing else (the
table this broker serves: a single node's, or a cluster broker's)."""

from __future__ import annotations

from collections.abc import Mapping

from strom.broker.context import RequestContext
from strom.broker.registry import HANDLERS, Handler, handles
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse


def build_response(
    error_code: ErrorCode, version: int, table: Mapping[int, Handler] = HANDLERS
) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        error_code=error_code,
        api_keys=[
            ApiVersionsResponse.ApiVersion(
                api_key=handler.api_key, min_version=handler.min_version, max_version=handler.max_version
            )
            for handler in sorted(table.values(), key=lambda handler: handler.api_key)
        ],
    )


@handles(ApiVersionsRequest, ApiVersionsResponse, 0, 4)
async def handle_api_versions(context: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    return build_response(ErrorCode.NONE, context.api_version, context.broker.handlers)
