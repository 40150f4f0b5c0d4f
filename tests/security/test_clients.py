"""confluent-kafka, kafka-python, aiokafka and kcat produce and consume over SASL_SSL with
SCRAM-SHA-512, over SSL with a client certificate (mTLS) and over SASL_PLAINTEXT with PLAIN; bad
credentials and protocol mix-ups fail cleanly while other clients keep being served."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.compat.wire import WireClient
from tests.security.clients import (
    MODES,
    aiokafka_config,
    client_tls_context,
    confluent_config,
    kafka_python_config,
    kcat,
    kcat_options,
    tls_wire_client,
)
from tests.security.conftest import SecureBroker

# kafka-python 3 loads its protocol schemas with importlib.resources.read_text/open_text, deprecated
# in 3.11; the suite turns warnings into errors, so its lazy schema loads are let through here.
KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
pytestmark = [pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning")]

VALUES = [b"one", b"two", b"three"]
DEADLINE_S = 30.0


def topic_name(client: str, mode: str) -> str:
    return f"{client}-{mode}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("mode", MODES)
def test_confluent_kafka_produces_and_consumes(secure_broker: SecureBroker, mode: str) -> None:
    topic = topic_name("confluent", mode)
    config = confluent_config(secure_broker, mode)
    producer = Producer(config)
    for value in VALUES:
        producer.produce(topic, value)
    assert producer.flush(DEADLINE_S) == 0
    consumer = Consumer(config | {"group.id": topic, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        received: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < len(VALUES) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                received.append(message.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert received == VALUES


@pytest.mark.parametrize("mode", MODES)
def test_kafka_python_produces_and_consumes(secure_broker: SecureBroker, mode: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    topic = topic_name("kafka-python", mode)
    config = kafka_python_config(secure_broker, mode)
    producer = KafkaProducer(**config)
    try:
        for value in VALUES:
            producer.send(topic, value).get(timeout=DEADLINE_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic, group_id=topic, auto_offset_reset="earliest", consumer_timeout_ms=20_000, **config
    )
    try:
        received = [message.value for _, message in zip(VALUES, consumer, strict=False)]
    finally:
        consumer.close()
    assert received == VALUES


@pytest.mark.parametrize("mode", MODES)
def test_aiokafka_produces_and_consumes(secure_broker: SecureBroker, mode: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = topic_name("aiokafka", mode)

    async def round_trip() -> list[bytes]:
        producer = AIOKafkaProducer(**aiokafka_config(secure_broker, mode))
        await producer.start()
        try:
            for value in VALUES:
                await producer.send_and_wait(topic, value)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, group_id=topic, auto_offset_reset="earliest", **aiokafka_config(secure_broker, mode)
        )
        await consumer.start()
        received: list[bytes] = []
        try:
            deadline = time.monotonic() + DEADLINE_S
            while len(received) < len(VALUES) and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                received += [message.value for messages in batches.values() for message in messages]
        finally:
            await consumer.stop()
        return received

    assert asyncio.run(round_trip()) == VALUES


@pytest.mark.parametrize("mode", MODES)
def test_kcat_produces_and_consumes(secure_broker: SecureBroker, mode: str) -> None:
    topic = topic_name("kcat", mode)
    options = kcat_options(secure_broker, mode)
    produced = kcat(*options, "-P", "-t", topic, stdin="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kcat(*options, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == ["one", "two", "three"]


def serves_others(broker: SecureBroker) -> None:
    """A SCRAM client over SASL_SSL still gets its answers."""
    admin = AdminClient(confluent_config(broker, "sasl_ssl_scram"))
    assert admin.list_topics(timeout=DEADLINE_S).brokers


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("nobody", "alice-secret")])
def test_a_wrong_password_and_an_unknown_user_fail_alike(
    secure_broker: SecureBroker, user: str, password: str
) -> None:
    errors: list[KafkaError] = []
    config = confluent_config(secure_broker, "sasl_ssl_scram", user, password) | {"error_cb": errors.append}
    producer = Producer(config)
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and not any(e.code() == KafkaError._AUTHENTICATION for e in errors):
        producer.poll(0.2)
    authentication = [error for error in errors if error.code() == KafkaError._AUTHENTICATION]
    assert authentication, errors
    assert "Authentication failed: Invalid user credentials" in authentication[0].str()
    serves_others(secure_broker)


def test_a_plaintext_client_on_a_tls_port_is_closed_with_a_log_line(secure_broker: SecureBroker) -> None:
    with WireClient(secure_broker.sasl_ssl_port) as client:
        client.send(ApiVersionsRequest(), 0)
        assert client.closed_by_peer()
    serves_others(secure_broker)
    log = wait_for_log(secure_broker, "TLS handshake on listener SASL_SSL failed")
    assert "WRONG_VERSION_NUMBER" in log or "wrong version number" in log


def test_a_tls_client_on_a_plaintext_port_fails_its_handshake_with_a_log_line(
    secure_broker: SecureBroker,
) -> None:
    context = client_tls_context(secure_broker.certificates)
    for port in (secure_broker.plaintext_port, secure_broker.sasl_plaintext_port):
        with pytest.raises((ssl.SSLError, ConnectionError, socket.timeout)):
            tls_wire_client(port, context, timeout_s=10)
    serves_others(secure_broker)
    wait_for_log(secure_broker, "a TLS handshake on a listener without TLS")


def test_mtls_refuses_a_client_without_a_certificate_or_with_one_of_another_ca(
    secure_broker: SecureBroker,
) -> None:
    certificates = secure_broker.certificates
    rogue = client_tls_context(certificates)
    rogue.load_cert_chain(str(certificates.rogue_certificate), str(certificates.rogue_key))
    # The refusal is a TLS alert saying why, as Kafka sends it, not a bare disconnect (librdkafka's
    # own 0097_ssl_verify expects an SSL error, and reports a disconnect as a transport failure).
    for context, alert in (
        (client_tls_context(certificates), "CERTIFICATE_REQUIRED"),
        (rogue, "UNKNOWN_CA"),
    ):
        raw = socket.create_connection(("127.0.0.1", secure_broker.ssl_port), timeout=10)
        try:
            # With TLS 1.3 the client may learn of the refusal only at its first read.
            with pytest.raises(ssl.SSLError, match=alert):
                secured = context.wrap_socket(raw, server_hostname="127.0.0.1")
                raw = secured
                secured.sendall(b"\x00\x00\x00\x0a" + b"\x00" * 10)
                secured.recv(100)
        finally:
            raw.close()
    with tls_wire_client(
        secure_broker.ssl_port, client_tls_context(certificates, with_certificate=True)
    ) as client:
        assert client.round_trip(MetadataRequest(topics=[]), MetadataResponse, 1).brokers
    wait_for_log(secure_broker, "TLS handshake on listener SSL failed")


def wait_for_log(broker: SecureBroker, text: str, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        log = broker.process.log_path.read_text()
        if text in log:
            return log
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in the broker's log:\n{broker.process.log_tail()}")


def test_the_broker_log_has_no_traceback(secure_broker: SecureBroker) -> None:
    assert secure_broker.process.running
    assert "Traceback" not in secure_broker.process.log_path.read_text()
    with WireClient(secure_broker.plaintext_port) as client:
        assert client.round_trip(ApiVersionsRequest(), ApiVersionsResponse, 0).error_code == 0
