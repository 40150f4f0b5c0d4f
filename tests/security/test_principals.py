"""Who each request is from, as handlers see it (``RequestContext.principal``), on an in-process
broker with SSL (mTLS), SASL_PLAINTEXT and PLAINTEXT listeners; the end of a SASL session
(``connections.max.reauth.ms``) and re-authentication, with a manual clock."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
import struct
from pathlib import Path
from typing import Any

from strom.base.clock import ManualClock
from strom.broker.config import BrokerConfig
from strom.broker.server import BrokerServer
from strom.protocol.headers import decode_response_header, encode_request
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from strom.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from strom.security.principal import ANONYMOUS, KafkaPrincipal
from tests.compat.conftest import free_port
from tests.security.certs import CLIENT_PRINCIPAL, Certificates
from tests.security.conftest import PLAIN_JAAS, PLAIN_PASSWORD, PLAIN_USER

REAUTH_MS = 60_000


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation_id = 0

    async def call(self, request: Any, response_type: Any, version: int) -> Any:
        self.correlation_id += 1
        self.writer.write(
            encode_request(request.API_KEY, version, self.correlation_id, "t", request.encode(version))
        )
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        frame = await self.reader.readexactly(size)
        header, offset = decode_response_header(frame, request.API_KEY, version)
        assert header.correlation_id == self.correlation_id
        return response_type.decode(memoryview(frame)[offset:], version)

    async def closed(self) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(1), 5) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.writer.close()


def test_principals_by_listener_and_the_end_of_a_session(tmp_path: Path, certificates: Certificates) -> None:
    ports = {"PLAINTEXT": free_port(), "SSL": free_port(), "SASL_PLAINTEXT": free_port()}
    config = BrokerConfig(
        data_dir=tmp_path / "data",
        values={
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
            "ssl.keystore.location": str(certificates.broker_keystore),
            "ssl.truststore.location": str(certificates.ca),
            "ssl.client.auth": "requested",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": PLAIN_JAAS,
            "connections.max.reauth.ms": str(REAUTH_MS),
        },
    )
    clock = ManualClock()
    seen: list[KafkaPrincipal] = []

    async def scenario() -> None:
        server = BrokerServer(config, clock=clock)
        metadata = server.handlers[MetadataRequest.API_KEY]
        original = metadata.handle

        async def recording(context: Any, request: Any) -> Any:
            seen.append(context.principal)
            return await original(context, request)

        server.handlers = {
            **server.handlers,
            metadata.api_key: dataclasses.replace(metadata, handle=recording),
        }
        server.state.handlers = server.handlers
        await server.start()
        try:
            await run_clients(server, ports, certificates)
        finally:
            await server.stop()

    async def run_clients(server: BrokerServer, ports: dict[str, int], certificates: Certificates) -> None:
        metadata = MetadataRequest(topics=[])
        connection = Connection(*await asyncio.open_connection("127.0.0.1", ports["PLAINTEXT"]))
        await connection.call(metadata, MetadataResponse, 1)
        connection.close()
        for with_certificate in (True, False):
            context = ssl.create_default_context(cafile=str(certificates.ca))
            if with_certificate:
                context.load_cert_chain(str(certificates.client_certificate), str(certificates.client_key))
            connection = Connection(
                *await asyncio.open_connection(
                    "127.0.0.1", ports["SSL"], ssl=context, server_hostname="127.0.0.1"
                )
            )
            await connection.call(metadata, MetadataResponse, 1)
            connection.close()
        connection = Connection(*await asyncio.open_connection("127.0.0.1", ports["SASL_PLAINTEXT"]))
        login = SaslAuthenticateRequest(auth_bytes=f"\x00{PLAIN_USER}\x00{PLAIN_PASSWORD}".encode())
        await connection.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1)
        answer = await connection.call(login, SaslAuthenticateResponse, 1)
        assert answer.error_code == 0 and answer.session_lifetime_ms == REAUTH_MS
        await connection.call(metadata, MetadataResponse, 1)
        clock.advance(REAUTH_MS - 1)
        # Re-authentication renews the session.
        await connection.call(SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse, 1)
        assert (await connection.call(login, SaslAuthenticateResponse, 2)).error_code == 0
        clock.advance(REAUTH_MS - 1)
        await connection.call(metadata, MetadataResponse, 1)
        clock.advance(1)
        connection.writer.write(encode_request(3, 1, 99, "t", metadata.encode(1)))
        assert await connection.closed()  # the session expired: closed at the next request
        connection.close()

    asyncio.run(scenario())
    assert [str(principal) for principal in seen] == [
        str(ANONYMOUS),
        CLIENT_PRINCIPAL,
        str(ANONYMOUS),
        f"User:{PLAIN_USER}",
        f"User:{PLAIN_USER}",
    ]
