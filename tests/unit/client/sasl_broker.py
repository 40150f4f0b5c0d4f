"""A scripted broker for the client's side of TLS and SASL: an asyncio server on 127.0.0.1 that
answers ApiVersions, SaslHandshake and SaslAuthenticate (PLAIN against a dict of passwords, SCRAM
with ``strom.security.scram.ScramServer``) and, once a connection authenticated, Metadata naming
itself. A request other than ApiVersions before authentication closes the connection, as Kafka's
broker does. Each connection's requests are recorded by API key, so tests can tell what was sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from strom.protocol.errors import ErrorCode
from strom.protocol.headers import decode_request_body, decode_request_header, encode_response
from strom.protocol.messages.alter_user_scram_credentials import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
)
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.describe_user_scram_credentials import (
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
)
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from strom.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from strom.security.scram import ScramCredential, ScramError, ScramServer

API_VERSIONS = ApiVersionsRequest.API_KEY
METADATA = MetadataRequest.API_KEY
SASL_HANDSHAKE = SaslHandshakeRequest.API_KEY
SASL_AUTHENTICATE = SaslAuthenticateRequest.API_KEY
DESCRIBE_SCRAM = DescribeUserScramCredentialsRequest.API_KEY
ALTER_SCRAM = AlterUserScramCredentialsRequest.API_KEY
MECHANISM_NAMES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
FRAME_BYTES_MAX = 1 << 20


@dataclass
class ScriptedBroker:
    """``passwords``: user -> password; SCRAM credentials are made from them for both mechanisms."""

    passwords: dict[str, str] = field(default_factory=dict)
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    session_lifetime_ms: int = 0
    ssl_context: ssl.SSLContext | None = None
    # Replaces the SCRAM server-final message (a broker that does not hold the credential).
    tamper_server_final: Callable[[bytes], bytes] | None = None
    # SaslHandshake's highest version advertised (0: a broker too old for SaslAuthenticate).
    handshake_max_version: int = 1
    # False: a TLS-only listener that answers Metadata without SASL.
    require_authentication: bool = True
    # Per connection, the API keys received, in order.
    requests: list[list[int]] = field(default_factory=list)
    authentications: int = 0
    # Every AlterUserScramCredentials request received, as decoded.
    alterations: list[AlterUserScramCredentialsRequest] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _credentials: dict[tuple[str, str], ScramCredential] = field(default_factory=dict)

    async def __aenter__(self) -> ScriptedBroker:
        for user, password in self.passwords.items():
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                self._credentials[(mechanism, user)] = ScramCredential.from_password(mechanism, password)
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received: list[int] = []
        self.requests.append(received)
        authenticated = False
        mechanism: str | None = None
        scram: ScramServer | None = None
        try:
            while True:
                size = int.from_bytes(await reader.readexactly(4), "big")
                if size > FRAME_BYTES_MAX:
                    return  # not a Kafka request (a TLS ClientHello reads as ~370 MB)
                frame = await reader.readexactly(size)
                header, offset = decode_request_header(frame)
                key, version = header.request_api_key, header.request_api_version
                received.append(key)
                if key == API_VERSIONS:
                    response: object = self._api_versions()
                elif key == SASL_HANDSHAKE:
                    request, _ = decode_request_body(SaslHandshakeRequest, frame, offset, version)
                    if request.mechanism in self.mechanisms:
                        mechanism = request.mechanism
                        code = ErrorCode.NONE
                        if mechanism != "PLAIN":
                            scram = ScramServer(
                                mechanism, lambda name, m=mechanism: self._credentials.get((m, name))
                            )
                    else:
                        code = ErrorCode.UNSUPPORTED_SASL_MECHANISM
                    response = SaslHandshakeResponse(error_code=code, mechanisms=list(self.mechanisms))
                elif key == SASL_AUTHENTICATE and mechanism is not None:
                    request, _ = decode_request_body(SaslAuthenticateRequest, frame, offset, version)
                    response, done, failed = self._authenticate(mechanism, scram, bytes(request.auth_bytes))
                    if done:
                        authenticated = True
                        self.authentications += 1
                        mechanism = scram = None
                    if failed:
                        writer.write(
                            encode_response(header.correlation_id, key, version, response.encode(version))
                        )
                        await writer.drain()
                        return  # Kafka closes the connection after a failed authentication
                elif key == METADATA and (authenticated or not self.require_authentication):
                    response = MetadataResponse(
                        brokers=[
                            MetadataResponse.MetadataResponseBroker(
                                node_id=0, host="127.0.0.1", port=self.port
                            )
                        ],
                        cluster_id="scripted",
                        controller_id=0,
                        topics=[],
                    )
                elif key == DESCRIBE_SCRAM and (authenticated or not self.require_authentication):
                    request, _ = decode_request_body(
                        DescribeUserScramCredentialsRequest, frame, offset, version
                    )
                    response = self._describe_scram(request)
                elif key == ALTER_SCRAM and (authenticated or not self.require_authentication):
                    request, _ = decode_request_body(AlterUserScramCredentialsRequest, frame, offset, version)
                    response = self._alter_scram(request)
                else:
                    return  # out of turn: close, as Kafka does before authentication
                writer.write(
                    encode_response(header.correlation_id, key, version, response.encode(version))  # type: ignore[attr-defined]
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass  # the test is over (asyncio.run cancels what is left); nothing to report
        finally:
            writer.close()

    def _api_versions(self) -> ApiVersionsResponse:
        ranges = {
            API_VERSIONS: (0, 3),
            METADATA: (0, 12),
            SASL_HANDSHAKE: (0, self.handshake_max_version),
            SASL_AUTHENTICATE: (0, 2),
            DESCRIBE_SCRAM: (0, 0),
            ALTER_SCRAM: (0, 0),
        }
        return ApiVersionsResponse(
            api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
                for key, (low, high) in ranges.items()
            ]
        )

    def _describe_scram(
        self, request: DescribeUserScramCredentialsRequest
    ) -> DescribeUserScramCredentialsResponse:
        known = sorted({user for _, user in self._credentials})
        wanted = known if not request.users else [user.name for user in request.users]
        results = []
        for user in wanted:
            infos = [
                DescribeUserScramCredentialsResponse.CredentialInfo(
                    mechanism=code, iterations=self._credentials[(name, user)].iterations
                )
                for code, name in MECHANISM_NAMES.items()
                if (name, user) in self._credentials
            ]
            code = ErrorCode.NONE if infos else ErrorCode.RESOURCE_NOT_FOUND
            results.append(
                DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult(
                    user=user, error_code=code, credential_infos=infos
                )
            )
        return DescribeUserScramCredentialsResponse(results=results)

    def _alter_scram(self, request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
        self.alterations.append(request)
        errors: dict[str, ErrorCode] = {}
        for deletion in request.deletions:
            found = self._credentials.pop((MECHANISM_NAMES[deletion.mechanism], deletion.name), None)
            errors.setdefault(deletion.name, ErrorCode.NONE if found else ErrorCode.RESOURCE_NOT_FOUND)
        for upsertion in request.upsertions:
            mechanism = MECHANISM_NAMES[upsertion.mechanism]
            self._credentials[(mechanism, upsertion.name)] = ScramCredential.from_salted_password(
                mechanism, bytes(upsertion.salted_password), bytes(upsertion.salt), upsertion.iterations
            )
            errors.setdefault(upsertion.name, ErrorCode.NONE)
        return AlterUserScramCredentialsResponse(
            results=[
                AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult(user=user, error_code=code)
                for user, code in errors.items()
            ]
        )

    def _authenticate(
        self, mechanism: str, scram: ScramServer | None, token: bytes
    ) -> tuple[SaslAuthenticateResponse, bool, bool]:
        """(response, authenticated now, failed)."""

        def refused(message: str) -> tuple[SaslAuthenticateResponse, bool, bool]:
            return (
                SaslAuthenticateResponse(
                    error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=message
                ),
                False,
                True,
            )

        def accepted(reply: bytes, done: bool) -> tuple[SaslAuthenticateResponse, bool, bool]:
            lifetime = self.session_lifetime_ms if done else 0
            return SaslAuthenticateResponse(auth_bytes=reply, session_lifetime_ms=lifetime), done, False

        if scram is None:
            _, user, password = token.decode().split("\0")
            if self.passwords.get(user) != password:
                return refused("Authentication failed: Invalid username or password")
            return accepted(b"", True)
        try:
            if scram.username is None and not scram.requested_name:
                return accepted(scram.first(token), False)
            final = scram.final(token)
        except ScramError as error:
            return refused(str(error))
        if self.tamper_server_final is not None:
            final = self.tamper_server_final(final)
        return accepted(final, True)


@contextlib.contextmanager
def running_in_thread(broker: ScriptedBroker) -> Iterator[ScriptedBroker]:
    """``broker`` serving from a loop of its own (the synchronous clients block their thread)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="scripted-broker", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(broker.__aenter__(), loop).result(10)
        try:
            yield broker
        finally:
            asyncio.run_coroutine_threadsafe(broker.__aexit__(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
