"""ApiVersions 0-4: the version table, built from the handler registry and nothing else (the
table this broker serves: a single node's, or a cluster broker's).

strom's own API keys (``strom.protocol.api.STROM_ONLY_APIS``: StromGroupHistory) are listed only to
strom's own client, which names itself in ApiVersions v3+ (``client_software_name``). Kafka's
clients never send them, and one of them (kafka-python's ``KafkaAdminClient.api_versions()``)
fails on a key Kafka does not have.
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.broker.context import RequestContext
from strom.broker.registry import HANDLERS, Handler, handles
from strom.protocol.api import STROM_CLIENT_SOFTWARE_NAME, is_strom_only
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse


def build_response(
    error_code: ErrorCode,
    version: int,
    table: Mapping[int, Handler] = HANDLERS,
    strom_keys: bool = False,
) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        error_code=error_code,
        api_keys=[
            ApiVersionsResponse.ApiVersion(
                api_key=handler.api_key, min_version=handler.min_version, max_version=handler.max_version
            )
            for handler in sorted(table.values(), key=lambda handler: handler.api_key)
            if strom_keys or not is_strom_only(handler.api_key)
        ],
    )


@handles(ApiVersionsRequest, ApiVersionsResponse, 0, 4)
async def handle_api_versions(context: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    strom_client = context.api_version >= 3 and request.client_software_name == STROM_CLIENT_SOFTWARE_NAME
    return build_response(ErrorCode.NONE, context.api_version, context.broker.handlers, strom_client)
