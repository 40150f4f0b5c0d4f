"""The client over TLS, against the scripted broker behind the standard library's TLS server with
certificates made by ``openssl``: the broker's chain and name checked, mutual TLS, SASL inside TLS,
and clean failures (an untrusted or misnamed certificate, a missing client certificate, the wrong
protocol on either side) that come at once, not after the request timeout."""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from strom.client.config import ClientConfig
from strom.client.errors import AuthenticationError, ConfigError, KafkaConnectionError, KafkaError
from strom.client.transport import Transport
from strom.protocol.messages.metadata import MetadataRequest
from tests.unit.client.sasl_broker import (
    API_VERSIONS,
    METADATA,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    ScriptedBroker,
)
from tests.unit.client.tls_files import KEY_PASSWORD, TlsFiles, make_tls_files

# Far above what any of these failures takes: a failure that waits for it was retried.
REQUEST_TIMEOUT_MS = 20_000
QUICK_S = 5.0


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def server_context(certificate: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)
    return context


def client_config(address: str, **settings: Any) -> ClientConfig:
    values = {"bootstrap.servers": address, "request.timeout.ms": REQUEST_TIMEOUT_MS}
    values.update({key.replace("_", "."): value for key, value in settings.items()})
    return ClientConfig.from_settings(values)


async def metadata_over(config: ClientConfig) -> str | None:
    transport = Transport(config)
    try:
        await transport.refresh_metadata(None)
        return transport.metadata.cluster_id
    finally:
        await transport.close()


async def failure_over(config: ClientConfig) -> tuple[KafkaError, float]:
    started = time.monotonic()
    transport = Transport(config)
    try:
        with pytest.raises(KafkaError) as raised:
            await transport.send(-1, MetadataRequest(topics=[]))
    finally:
        await transport.close()
    return raised.value, time.monotonic() - started


def test_ssl_with_the_ca_verifies_the_broker(tls: TlsFiles) -> None:
    async def scenario() -> None:
        context = server_context(tls.broker_certificate, tls.broker_key)
        async with ScriptedBroker(ssl_context=context, require_authentication=False) as broker:
            config = client_config(broker.address, security_protocol="SSL", ssl_ca_location=str(tls.ca))
            assert await metadata_over(config) == "scripted"
            assert broker.requests == [[API_VERSIONS, METADATA]]

    asyncio.run(scenario())


def test_sasl_ssl_with_scram_authenticates_inside_tls(tls: TlsFiles) -> None:
    async def scenario() -> None:
        context = server_context(tls.broker_certificate, tls.broker_key)
        async with ScriptedBroker(passwords={"alice": "alice-secret"}, ssl_context=context) as broker:
            config = client_config(
                broker.address,
                security_protocol="SASL_SSL",
                ssl_ca_location=str(tls.ca),
                sasl_mechanism="SCRAM-SHA-512",
                sasl_username="alice",
                sasl_password="alice-secret",
            )
            assert await metadata_over(config) == "scripted"
            assert broker.requests == [
                [API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, SASL_AUTHENTICATE, METADATA]
            ]

    asyncio.run(scenario())


@pytest.mark.parametrize("ca", ["unrelated", "system"])
def test_an_untrusted_broker_certificate_fails_at_once(tls: TlsFiles, ca: str) -> None:
    async def scenario() -> None:
        context = server_context(tls.broker_certificate, tls.broker_key)
        async with ScriptedBroker(ssl_context=context, require_authentication=False) as broker:
            settings = {"security_protocol": "SSL"}
            if ca == "unrelated":
                settings["ssl_ca_location"] = str(tls.unrelated_ca)
            error, elapsed_s = await failure_over(client_config(broker.address, **settings))
            assert isinstance(error, AuthenticationError), error
            assert "certificate verify failed" in str(error)
            assert "not signed by a CA in ssl.ca.location" in str(error)
            assert elapsed_s < QUICK_S

    asyncio.run(scenario())


def test_a_certificate_for_another_host_fails_unless_the_check_is_off(tls: TlsFiles) -> None:
    async def scenario() -> None:
        context = server_context(tls.other_name_certificate, tls.other_name_key)
        async with ScriptedBroker(ssl_context=context, require_authentication=False) as broker:
            checked = client_config(broker.address, security_protocol="SSL", ssl_ca_location=str(tls.ca))
            error, elapsed_s = await failure_over(checked)
            assert isinstance(error, AuthenticationError), error
            assert "does not name the host" in str(error) and elapsed_s < QUICK_S
            unchecked = client_config(
                broker.address,
                security_protocol="SSL",
                ssl_ca_location=str(tls.ca),
                ssl_endpoint_identification_algorithm="none",
            )
            assert await metadata_over(unchecked) == "scripted"

    asyncio.run(scenario())


