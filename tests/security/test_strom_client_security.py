"""strom's own client against a real broker with every security protocol (tests/security/conftest.py):
producer, consumer and admin over SASL_SSL with SCRAM-SHA-512, over SSL with a client certificate
(mTLS) and over SASL_PLAINTEXT with PLAIN; ``strom users add/list/remove`` and a login as the new
user; refused logins and protocol mix-ups failing at once with a clear message; re-authentication
before ``connections.max.reauth.ms`` runs out."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.cli.main import main
from strom.client.admin import Admin, NewTopic
from strom.client.consumer import Consumer
from strom.client.errors import AuthenticationError, KafkaError
from strom.client.producer import Producer
from tests.compat.conftest import BrokerProcess, free_port
from tests.security.certs import Certificates
from tests.security.clients import MODES, port_of
from tests.security.conftest import PLAIN_PASSWORD, PLAIN_USER, SCRAM_PASSWORD, SCRAM_USER, SecureBroker

VALUES = [b"one", b"two", b"three"]
DEADLINE_S = 30.0
# A refused login is answered after the broker's connection.failed.authentication.delay.ms and
# not retried by the client: far below the request timeout it would otherwise wait out.
QUICK_S = 5.0
REQUEST_TIMEOUT_MS = 20_000


def strom_config(
    broker: SecureBroker, mode: str, user: str = SCRAM_USER, password: str = SCRAM_PASSWORD
) -> dict[str, Any]:
    """What docs/security.md shows for strom's client, mode by mode."""
    certificates = broker.certificates
    config: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap(port_of(broker, mode)),
        "request.timeout.ms": REQUEST_TIMEOUT_MS,
    }
    if mode == "sasl_ssl_scram":
        config |= {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certificates.ca),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
        }
    elif mode == "mtls":
        config |= {
            "security.protocol": "SSL",
            "ssl.ca.location": str(certificates.ca),
            "ssl.certificate.location": str(certificates.client_certificate),
            "ssl.key.location": str(certificates.client_key),
        }
    else:
        config |= {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": PLAIN_USER,
            "sasl.password": PLAIN_PASSWORD,
        }
    return config


def properties(path: Path, config: dict[str, Any]) -> Path:
    """``config`` as a --command-config file (without bootstrap.servers: the command's option)."""
    path.write_text(
        "".join(f"{key}={value}\n" for key, value in config.items() if key != "bootstrap.servers")
    )
    return path


