"""docs/security.md's "From scratch" walk-through, step by step against a real broker: one SASL_SSL
listener with SCRAM-SHA-512, ACLs on, an admin who is the only super user; users, topics, ACLs and a
quota made with the ``strom`` command as that admin; then alice and bob, authenticated, get what
their ACLs and quota say — from confluent-kafka, kafka-python, kcat and strom's own client.

What each piece does alone is tested beside this file (test_clients, test_acls_clients,
test_quotas_broker, test_strom_client_security); here they work together: the principal SASL
establishes is the one ACLs and quotas see.
"""

from __future__ import annotations

import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from tests.compat.cli_support import run_strom
from tests.compat.conftest import BrokerProcess, free_port
from tests.security.certs import Certificates

# kafka-python 3.0 reads its schemas with a deprecated importlib call.
KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

pytestmark = [
    pytest.mark.compat,
    pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning"),
]

ADMIN_PASSWORD = "admin-secret"
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}
RECORDS = 20
BOB_BYTES_PER_S = 100 * 1024
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Secured:
    process: BrokerProcess
    certificates: Certificates
    port: int
    admin_properties: Path

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def librdkafka(self, user: str) -> dict[str, Any]:
        """The confluent-kafka (and kcat) settings docs/security.md gives."""
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": PASSWORDS[user],
            "ssl.ca.location": str(self.certificates.ca),
        }

    def strom(self, *argv: str, user: str | None = None) -> str:
        """A ``strom`` command as the admin (its properties file) or as ``user`` (-X settings)."""
        if user is None:
            options = ["--command-config", str(self.admin_properties)]
        else:
            options = [
                argument
                for key, value in self.librdkafka(user).items()
                if key != "bootstrap.servers"
                for argument in ("-X", f"{key}={value}")
            ]
        finished = run_strom(*argv, "--bootstrap-server", self.bootstrap, *options)
        assert finished.returncode == 0, f"strom {' '.join(argv)}: {finished.stderr}"
        return finished.stdout


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certificates: Certificates) -> Iterator[Secured]:
    work_dir = tmp_path_factory.mktemp("from-scratch")
    port = free_port()
    settings = {
        # The PLAINTEXT listener is where the test harness sees the broker is up; with ACLs on, a
        # connection there is User:ANONYMOUS, which no ACL names: it may do nothing.
        "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:{port}",
        "ssl.keystore.location": str(certificates.broker_keystore),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "authorizer.class.name": "strom",
        "super.users": "User:admin",
        # A short quota window: a producer over its quota is throttled within a second or two.
        "quota.window.num": "2",
        "quota.window.size.seconds": "1",
        "offsets.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    process = BrokerProcess(
        work_dir,
        settings,
        ["--add-scram", f"SCRAM-SHA-512=[name=admin,password={ADMIN_PASSWORD}]"],
    )
    admin_properties = work_dir / "admin.properties"
    admin_properties.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\n"
        f"sasl.password={ADMIN_PASSWORD}\nssl.ca.location={certificates.ca}\n"
    )
    try:
        process.start()
        yield Secured(process, certificates, port, admin_properties)
    finally:
        process.close()


def _set_up_as_admin(secured: Secured) -> None:
    for user, password in PASSWORDS.items():
        secured.strom("users", "add", user, "--mechanism", "SCRAM-SHA-512", "--password", password)
    for topic in ("payments-eu", "orders"):
        secured.strom("topics", "create", topic, "--partitions", "1")
    secured.strom(
        "acls", "add", "--allow-principal", "User:alice", "--topic", "payments",
        "--resource-pattern-type", "prefixed", "--operation", "Write", "--operation", "Read",
    )  # fmt: skip
    secured.strom(
        "acls", "add", "--allow-principal", "User:alice", "--group", "billing", "--operation", "Read"
    )
    secured.strom("acls", "add", "--allow-principal", "User:bob", "--topic", "orders", "--operation", "Write")
    secured.strom(
        "quotas", "alter", "--entity-type", "users", "--entity-name", "bob",
        "--add-config", f"producer_byte_rate={BOB_BYTES_PER_S}",
    )  # fmt: skip


def _produce(config: dict[str, Any], topic: str, values: list[bytes]) -> tuple[list[Any], list[int]]:
    """Delivery errors (None for delivered) and the throttle times the broker reported."""
    errors: list[Any] = []
    throttles: list[int] = []
    producer = Producer(
        {
            **config,
            "linger.ms": 5,
            "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000)),
        }
    )
    for value in values:
        producer.produce(topic, value, on_delivery=lambda error, _message: errors.append(error))
        producer.poll(0)
    assert producer.flush(TIMEOUT_S * 2) == 0
    producer.poll(0.5)  # throttle events are served by poll
    return errors, throttles


def test_tls_scram_acls_and_a_quota_from_scratch(secured: Secured) -> None:
    _set_up_as_admin(secured)
    listed = secured.strom("acls", "list", "--output", "json")
    assert "User:alice" in listed and "User:bob" in listed

    # alice writes where a prefixed ACL lets her, and nowhere else.
    values = [b"payment-%d" % index for index in range(RECORDS)]
    errors, _ = _produce(secured.librdkafka("alice"), "payments-eu", values)
    assert errors == [None] * RECORDS
    errors, _ = _produce(secured.librdkafka("alice"), "orders", [b"not hers"])
    assert [error.code() for error in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    # She sees only the topics she may describe (READ/WRITE imply DESCRIBE).
    topics = AdminClient(secured.librdkafka("alice")).list_topics(timeout=TIMEOUT_S).topics
    assert "payments-eu" in topics and "orders" not in topics

    # She reads in her group (confluent-kafka) ...
    consumer = Consumer(
        {**secured.librdkafka("alice"), "group.id": "billing", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe(["payments-eu"])
        read: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(read) < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                read.append(message.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert read == values

    # ... but not in another group (kafka-python).
    kafka_python = KafkaConsumer(
        "payments-eu",
        bootstrap_servers=secured.bootstrap,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=PASSWORDS["alice"],
        ssl_cafile=str(secured.certificates.ca),
        group_id="not-billing",
        auto_offset_reset="earliest",
        consumer_timeout_ms=int(TIMEOUT_S * 1000),
    )
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            next(kafka_python)
    finally:
        kafka_python.close()

    # kcat reads what she wrote; so does strom's own client (strom consume), each as alice.
    kcat_options = [
        argument
        for key, value in secured.librdkafka("alice").items()
        for argument in ("-X", f"{key}={value}")
    ]
    kcat = subprocess.run(
        ["kcat", *kcat_options, "-C", "-t", "payments-eu", "-o", "beginning", "-e", "-q"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S * 2,
        check=False,
    )
    assert kcat.returncode == 0, kcat.stderr
    assert kcat.stdout.splitlines() == [value.decode() for value in values]
    printed = secured.strom("consume", "payments-eu", "--from-beginning", "--until", "end", user="alice")
    assert printed.splitlines() == [value.decode() for value in values]

    # bob may write to orders, at his quota's pace: the broker tells his producer to slow down.
    errors, throttles = _produce(
        secured.librdkafka("bob"), "orders", [bytes(1024)] * (4 * BOB_BYTES_PER_S // 1024)
    )
    assert errors == [None] * (4 * BOB_BYTES_PER_S // 1024)
    assert throttles and max(throttles) > 0, "no throttle time reported to bob's producer"
    described = secured.strom("quotas", "describe", "--entity-type", "users", "--entity-name", "bob")
    assert "producer_byte_rate" in described and str(BOB_BYTES_PER_S) in described
