"""A broker's connection to another broker (``PeerConnection``) over SASL_SSL, against a real strom
broker whose SASL sessions last one second (``connections.max.reauth.ms``): it logs in before its
first request and again before each session ends, so requests keep being answered on the one
connection well past the first session's end; a wrong password and a certificate from a CA the
connecting broker does not trust are ``PeerSecurityError`` at once, with the reason in words.

The connecting side's settings are read from a broker configuration exactly as a broker of a
cluster reads its own (``inter_broker_security``)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.broker.cluster.peer import PeerConnection, PeerSecurityError
from strom.broker.config import BrokerConfig
from strom.broker.listener_security import InterBrokerSecurity, inter_broker_security
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from tests.compat.conftest import BrokerProcess
from tests.security.certs import Certificates, make_certificates

SESSION_MS = 1_000
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
REQUEST_TIMEOUT_MS = 10_000


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certificates: Certificates) -> Iterator[BrokerProcess]:
    settings = {
        "listeners": "SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(certificates.broker_keystore),
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": f'{PLAIN_MODULE} required user_broker="broker-secret";',
        "connections.max.reauth.ms": str(SESSION_MS),
        "connection.failed.authentication.delay.ms": "0",
    }
    process = BrokerProcess(tmp_path_factory.mktemp("broker"), settings)
    process.start()
    try:
        yield process
    finally:
        process.close()


def security(tmp_path: Path, truststore: Path, password: str) -> InterBrokerSecurity:
    """What a broker configured so would use to reach the others."""
    values = {
        "zookeeper.connect": "127.0.0.1:2181",
        "listeners": "SASL_SSL://127.0.0.1:0",
        "security.inter.broker.protocol": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": f'{PLAIN_MODULE} required username="broker" password="{password}";',
        "ssl.truststore.location": str(truststore),
    }
    return inter_broker_security(BrokerConfig(data_dir=tmp_path, values=values))


async def api_versions(peer: PeerConnection) -> ApiVersionsResponse:
    response: ApiVersionsResponse = await peer.request(
        ApiVersionsRequest(), 2, ApiVersionsResponse, REQUEST_TIMEOUT_MS
    )
    return response


def test_a_peer_connection_logs_in_again_before_each_session_ends(
    broker: BrokerProcess, certificates: Certificates, tmp_path: Path
) -> None:
    async def scenario() -> tuple[int, int, bool]:
        peer = PeerConnection(
            "127.0.0.1", broker.port, "strom-broker-9", security(tmp_path, certificates.ca, "broker-secret")
        )
        try:
            answered = 0
            deadline = time.monotonic() + 60
            # Three logins are at least 1.7 sessions apart: requests went on past the first's end.
            while peer.logins < 3 and time.monotonic() < deadline:
                assert (await api_versions(peer)).error_code == 0
                answered += 1
                await asyncio.sleep(0.05)
            return answered, peer.logins, peer.closed
        finally:
            peer.close()

    answered, logins, closed = asyncio.run(scenario())
    assert not closed  # the broker would have closed it at the first request of an expired session
    assert logins >= 3 and answered >= logins


def test_a_wrong_password_is_refused_at_once_with_the_reason(
    broker: BrokerProcess, certificates: Certificates, tmp_path: Path
) -> None:
    async def scenario() -> None:
        peer = PeerConnection(
            "127.0.0.1", broker.port, "strom-broker-9", security(tmp_path, certificates.ca, "wrong")
        )
        try:
            await peer.open(REQUEST_TIMEOUT_MS)
        finally:
            peer.close()

    with pytest.raises(
        PeerSecurityError,
        match=r"cannot log in to the broker at 127\.0\.0\.1:\d+ \(listener SASL_SSL \(SASL_SSL, PLAIN as broker\)\): authentication of 'broker' with PLAIN failed",
    ):
        asyncio.run(scenario())


def test_a_certificate_of_an_untrusted_ca_is_refused_with_the_reason(
    broker: BrokerProcess, certificates: Certificates, tmp_path: Path
) -> None:
    rogue_ca = certificates.directory / "rogue-ca.pem"  # the connecting broker trusts only this CA

    async def scenario() -> None:
        peer = PeerConnection(
            "127.0.0.1", broker.port, "strom-broker-9", security(tmp_path, rogue_ca, "broker-secret")
        )
        try:
            await peer.open(REQUEST_TIMEOUT_MS)
        finally:
            peer.close()

    with pytest.raises(
        PeerSecurityError, match=r"the other broker's certificate is not trusted: .*certificate"
    ):
        asyncio.run(scenario())


def test_a_port_probe_of_a_tls_listener_leaves_no_line_a_plaintext_client_does(
    tmp_path: Path, certificates: Certificates
) -> None:
    """What the ``strom`` command's reachability check and a broker's start-up wait do: connect and
    close without a byte. Between two plaintext clients (each a rate-limited warning), three probes
    leave nothing."""
    settings = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(certificates.broker_keystore)}
    process = BrokerProcess(tmp_path, settings)
    process.start()
    try:

        def plaintext_client() -> None:
            with socket.create_connection(("127.0.0.1", process.port), timeout=10) as client:
                client.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")
                client.recv(1024)  # the broker closes it

        def lines() -> int:
            return process.log_path.read_text(encoding="utf-8").count("TLS handshake on listener SSL failed")

        def wait_for_lines(count: int) -> None:
            deadline = time.monotonic() + 30
            while lines() < count:
                assert time.monotonic() < deadline, (
                    f"no {count} handshake lines:\n{process.log_path.read_text()}"
                )
                time.sleep(0.05)

        plaintext_client()
        wait_for_lines(1)
        for _ in range(3):
            socket.create_connection(("127.0.0.1", process.port), timeout=10).close()
        plaintext_client()
        wait_for_lines(2)
        assert lines() == 2
    finally:
        process.close()