@pytest.mark.parametrize("encrypted", [False, True])
def test_mutual_tls_presents_the_client_certificate(tls: TlsFiles, encrypted: bool) -> None:
    async def scenario() -> None:
        context = server_context(tls.broker_certificate, tls.broker_key, client_ca=tls.ca)
        async with ScriptedBroker(ssl_context=context, require_authentication=False) as broker:
            settings = {
                "security_protocol": "SSL",
                "ssl_ca_location": str(tls.ca),
                "ssl_certificate_location": str(tls.client_certificate),
                "ssl_key_location": str(tls.client_key_encrypted if encrypted else tls.client_key),
            }
            if encrypted:
                settings["ssl_key_password"] = KEY_PASSWORD
            assert await metadata_over(client_config(broker.address, **settings)) == "scripted"

    asyncio.run(scenario())


def test_without_a_client_certificate_mutual_tls_fails_at_once(tls: TlsFiles) -> None:
    async def scenario() -> None:
        context = server_context(tls.broker_certificate, tls.broker_key, client_ca=tls.ca)
        async with ScriptedBroker(ssl_context=context, require_authentication=False) as broker:
            config = client_config(broker.address, security_protocol="SSL", ssl_ca_location=str(tls.ca))
            error, elapsed_s = await failure_over(config)
            assert isinstance(error, AuthenticationError), error
            assert "TLS" in str(error) and elapsed_s < QUICK_S

    asyncio.run(scenario())


def test_a_wrong_key_password_is_a_config_error_before_connecting(tls: TlsFiles) -> None:
    config = client_config(
        "127.0.0.1:9",
        security_protocol="SSL",
        ssl_ca_location=str(tls.ca),
        ssl_certificate_location=str(tls.client_certificate),
        ssl_key_location=str(tls.client_key_encrypted),
        ssl_key_password="wrong",
    )
    with pytest.raises(ConfigError, match=r"cannot load the client certificate"):
        Transport(config)


def test_a_ca_file_that_is_not_pem_is_a_config_error(tls: TlsFiles, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    config = client_config("127.0.0.1:9", security_protocol="SSL", ssl_ca_location=str(junk))
    with pytest.raises(ConfigError, match=r"'ssl.ca.location': cannot load CA certificates"):
        Transport(config)


def test_a_plaintext_client_on_a_tls_port_is_told_what_to_set(tls: TlsFiles) -> None:
    async def scenario() -> None:
        context = server_context(tls.broker_certificate, tls.broker_key)
        async with ScriptedBroker(ssl_context=context, require_authentication=False) as broker:
            error, elapsed_s = await failure_over(client_config(broker.address))
            assert isinstance(error, KafkaConnectionError), error
            assert "security.protocol must be SSL or SASL_SSL" in str(error) and elapsed_s < QUICK_S

    asyncio.run(scenario())


def test_a_tls_client_on_a_plaintext_port_fails_at_once(tls: TlsFiles) -> None:
    async def scenario() -> None:
        async with ScriptedBroker(require_authentication=False) as broker:
            config = client_config(broker.address, security_protocol="SSL", ssl_ca_location=str(tls.ca))
            error, elapsed_s = await failure_over(config)
            assert isinstance(error, KafkaConnectionError), error
            assert "during the TLS handshake (is it a TLS listener?" in str(error) and elapsed_s < QUICK_S

    asyncio.run(scenario())


@pytest.mark.parametrize("client", ["admin", "producer", "consumer"])
def test_a_client_whose_certificate_does_not_load_leaves_no_thread_behind(tls: TlsFiles, client: str) -> None:
    from strom.client.admin import Admin
    from strom.client.consumer import Consumer
    from strom.client.producer import Producer

    settings = {
        "bootstrap.servers": "127.0.0.1:9",
        "client.id": f"bad-key-{client}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(tls.ca),
        "ssl.certificate.location": str(tls.client_certificate),
        "ssl.key.location": str(tls.client_key_encrypted),
        "ssl.key.password": "wrong",
    }
    make = {"admin": Admin, "producer": Producer, "consumer": Consumer}[client]
    with pytest.raises(ConfigError, match="cannot load the client certificate"):
        make(settings)
    deadline = time.monotonic() + QUICK_S
    while any(f"bad-key-{client}" in thread.name for thread in threading.enumerate()):
        assert time.monotonic() < deadline, "the client's loop thread is still running"
        time.sleep(0.01)
