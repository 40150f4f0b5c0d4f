"""CreateAcls 0-3, DescribeAcls 0-3, DeleteAcls 0-3: the ACL bindings of the broker's authorizer.

Without an authorizer (``authorizer.class.name`` empty) all three answer SECURITY_DISABLED, as
Kafka does. Creating and deleting need ALTER on the cluster, describing DESCRIBE on the cluster
(else CLUSTER_AUTHORIZATION_FAILED). A binding that cannot be created (a type, pattern type,
operation or permission of UNKNOWN or ANY, MATCH, an empty name, a principal without a type) is
answered INVALID_REQUEST on its own while the others of the request are created; a filter with an
UNKNOWN field likewise. Version 0 has no pattern type: its bindings and filters are LITERAL, so a
v0 client neither sees nor deletes prefixed bindings.
"""

from __future__ import annotations

import logging

from strom.base import limits
from strom.broker.authorization import AclStoreError, cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.refused import Refused
from strom.broker.registry import handles
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from strom.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from strom.protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from strom.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    binding_from_wire,
    invalid_binding_reason,
    invalid_filter_reason,
    parse_enum,
)

log = logging.getLogger("strom.broker.acls")

SECURITY_DISABLED_MESSAGE = "no authorizer is configured on the broker (authorizer.class.name)"
CreationResult = CreateAclsResponse.AclCreationResult
FilterResult = DeleteAclsResponse.DeleteAclsFilterResult


def _binding(creation: CreateAclsRequest.AclCreation) -> AclBinding:
    return binding_from_wire(
        creation.resource_type,
        creation.resource_name,
        creation.resource_pattern_type,
        creation.principal,
        creation.host,
        creation.operation,
        creation.permission_type,
    )


@handles(CreateAclsRequest, CreateAclsResponse, 0, 3)
async def handle_create_acls(context: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    acls = context.broker.acls

    def every(error: ErrorCode, message: str) -> CreateAclsResponse:
        return CreateAclsResponse(
            results=[CreationResult(error_code=error, error_message=message) for _ in request.creations]
        )

    if acls is None:
        return every(ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)
    if not cluster_allowed(context, AclOperation.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "creating ACLs needs ALTER on the cluster")
    results: list[CreationResult] = []
    valid: list[AclBinding] = []
    for creation in request.creations:
        binding = _binding(creation)
        reason = invalid_binding_reason(binding)
        if reason is None and len(acls.authorizer) + len(valid) >= limits.acl_bindings_max:
            reason = f"the broker holds at most {limits.acl_bindings_max} ACLs"
        if reason is not None:
            results.append(CreationResult(error_code=ErrorCode.INVALID_REQUEST, error_message=reason))
        else:
            valid.append(binding)
            results.append(CreationResult(error_code=ErrorCode.NONE, error_message=None))
    if valid:
        try:
            await acls.create(valid)
        except (AclStoreError, Refused) as error:
            log.error("creating ACLs failed: %s", error)
            code = error.error if isinstance(error, Refused) else ErrorCode.UNKNOWN_SERVER_ERROR
            for result in results:
                if result.error_code == ErrorCode.NONE:
                    result.error_code = code
                    result.error_message = str(error)
        else:
            for binding in valid:
                log.info("ACL created by %s: %s %s", context.principal, binding.pattern, binding.entry)
    return CreateAclsResponse(results=results)


def _filter(
    resource_type: int,
    name: str | None,
    pattern_type: int,
    principal: str | None,
    host: str | None,
    operation: int,
    permission: int,
) -> AclBindingFilter:
    return AclBindingFilter(
        parse_enum(ResourceType, resource_type),
        name,
        parse_enum(PatternType, pattern_type),
        principal,
        host,
        parse_enum(AclOperation, operation),
        parse_enum(AclPermissionType, permission),
    )


@handles(DescribeAclsRequest, DescribeAclsResponse, 0, 3)
async def handle_describe_acls(context: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    authorizer = context.broker.authorizer
    if authorizer is None:
        return DescribeAclsResponse(
            error_code=ErrorCode.SECURITY_DISABLED, error_message=SECURITY_DISABLED_MESSAGE
        )
    if not cluster_allowed(context, AclOperation.DESCRIBE):
        return DescribeAclsResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            error_message="describing ACLs needs DESCRIBE on the cluster",
        )
    acl_filter = _filter(
        request.resource_type_filter,
        request.resource_name_filter,
        request.pattern_type_filter,
        request.principal_filter,
        request.host_filter,
        request.operation,
        request.permission_type,
    )
    reason = invalid_filter_reason(acl_filter)
    if reason is not None:
        return DescribeAclsResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=reason)
    resources: dict[ResourcePattern, list[DescribeAclsResponse.AclDescription]] = {}
    for pattern, entry in authorizer.matching(acl_filter):
        resources.setdefault(pattern, []).append(
            DescribeAclsResponse.AclDescription(
                principal=entry.principal,
                host=entry.host,
                operation=entry.operation,
                permission_type=entry.permission,
            )
        )
    return DescribeAclsResponse(
        error_code=ErrorCode.NONE,
        error_message=None,
        resources=[
            DescribeAclsResponse.DescribeAclsResource(
                resource_type=pattern.resource_type,
                resource_name=pattern.name,
                pattern_type=pattern.pattern_type,
                acls=descriptions,
            )
            for pattern, descriptions in resources.items()
        ],
    )


