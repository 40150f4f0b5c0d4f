"""DescribeClientQuotas 0-1 and AlterClientQuotas 0-1 (every version of both specifications).

Entities are ``user`` and ``client-id`` parts, a null name being the default entity. Describe
filters match each part exactly, the default, or any named entity; ``strict`` leaves out entities
with parts the filter does not name. Alter applies each entry on its own (validated whole first:
unknown entity types or quota keys, non-positive or fractional byte rates are INVALID_REQUEST for
that entry), persists it (the data directory, or ZooKeeper in a cluster) and applies it at once; ``validate_only``
checks and changes nothing.
"""

from __future__ import annotations

from strom.broker.context import RequestContext
from strom.broker.quotas import QuotaStoreError
from strom.broker.registry import handles
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from strom.protocol.messages.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from strom.security.quotas import (
    FilterComponent,
    QuotaEntity,
    QuotaError,
    QuotaManager,
    check_filter,
    matches,
)
from strom.storage import StorageError


@handles(DescribeClientQuotasRequest, DescribeClientQuotasResponse, 0, 1)
async def handle_describe_client_quotas(
    context: RequestContext, request: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    try:
        components = check_filter(
            FilterComponent(component.entity_type, component.match_type, component.match)
            for component in request.components
        )
    except QuotaError as error:
        return DescribeClientQuotasResponse(
            error_code=ErrorCode.INVALID_REQUEST, error_message=str(error), entries=None
        )
    entries = []
    for entity, values in sorted(context.broker.quotas.manager.configs().items()):
        if not matches(entity, components, request.strict):
            continue
        entries.append(
            DescribeClientQuotasResponse.EntryData(
                entity=[
                    DescribeClientQuotasResponse.EntityData(entity_type=entity_type, entity_name=name)
                    for entity_type, name in entity.parts
                ],
                values=[
                    DescribeClientQuotasResponse.ValueData(key=key, value=float(value))
                    for key, value in sorted(values.items())
                ],
            )
        )
    return DescribeClientQuotasResponse(error_message=None, entries=entries)


@handles(AlterClientQuotasRequest, AlterClientQuotasResponse, 0, 1)
async def handle_alter_client_quotas(
    context: RequestContext, request: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    quotas = context.broker.quotas
    results = []
    for entry in request.entries:
        result = AlterClientQuotasResponse.EntryData(
            error_message=None,
            entity=[
                AlterClientQuotasResponse.EntityData(
                    entity_type=part.entity_type, entity_name=part.entity_name
                )
                for part in entry.entity
            ],
        )
        results.append(result)
        try:
            entity = QuotaEntity.of((part.entity_type, part.entity_name) for part in entry.entity)
            current = quotas.manager.configs().get(entity, {})
            values = QuotaManager.altered(
                current, [(op.key, None if op.remove else op.value) for op in entry.ops]
            )
            if not request.validate_only:
                await quotas.set_entity(entity, values)
        except QuotaError as error:
            result.error_code = ErrorCode.INVALID_REQUEST
            result.error_message = str(error)
        except (OSError, StorageError) as error:
            result.error_code = ErrorCode.KAFKA_STORAGE_ERROR
            result.error_message = f"the quotas could not be saved: {error}"
        except QuotaStoreError as error:
            result.error_code = ErrorCode.UNKNOWN_SERVER_ERROR
            result.error_message = f"the quotas could not be saved: {error}"
    return AlterClientQuotasResponse(entries=results)
