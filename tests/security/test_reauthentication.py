"""KIP-368 with real clients: a broker whose SASL sessions last 2 s (connections.max.reauth.ms);
confluent-kafka (librdkafka re-authenticates before its session ends) keeps producing over SASL_SSL
for longer than several sessions without its connection being closed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer

from tests.compat.conftest import BrokerProcess, free_port
from tests.security.certs import Certificates
from tests.security.clients import confluent_config
from tests.security.conftest import SCRAM_PASSWORD, SCRAM_USER, SecureBroker, secure_settings

SESSION_MS = 2_000
PRODUCE_FOR_S = 7.0


@pytest.fixture
def short_sessions(tmp_path: Path, certificates: Certificates) -> Iterator[SecureBroker]:
    ports = (free_port(), free_port(), free_port())
    settings = secure_settings(certificates, ports) | {"connections.max.reauth.ms": str(SESSION_MS)}
    process = BrokerProcess(
        tmp_path,
        settings,
        [
            "--log-level", "debug",  # every request is logged: the re-authentications can be counted
            "--add-scram", f"SCRAM-SHA-512=[name={SCRAM_USER},password={SCRAM_PASSWORD}]",
        ],
    )  # fmt: skip
    try:
        process.start()
        yield SecureBroker(process, certificates, process.port, *ports)
    finally:
        process.close()


def test_librdkafka_reauthenticates_and_keeps_its_connection(short_sessions: SecureBroker) -> None:
    errors: list[KafkaError] = []
    producer = Producer(confluent_config(short_sessions, "sasl_ssl_scram") | {"error_cb": errors.append})
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    delivered: list[bool] = []
    deadline = time.monotonic() + PRODUCE_FOR_S
    while time.monotonic() < deadline:
        producer.produce(topic, b"tick", on_delivery=lambda error, _message: delivered.append(error is None))
        producer.poll(0.1)
    assert producer.flush(30) == 0
    assert delivered and all(delivered)
    log = short_sessions.process.log_path.read_text()
    assert "expired" not in log  # no connection was closed for an expired session
    assert errors == []
    # Each connection logged in once, then again before each 2 s session ended: handshakes on
    # connections that had already authenticated (bootstrap and broker connection: 2 at first).
    handshakes = log.count("SaslHandshake v1")
    assert handshakes >= 2 + int(PRODUCE_FOR_S * 1000 / SESSION_MS) - 1, handshakes
