"""SaslHandshake 0-1 and SaslAuthenticate 0-2: they drive the connection's SASL state
(``strom.security.sasl.SaslAuthenticator``, held by the server for connections of SASL_PLAINTEXT
and SASL_SSL listeners and handed in ``context.sasl``).

On a PLAINTEXT or SSL listener there is nothing to authenticate: both are answered
ILLEGAL_SASL_STATE, as Kafka does. A failed authentication (and a mechanism not enabled) is
answered after connection.failed.authentication.delay.ms (the loop keeps serving everyone else
meanwhile); the server then closes the connection.
"""

from __future__ import annotations

import asyncio

from strom.broker.context import RequestContext
from strom.broker.registry import handles
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from strom.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse


@handles(SaslHandshakeRequest, SaslHandshakeResponse, 0, 1)
async def handle_sasl_handshake(
    context: RequestContext, request: SaslHandshakeRequest
) -> SaslHandshakeResponse:
    sasl = context.sasl
    if sasl is None:
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    answer = sasl.handshake(request.mechanism, context.api_version)
    if answer.error_code:  # the connection is closed after this answer: delayed as a failed login
        await asyncio.sleep(sasl.settings.failed_authentication_delay_ms / 1000)
    return SaslHandshakeResponse(error_code=answer.error_code, mechanisms=answer.mechanisms)


@handles(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2)
async def handle_sasl_authenticate(
    context: RequestContext, request: SaslAuthenticateRequest
) -> SaslAuthenticateResponse:
    sasl = context.sasl
    if sasl is None:
        return SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="SaslAuthenticate on a listener without SASL",
            auth_bytes=b"",
        )
    await context.broker.scram_credentials.wait_loaded()  # a cluster's first read of ZooKeeper
    answer = sasl.authenticate(request.auth_bytes, context.broker.clock.monotonic_ms())
    if answer.failed:
        await asyncio.sleep(sasl.settings.failed_authentication_delay_ms / 1000)
    return SaslAuthenticateResponse(
        error_code=answer.error_code,
        error_message=answer.error_message,
        auth_bytes=answer.token,
        session_lifetime_ms=answer.session_lifetime_ms,
    )
