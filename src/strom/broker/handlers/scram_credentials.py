"""DescribeUserScramCredentials 0 and AlterUserScramCredentials 0 (KIP-554) over the broker's
credential store (``context.broker.scram_credentials``): iterations and mechanisms, never salts or
keys, are described; alterations carry the salt and the salted password (never the password), with
Kafka's per-user errors (``strom.security.credentials.CredentialTable``)."""

from __future__ import annotations

from strom.broker.context import RequestContext
from strom.broker.registry import handles
from strom.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from strom.protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from strom.security.credentials import Deletion, Upsertion

Described = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
CredentialInfo = DescribeUserScramCredentialsResponse.CredentialInfo
AlterResult = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult


@handles(DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse, 0, 0)
async def handle_describe_user_scram_credentials(
    context: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsResponse:
    users = [user.name for user in request.users] if request.users else None
    results = context.broker.scram_credentials.describe(users)
    return DescribeUserScramCredentialsResponse(
        error_code=0,
        error_message=None,
        results=[
            Described(
                user=result.user,
                error_code=result.error_code,
                error_message=result.error_message,
                credential_infos=[
                    CredentialInfo(mechanism=mechanism, iterations=iterations)
                    for mechanism, iterations in result.credentials
                ],
            )
            for result in results
        ],
    )


@handles(AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, 0, 0)
async def handle_alter_user_scram_credentials(
    context: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsResponse:
    results = await context.broker.scram_credentials.alter(
        [
            Upsertion(
                item.name, item.mechanism, item.iterations, bytes(item.salt), bytes(item.salted_password)
            )
            for item in request.upsertions
        ],
        [Deletion(item.name, item.mechanism) for item in request.deletions],
    )
    return AlterUserScramCredentialsResponse(
        results=[
            AlterResult(user=result.user, error_code=result.error_code, error_message=result.error_message)
            for result in results
        ]
    )
