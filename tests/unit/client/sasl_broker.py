"""A scripted broker for the client's side of TLS and SASL: an asyncio server on 127.0.0.1 that
answers ApiVersions, SaslHandshake and SaslAuthenticate (PLAIN against a dict of passwords, SCRAM
with ``strom.security.scram.ScramServer``) and, once a connection authenticated, Metadata naming
itself. A request other than ApiVersions before authentication closes the connection, as Kafka's
broker does. Each connection's requests are recorded by API key, so tests can tell what was sent.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from strom.protocol.errors import ErrorCode
from strom.protocol.headers import decode_request_body, decode_request_header, encode_response
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from strom.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from strom.security.scram import ScramCredential, ScramError, ScramServer

API_VERSIONS = ApiVersionsRequest.API_KEY
METADATA = MetadataRequest.API_KEY
SASL_HANDSHAKE = SaslHandshakeRequest.API_KEY
SASL_AUTHENTICATE = SaslAuthenticateRequest.API_KEY
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
        }
        return ApiVersionsResponse(
            api_keys=[
                ApiVersionsResponse.ApiVersion(api_key=key, min_version=low, max_version=high)
                for key, (low, high) in ranges.items()
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
