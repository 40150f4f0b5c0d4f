"""The client's side of SASL: the sans-I/O ``SaslAuthenticator`` against ``ScramServer`` and
scripted answers, then the transport against a scripted broker on 127.0.0.1 (PLAIN, SCRAM, a
refused login, re-authentication before the session lifetime runs out)."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from typing import Any

import pytest

from strom.client.admin import Admin
from strom.client.config import ClientConfig
from strom.client.consumer import Consumer
from strom.client.errors import AuthenticationError, KafkaConnectionError, KafkaError
from strom.client.producer import Producer
from strom.client.security import SaslAuthenticator
from strom.client.transport import Transport
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.metadata import MetadataRequest
from strom.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from strom.protocol.messages.sasl_handshake import SaslHandshakeResponse
from strom.security.scram import ScramCredential, ScramServer
from tests.unit.client.sasl_broker import (
    API_VERSIONS,
    METADATA,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    ScriptedBroker,
    running_in_thread,
)

USERS = {"alice": "alice-secret", "bob": "bob-secret"}


# -- the authenticator on its own ---------------------------------------------------------------


def test_plain_sends_the_rfc_4616_message() -> None:
    authenticator = SaslAuthenticator("PLAIN", "alice", "pässword")
    assert authenticator.start().mechanism == "PLAIN"
    request = authenticator.receive(SaslHandshakeResponse(mechanisms=["PLAIN"]))
    assert isinstance(request, SaslAuthenticateRequest)
    assert request.auth_bytes == b"\0alice\0p\xc3\xa4ssword"
    assert authenticator.receive(SaslAuthenticateResponse(session_lifetime_ms=60_000)) is None
    assert authenticator.authenticated and authenticator.session_lifetime_ms == 60_000


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_runs_the_exchange_and_checks_the_server(mechanism: str) -> None:
    credential = ScramCredential.from_password(mechanism, "alice-secret")
    server = ScramServer(mechanism, lambda name: credential if name == "alice" else None)
    authenticator = SaslAuthenticator(mechanism, "alice", "alice-secret")
    first = authenticator.receive(SaslHandshakeResponse(mechanisms=[mechanism]))
    assert first is not None and first.auth_bytes.startswith(b"n,,n=alice,r=")
    final = authenticator.receive(SaslAuthenticateResponse(auth_bytes=server.first(first.auth_bytes)))
    assert final is not None and b",p=" in final.auth_bytes
    assert b"alice-secret" not in first.auth_bytes + final.auth_bytes
    assert authenticator.receive(SaslAuthenticateResponse(auth_bytes=server.final(final.auth_bytes))) is None
    assert authenticator.authenticated and server.username == "alice"


def test_a_server_that_cannot_prove_the_credential_is_refused() -> None:
    """A broker without alice's credential (a man in the middle) cannot sign the final message:
    the client refuses it even though the broker said "no error"."""
    credential = ScramCredential.from_password("SCRAM-SHA-512", "alice-secret")
    server = ScramServer("SCRAM-SHA-512", lambda name: credential)
    authenticator = SaslAuthenticator("SCRAM-SHA-512", "alice", "alice-secret")
    first = authenticator.receive(SaslHandshakeResponse())
    assert first is not None
    final = authenticator.receive(SaslAuthenticateResponse(auth_bytes=server.first(first.auth_bytes)))
    assert final is not None
    forged = b"v=" + base64.b64encode(bytes(64))
    with pytest.raises(AuthenticationError, match=r"signature is wrong") as raised:
        authenticator.receive(SaslAuthenticateResponse(auth_bytes=forged))
    assert not raised.value.retriable and not authenticator.authenticated


def test_a_mechanism_the_broker_does_not_enable_names_those_it_does() -> None:
    authenticator = SaslAuthenticator("SCRAM-SHA-512", "alice", "x")
    response = SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=["PLAIN"])
    with pytest.raises(
        AuthenticationError, match=r"does not enable SASL mechanism SCRAM-SHA-512 \(it enables: PLAIN\)"
    ):
        authenticator.receive(response)


def test_a_listener_without_sasl_is_named() -> None:
    authenticator = SaslAuthenticator("PLAIN", "alice", "x")
    with pytest.raises(AuthenticationError, match=r"SASL_PLAINTEXT or SASL_SSL"):
        authenticator.receive(SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE))


def test_a_refused_login_carries_the_brokers_message_and_is_not_retriable() -> None:
    authenticator = SaslAuthenticator("PLAIN", "alice", "wrong")
    authenticator.receive(SaslHandshakeResponse())
    response = SaslAuthenticateResponse(
        error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message="Invalid username or password"
    )
    with pytest.raises(AuthenticationError) as raised:
        authenticator.receive(response)
    assert str(raised.value) == "authentication of 'alice' with PLAIN failed: Invalid username or password"
    assert raised.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED and not raised.value.retriable


def test_answers_out_of_turn_are_refused() -> None:
    authenticator = SaslAuthenticator("PLAIN", "alice", "x")
    with pytest.raises(AuthenticationError, match=r"out of turn"):
        authenticator.receive(SaslAuthenticateResponse())


# -- the transport against a scripted broker ----------------------------------------------------


def sasl_config(address: str, mechanism: str, user: str, password: str, **extra: Any) -> ClientConfig:
    return ClientConfig.from_settings(
        {
            "bootstrap.servers": address,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
            **extra,
        }
    )


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_a_channel_authenticates_before_its_first_request(mechanism: str) -> None:
    async def scenario() -> None:
        async with ScriptedBroker(passwords=USERS) as broker:
            transport = Transport(sasl_config(broker.address, mechanism, "bob", "bob-secret"))
            try:
                await transport.refresh_metadata(None)
                assert transport.metadata.cluster_id == "scripted"
            finally:
                await transport.close()
            handshake = [API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE]
            scram_steps = [SASL_AUTHENTICATE] if mechanism != "PLAIN" else []
            assert broker.requests == [[*handshake, *scram_steps, METADATA]]
            assert broker.authentications == 1

    asyncio.run(scenario())


def test_plaintext_sends_no_sasl_request() -> None:
    async def scenario() -> None:
        async with ScriptedBroker(passwords=USERS) as broker:
            transport = Transport(ClientConfig.from_settings({"bootstrap.servers": broker.address}))
            try:
                # The scripted broker closes a connection that asks for Metadata unauthenticated.
                with pytest.raises(KafkaError):
                    await transport.send(-1, MetadataRequest(topics=[]), timeout_ms=2_000)
            finally:
                await transport.close()
            assert broker.requests[0] == [API_VERSIONS, METADATA]

    asyncio.run(scenario())


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_wrong_password_fails_at_once_with_the_brokers_message(mechanism: str) -> None:
    async def scenario() -> None:
        async with ScriptedBroker(passwords=USERS) as broker:
            transport = Transport(
                sasl_config(broker.address, mechanism, "alice", "wrong", **{"request.timeout.ms": 20_000})
            )
            started = time.monotonic()
            try:
                with pytest.raises(
                    AuthenticationError, match=f"authentication of 'alice' with {mechanism} failed"
                ) as raised:
                    await transport.refresh_metadata(None)
            finally:
                await transport.close()
            # Not retried until the 20 s request timeout: the first refusal ends the call.
            assert time.monotonic() - started < 5
            assert raised.value.code == ErrorCode.SASL_AUTHENTICATION_FAILED
            assert transport.authentication_error is raised.value
            assert len(broker.requests) == 1

    asyncio.run(scenario())


def test_an_unknown_user_fails_like_a_wrong_password() -> None:
    async def scenario() -> None:
        async with ScriptedBroker(passwords=USERS) as broker:
            transport = Transport(sasl_config(broker.address, "SCRAM-SHA-256", "mallory", "x"))
            try:
                with pytest.raises(AuthenticationError, match=r"Invalid user credentials"):
                    await transport.refresh_metadata(None)
            finally:
                await transport.close()

    asyncio.run(scenario())


def test_a_broker_that_cannot_sign_the_final_message_is_not_trusted() -> None:
    async def scenario() -> None:
        forged = b"v=" + base64.b64encode(b"\1" * 64)
        async with ScriptedBroker(passwords=USERS, tamper_server_final=lambda final: forged) as broker:
            transport = Transport(sasl_config(broker.address, "SCRAM-SHA-512", "alice", "alice-secret"))
            try:
                with pytest.raises(AuthenticationError, match=r"the server's signature is wrong"):
                    await transport.refresh_metadata(None)
            finally:
                await transport.close()
            assert broker.requests[0][-1] == SASL_AUTHENTICATE  # nothing was sent after it

    asyncio.run(scenario())


def test_a_broker_with_only_saslhandshake_v0_is_refused_clearly() -> None:
    async def scenario() -> None:
        async with ScriptedBroker(passwords=USERS, handshake_max_version=0) as broker:
            transport = Transport(sasl_config(broker.address, "PLAIN", "alice", "alice-secret"))
            try:
                with pytest.raises(
                    AuthenticationError, match=r"cannot authenticate this client.*SaslHandshake"
                ):
                    await transport.refresh_metadata(None)
            finally:
                await transport.close()

    asyncio.run(scenario())


def test_the_channel_reauthenticates_before_the_session_lifetime_runs_out() -> None:
    """KIP-368: with a 300 ms session lifetime, requests over 1.5 s keep working on one connection,
    which authenticated again several times (each at 85-95 % of the lifetime)."""

    async def scenario() -> None:
        async with ScriptedBroker(passwords=USERS, session_lifetime_ms=300) as broker:
            transport = Transport(sasl_config(broker.address, "SCRAM-SHA-256", "alice", "alice-secret"))
            try:
                deadline = time.monotonic() + 1.5
                answered = 0
                while time.monotonic() < deadline:
                    # Always the bootstrap connection (Metadata would move the client to node 0's).
                    await transport.send(-1, MetadataRequest(topics=[]))
                    answered += 1
                    await asyncio.sleep(0.02)
            finally:
                await transport.close()
            assert len(broker.requests) == 1, "one connection throughout"
            assert broker.authentications >= 4
            # Every login that began was completed, but for one the client may have begun just before
            # closing (its handshake sent, its authentication cut short by the close).
            assert broker.requests[0].count(SASL_HANDSHAKE) - broker.authentications in (0, 1)
            assert broker.requests[0].count(METADATA) == answered

    asyncio.run(scenario())


def test_a_failed_reauthentication_closes_the_channel() -> None:
    async def scenario() -> None:
        async with ScriptedBroker(passwords=dict(USERS), session_lifetime_ms=200) as broker:
            transport = Transport(sasl_config(broker.address, "PLAIN", "alice", "alice-secret"))
            try:
                await transport.refresh_metadata(None)
                channel = transport.ready_channel(-1)
                assert channel is not None
                broker.passwords["alice"] = "changed"  # the next login is refused
                for _ in range(100):
                    if channel.closed:
                        break
                    await asyncio.sleep(0.01)
                assert channel.closed
                with pytest.raises((AuthenticationError, KafkaConnectionError)):
                    await channel.request(MetadataRequest(topics=[]))
                with pytest.raises(AuthenticationError):
                    await transport.refresh_metadata(None)
            finally:
                await transport.close()

    asyncio.run(scenario())


# -- the clients: a refused login reaches the caller at once ------------------------------------


@pytest.fixture
def broker_in_thread() -> Iterator[ScriptedBroker]:
    with running_in_thread(ScriptedBroker(passwords=dict(USERS))) as broker:
        yield broker


def refused_settings(broker: ScriptedBroker) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "wrong",
        "request.timeout.ms": 20_000,
    }


def test_admin_producer_and_consumer_raise_a_refused_login_at_once(broker_in_thread: ScriptedBroker) -> None:
    settings = refused_settings(broker_in_thread)
    expected = "authentication of 'alice' with SCRAM-SHA-512 failed: Authentication failed"

    started = time.monotonic()
    with Admin(settings) as admin, pytest.raises(AuthenticationError, match=expected):
        admin.list_topics()
    with Producer(settings) as producer, pytest.raises(AuthenticationError, match=expected):
        producer.send("events", b"value")
    consumer = Consumer(settings)
    try:
        consumer.assign([("events", 0)])
        with pytest.raises(AuthenticationError, match=expected):
            consumer.poll(20_000)
    finally:
        consumer.close()
    group_consumer = Consumer({**settings, "group.id": "readers"})
    try:
        group_consumer.subscribe(["events"])
        with pytest.raises(AuthenticationError, match=expected):
            group_consumer.poll(20_000)
    finally:
        group_consumer.close()
    # Four clients, each told within moments, not after its 20 s timeouts.
    assert time.monotonic() - started < 10


def test_only_scrams_salting_step_is_marked_slow() -> None:
    scram = SaslAuthenticator("SCRAM-SHA-512", "alice", "x")
    assert not scram.hashes_next
    scram.receive(SaslHandshakeResponse())
    assert scram.hashes_next  # the server-first message comes next: the password is salted then
    plain = SaslAuthenticator("PLAIN", "alice", "x")
    plain.receive(SaslHandshakeResponse())
    assert not plain.hashes_next