@pytest.mark.parametrize("mode", MODES)
def test_producer_consumer_and_admin(secure_broker: SecureBroker, mode: str) -> None:
    config = strom_config(secure_broker, mode)
    topic = f"strom-{mode}-{uuid.uuid4().hex[:8]}"
    with Admin(config) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=2)])
        assert topic in admin.list_topics()
        cluster = admin.describe_cluster()
        # The broker advertises the listener the client came in on.
        assert {broker.port for broker in cluster.brokers} == {port_of(secure_broker, mode)}
    with Producer(config) as producer:
        for value in VALUES:
            producer.send(topic, value=value)
        producer.flush(DEADLINE_S)
    consumer = Consumer(config | {"group.id": topic, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        received: list[bytes] = []
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < len(VALUES) and time.monotonic() < deadline:
            received.extend(record.value for record in consumer.poll(500) if record.value is not None)
        consumer.commit()
    finally:
        consumer.close()
    assert sorted(received) == sorted(VALUES)
    with Admin(config) as admin:
        offsets = admin.list_group_offsets(topic)
        assert sum(offset.offset for offset in offsets.values()) == len(VALUES)


@pytest.mark.parametrize(
    ("mode", "user", "password", "expected"),
    [
        (
            "sasl_ssl_scram",
            SCRAM_USER,
            "wrong",
            f"authentication of '{SCRAM_USER}' with SCRAM-SHA-512 failed",
        ),
        ("sasl_ssl_scram", "nobody", "x", "authentication of 'nobody' with SCRAM-SHA-512 failed"),
        ("sasl_plaintext_plain", PLAIN_USER, "wrong", f"authentication of '{PLAIN_USER}' with PLAIN failed"),
    ],
)
def test_a_refused_login_fails_at_once(
    secure_broker: SecureBroker, mode: str, user: str, password: str, expected: str
) -> None:
    config = strom_config(secure_broker, mode, user, password)
    if mode == "sasl_plaintext_plain":
        config["sasl.username"], config["sasl.password"] = user, password
    started = time.monotonic()
    with Admin(config) as admin, pytest.raises(AuthenticationError, match=expected) as raised:
        admin.list_topics()
    assert time.monotonic() - started < QUICK_S
    assert not raised.value.retriable
    # The broker keeps serving everyone else.
    with Admin(strom_config(secure_broker, "sasl_ssl_scram")) as admin:
        admin.list_topics()


def test_mtls_without_a_client_certificate_fails_at_once(secure_broker: SecureBroker) -> None:
    config = strom_config(secure_broker, "mtls")
    del config["ssl.certificate.location"], config["ssl.key.location"]
    started = time.monotonic()
    with Admin(config) as admin, pytest.raises(AuthenticationError, match="TLS"):
        admin.list_topics()
    assert time.monotonic() - started < QUICK_S


def test_an_untrusted_broker_fails_at_once(secure_broker: SecureBroker) -> None:
    config = strom_config(secure_broker, "sasl_ssl_scram")
    del config["ssl.ca.location"]  # the system's CAs do not know the test CA
    with Admin(config) as admin, pytest.raises(AuthenticationError, match="certificate verify failed"):
        admin.list_topics()


@pytest.mark.parametrize(
    ("port", "settings", "expected"),
    [
        # A TLS client on the plaintext port, and a plaintext client on a TLS port.
        ("plaintext", {"security.protocol": "SSL"}, "during the TLS handshake (is it a TLS listener?"),
        ("ssl", {}, "security.protocol must be SSL or SASL_SSL, not PLAINTEXT"),
    ],
)
def test_protocol_mix_ups_say_what_to_set(
    secure_broker: SecureBroker,
    certificates: Certificates,
    port: str,
    settings: dict[str, str],
    expected: str,
) -> None:
    config = {
        "bootstrap.servers": secure_broker.bootstrap(
            secure_broker.plaintext_port if port == "plaintext" else secure_broker.ssl_port
        ),
        "request.timeout.ms": 3_000,
        **settings,
    }
    if settings:
        config["ssl.ca.location"] = str(certificates.ca)
    with Admin(config) as admin, pytest.raises(KafkaError) as raised:
        admin.list_topics()
    # Retried as Kafka's clients retry a broken connection, until the 3 s request timeout; the
    # error (or the timeout's, naming the last attempt) says what to set.
    assert expected in str(raised.value), raised.value


# -- strom users ------------------------------------------------------------------------------------


def test_strom_users_add_list_remove_and_log_in(
    secure_broker: SecureBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = secure_broker.bootstrap(secure_broker.sasl_ssl_port)
    admin_config = properties(tmp_path / "admin.properties", strom_config(secure_broker, "sasl_ssl_scram"))
    user = f"user-{uuid.uuid4().hex[:6]}"
    password_file = tmp_path / "password"
    password_file.write_text("new-user-secret\n")

    def strom(config: Path, *argv: str) -> int:
        return main([*argv, "--bootstrap-server", bootstrap, "--command-config", str(config)])

    assert (
        strom(
            admin_config, "users", "add", user, "--password-file", str(password_file), "--iterations", "8192"
        )
        == 0
    )
    assert f"set SCRAM-SHA-512 credentials of user '{user}' (8192 iterations)" in capsys.readouterr().out
    assert strom(admin_config, "users", "list") == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [user, "SCRAM-SHA-512", "8192"] in rows
    assert [SCRAM_USER, "SCRAM-SHA-512", "4096"] in rows

    new_user = properties(
        tmp_path / "new-user.properties",
        strom_config(secure_broker, "sasl_ssl_scram", user=user, password="new-user-secret"),
    )
    topic = f"by-{user}"
    assert strom(new_user, "topics", "create", topic) == 0
    assert strom(new_user, "topics", "list") == 0
    assert topic in capsys.readouterr().out

    assert strom(admin_config, "users", "remove", user, "--mechanism", "SCRAM-SHA-512") == 0
    assert f"removed SCRAM-SHA-512 credentials of user '{user}'" in capsys.readouterr().out
    started = time.monotonic()
    assert strom(new_user, "topics", "list") == 1
    error = capsys.readouterr().err
    assert error.startswith(f"strom: error: authentication of '{user}' with SCRAM-SHA-512 failed"), error
    assert time.monotonic() - started < QUICK_S
    assert strom(admin_config, "users", "list", user) == 0
    assert f"user '{user}' has no SCRAM credentials" in capsys.readouterr().out


def test_strom_commands_take_security_settings_by_x(
    secure_broker: SecureBroker, certificates: Certificates, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"x-{uuid.uuid4().hex[:8]}"
    security = [
        "-X", "security.protocol=SSL",
        "-X", f"ssl.ca.location={certificates.ca}",
        "-X", f"ssl.certificate.location={certificates.client_certificate}",
        "-X", f"ssl.key.location={certificates.client_key}",
    ]  # fmt: skip
    bootstrap = ["--bootstrap-server", secure_broker.bootstrap(secure_broker.ssl_port)]
    assert main(["topics", "create", topic, *bootstrap, *security]) == 0
    assert main(["configs", "describe", "--topic", topic, *bootstrap, *security]) == 0
    capsys.readouterr()


# -- re-authentication (KIP-368) against the real broker ---------------------------------------------


@pytest.fixture
def reauthenticating_broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, int]]:
    sasl_port = free_port()
    process = BrokerProcess(
        tmp_path,
        {
            "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "connections.max.reauth.ms": "1000",
            "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        },
        ["--add-scram", f"SCRAM-SHA-512=[name={SCRAM_USER},password={SCRAM_PASSWORD}]"],
    )
    try:
        process.start()
        yield process, sasl_port
    finally:
        process.close()


def test_the_client_reauthenticates_before_the_session_expires(
    reauthenticating_broker: tuple[BrokerProcess, int],
) -> None:
    """With a 1 s session lifetime a producer and a consumer keep working for 4 s; the broker would
    close a connection whose session expired on its next request."""
    _, sasl_port = reauthenticating_broker
    config = {
        "bootstrap.servers": f"127.0.0.1:{sasl_port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": SCRAM_USER,
        "sasl.password": SCRAM_PASSWORD,
    }
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    with Admin(config) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=1)])
    sent = 0
    with Producer(config) as producer:
        deadline = time.monotonic() + 4.0
        while time.monotonic() < deadline:
            producer.send(topic, value=b"%d" % sent).result(DEADLINE_S)
            sent += 1
            time.sleep(0.05)
        channels = list(producer._transport._channels.values())
        assert channels and all(not channel.closed for channel in channels)
    consumer = Consumer(config | {"group.id": topic, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        received = 0
        deadline = time.monotonic() + DEADLINE_S
        while received < sent and time.monotonic() < deadline:
            received += len(consumer.poll(500))
    finally:
        consumer.close()
    assert received == sent


@pytest.mark.parametrize("client", ["strom", "confluent"])
def test_strom_bench_end_to_end_over_sasl_ssl(
    secure_broker: SecureBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str], client: str
) -> None:
    """The bench's producer, consumer and admin clients (strom's or librdkafka's) all take the file."""
    config = properties(tmp_path / "bench.properties", strom_config(secure_broker, "sasl_ssl_scram"))
    code = main(
        [
            *("bench", "end-to-end", "--client", client, "--records", "300", "--record-size", "64"),
            *("--topic", f"bench-{client}-{uuid.uuid4().hex[:8]}", "--output", "json"),
            *("--bootstrap-server", secure_broker.bootstrap(secure_broker.sasl_ssl_port)),
            *("--command-config", str(config)),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["records"] == 300
