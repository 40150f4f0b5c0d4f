"""A broker with every security protocol at once, for real clients.

Certificates are made with ``openssl`` once per session (``certificates``). ``secure_broker``
(module scope) is one ``strom broker`` subprocess with four listeners on free ports of 127.0.0.1:

    PLAINTEXT       the first (what BrokerProcess waits for); also the "TLS client on a plaintext port"
    SASL_SSL        SCRAM-SHA-256 and SCRAM-SHA-512
    SSL             ssl.client.auth=required (mTLS): the principal is the certificate's subject
    SASL_PLAINTEXT  PLAIN (users from a JAAS configuration) and SCRAM-SHA-512

The SCRAM users are created at start with ``--add-scram``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.compat.conftest import BrokerProcess, free_port
from tests.security.certs import Certificates, make_certificates

SCRAM_USER, SCRAM_PASSWORD = "alice", "alice-secret"
PLAIN_USER, PLAIN_PASSWORD = "bob", "bob-secret"
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required"
    ' username="admin" password="admin-secret" user_admin="admin-secret"'
    f' user_{PLAIN_USER}="{PLAIN_PASSWORD}";'
)


@dataclass(frozen=True)
class SecureBroker:
    process: BrokerProcess
    certificates: Certificates
    plaintext_port: int
    sasl_ssl_port: int
    ssl_port: int
    sasl_plaintext_port: int

    def bootstrap(self, port: int) -> str:
        return f"127.0.0.1:{port}"


def secure_settings(certificates: Certificates, ports: tuple[int, int, int]) -> dict[str, str]:
    sasl_ssl, ssl_port, sasl_plaintext = ports
    return {
        "listeners": (
            f"PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:{sasl_ssl},SSL://127.0.0.1:{ssl_port},"
            f"SASL_PLAINTEXT://127.0.0.1:{sasl_plaintext}"
        ),
        "ssl.keystore.location": str(certificates.broker_keystore),
        "ssl.truststore.location": str(certificates.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "offsets.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


@pytest.fixture(scope="module")
def secure_broker(
    tmp_path_factory: pytest.TempPathFactory, certificates: Certificates
) -> Iterator[SecureBroker]:
    ports = (free_port(), free_port(), free_port())
    work_dir: Path = tmp_path_factory.mktemp("secure-broker")
    process = BrokerProcess(
        work_dir,
        secure_settings(certificates, ports),
        [
            "--add-scram", f"SCRAM-SHA-512=[name={SCRAM_USER},password={SCRAM_PASSWORD}]",
            "--add-scram", f"SCRAM-SHA-256=[name={SCRAM_USER},password={SCRAM_PASSWORD}]",
        ],
    )  # fmt: skip
    try:
        process.start()
        yield SecureBroker(process, certificates, process.port, *ports)
    finally:
        process.close()
