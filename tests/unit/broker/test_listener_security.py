"""What a secured listener's configuration must hold, refused at start with a message naming the
key (no certificates needed: the checks come before any file is read or after one is missing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.broker.config import BrokerConfig, BrokerConfigError
from strom.broker.listener_security import check_listener_security, listener_security, listener_value

PLAIN_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_bob="bob-secret";'


def no_credentials(_user: str, _mechanism: str) -> None:
    return None


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"listeners": "SSL://127.0.0.1:0"}, "listener SSL needs the broker's certificate and key"),
        (
            {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": "/nonexistent/k.pem"},
            "ssl.keystore.location: /nonexistent/k.pem does not exist",
        ),
        (
            {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "JKS"},
            "strom reads PEM files only",
        ),
        (
            {"listeners": "SSL://127.0.0.1:0", "ssl.enabled.protocols": "TLSv1.1"},
            "ssl.enabled.protocols: TLSv1.1",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN"},
            "enables PLAIN but no users are configured",
        ),
        (
            {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "GSSAPI"},
            "strom does not offer GSSAPI",
        ),
        (
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.jaas.config": "PlainLoginModule required",
            },
            "sasl.jaas.config",
        ),
    ],
)
def test_bad_security_settings_are_refused_naming_the_key(
    tmp_path: Path, values: dict[str, str], message: str
) -> None:
    with pytest.raises(BrokerConfigError, match=message.replace(".", r"\.")):
        check_listener_security(BrokerConfig(data_dir=tmp_path, values=values))


def test_a_file_the_broker_cannot_read_is_named(tmp_path: Path) -> None:
    keystore = tmp_path / "keystore.pem"
    keystore.write_text("not a certificate\n")
    values = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(keystore)}
    with pytest.raises(BrokerConfigError, match="does not hold a PEM certificate chain"):
        check_listener_security(BrokerConfig(data_dir=tmp_path, values=values))


def test_per_listener_keys_win_and_plaintext_costs_nothing(tmp_path: Path) -> None:
    broker = BrokerConfig(
        data_dir=tmp_path,
        values={
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "connections.max.reauth.ms": "5000",
        },
    )
    assert listener_value(broker, "SASL_PLAINTEXT", "sasl.enabled.mechanisms") == "PLAIN,SCRAM-SHA-512"
    assert listener_value(broker, "OTHER", "sasl.enabled.mechanisms") == "SCRAM-SHA-256"
    plaintext, sasl = broker.listeners()
    assert listener_security(broker, plaintext, no_credentials) is None
    security = listener_security(broker, sasl, no_credentials)
    assert security is not None and security.ssl_context is None and security.sasl is not None
    assert security.sasl.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert security.sasl.plain_users == {"bob": "bob-secret"}
    assert security.sasl.reauth_ms == 5000
    assert broker.unused_kafka_keys() == []  # listener overrides of keys strom uses are not "unused"


def test_the_default_mechanisms_leave_plain_out_without_users(tmp_path: Path) -> None:
    broker = BrokerConfig(data_dir=tmp_path, values={"listeners": "SASL_PLAINTEXT://127.0.0.1:0"})
    security = listener_security(broker, broker.listeners()[0], no_credentials)
    assert security is not None and security.sasl is not None
    assert security.sasl.mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")


def test_a_cluster_broker_needs_a_plaintext_first_listener(tmp_path: Path) -> None:
    values = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "zookeeper.connect": "127.0.0.1:2181",
    }
    with pytest.raises(BrokerConfigError, match="put a PLAINTEXT listener"):
        check_listener_security(BrokerConfig(data_dir=tmp_path, values=values))