@handles(DeleteAclsRequest, DeleteAclsResponse, 0, 3)
async def handle_delete_acls(context: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    acls = context.broker.acls

    def every(error: ErrorCode, message: str) -> DeleteAclsResponse:
        return DeleteAclsResponse(
            filter_results=[FilterResult(error_code=error, error_message=message) for _ in request.filters]
        )

    if acls is None:
        return every(ErrorCode.SECURITY_DISABLED, SECURITY_DISABLED_MESSAGE)
    if not cluster_allowed(context, AclOperation.ALTER):
        return every(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "deleting ACLs needs ALTER on the cluster")
    results: list[FilterResult] = []
    valid: list[tuple[FilterResult, AclBindingFilter]] = []
    for wanted in request.filters:
        acl_filter = _filter(
            wanted.resource_type_filter,
            wanted.resource_name_filter,
            wanted.pattern_type_filter,
            wanted.principal_filter,
            wanted.host_filter,
            wanted.operation,
            wanted.permission_type,
        )
        reason = invalid_filter_reason(acl_filter)
        result = FilterResult(
            error_code=ErrorCode.NONE if reason is None else ErrorCode.INVALID_REQUEST, error_message=None
        )
        if reason is not None:
            result.error_message = reason
        else:
            valid.append((result, acl_filter))
        results.append(result)
    if valid:
        try:
            removed = await acls.delete([acl_filter for _, acl_filter in valid])
        except (AclStoreError, Refused) as error:
            log.error("deleting ACLs failed: %s", error)
            code = error.error if isinstance(error, Refused) else ErrorCode.UNKNOWN_SERVER_ERROR
            for result, _ in valid:
                result.error_code = code
                result.error_message = str(error)
        else:
            for (result, _), bindings in zip(valid, removed, strict=True):
                result.matching_acls = [
                    DeleteAclsResponse.DeleteAclsMatchingAcl(
                        error_code=ErrorCode.NONE,
                        error_message=None,
                        resource_type=pattern.resource_type,
                        resource_name=pattern.name,
                        pattern_type=pattern.pattern_type,
                        principal=entry.principal,
                        host=entry.host,
                        operation=entry.operation,
                        permission_type=entry.permission,
                    )
                    for pattern, entry in bindings
                ]
                for pattern, entry in bindings:
                    log.info("ACL deleted by %s: %s %s", context.principal, pattern, entry)
    return DeleteAclsResponse(filter_results=results)
