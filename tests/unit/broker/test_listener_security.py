"""What a secured listener's configuration must hold, refused at start with a message naming the
key (no certificates needed: the checks come before any file is read or after one is missing)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from strom.broker.config import BrokerConfig, BrokerConfigError
from strom.broker.listener_security import (
    check_cluster_listener,
    check_listener_security,
    inter_broker_security,
    listener_security,
    listener_value,
    unoffered_security_settings,
)

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
            {"listeners": "SSL://127.0.0.1:0", "ssl.enabled.protocols": "TLSv1.2,TLSv1.4"},
            "ssl.enabled.protocols: TLSv1.4",
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
                "sasl.enabled.mechanisms": "SCRAM-SHA-256,KERBEROS",
            },
            "strom does not offer KERBEROS",
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


def test_kafka_names_strom_does_not_offer_are_left_out_beside_ones_it_does(tmp_path: Path) -> None:
    """A server.properties of an older Kafka (aiokafka's test image: TLSv1.2,TLSv1.1,TLSv1 and
    PLAIN,GSSAPI,SCRAM-SHA-256) starts: TLSv1.2 and PLAIN and SCRAM are offered, the rest named in a
    warning at start. (Java 17 does not offer TLSv1 or TLSv1.1 to a Kafka either.)"""
    broker = BrokerConfig(
        data_dir=tmp_path,
        values={
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "ssl.enabled.protocols": "TLSv1.2,TLSv1.1,TLSv1",
            "sasl.enabled.mechanisms": "PLAIN,GSSAPI,SCRAM-SHA-256",
            "sasl.jaas.config": PLAIN_JAAS,
        },
    )
    plaintext, sasl = broker.listeners()
    assert listener_security(broker, plaintext, no_credentials) is None
    security = listener_security(broker, sasl, no_credentials)
    assert security is not None and security.sasl is not None
    assert security.sasl.mechanisms == ("PLAIN", "SCRAM-SHA-256")
    # No TLS listener: ssl.enabled.protocols is not named; the SASL listener's GSSAPI is.
    assert unoffered_security_settings(broker) == [
        "listener SASL_PLAINTEXT: sasl.enabled.mechanisms GSSAPI (strom offers PLAIN, SCRAM-SHA-256,"
        " SCRAM-SHA-512)"
    ]
    with_tls = BrokerConfig(
        data_dir=tmp_path,
        values={
            "listeners": "SSL://127.0.0.1:0",
            "ssl.enabled.protocols": "TLSv1.2,TLSv1.1,TLSv1",
            "sasl.enabled.mechanisms": "GSSAPI",
        },
    )
    assert unoffered_security_settings(with_tls) == [
        "listener SSL: ssl.enabled.protocols TLSv1.1, TLSv1 (strom offers TLSv1.2, TLSv1.3)"
    ]
    assert unoffered_security_settings(BrokerConfig(data_dir=tmp_path, values={})) == []


def test_the_default_mechanisms_leave_plain_out_without_users(tmp_path: Path) -> None:
    broker = BrokerConfig(data_dir=tmp_path, values={"listeners": "SASL_PLAINTEXT://127.0.0.1:0"})
    security = listener_security(broker, broker.listeners()[0], no_credentials)
    assert security is not None and security.sasl is not None
    assert security.sasl.mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")


SCRAM_JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="b-secret";'
)
CLUSTER = {"zookeeper.connect": "127.0.0.1:2181"}


@pytest.mark.parametrize(
    ("values", "listener"),
    [
        ({"listeners": "BROKER://127.0.0.1:0,CLIENT://127.0.0.1:0",
          "listener.security.protocol.map": "BROKER:PLAINTEXT,CLIENT:PLAINTEXT"}, "BROKER"),  # the first
        ({"listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"}, "PLAINTEXT"),  # Kafka's default
        ({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "security.inter.broker.protocol": "SSL"}, "SSL"),
        ({"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "inter.broker.listener.name": "ssl"}, "SSL"),
    ],
)  # fmt: skip
def test_the_inter_broker_listener_is_chosen_as_kafka_chooses_it(
    tmp_path: Path, values: dict[str, str], listener: str
) -> None:
    security = inter_broker_security(BrokerConfig(data_dir=tmp_path, values=CLUSTER | values))
    assert security.listener == listener


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"inter.broker.listener.name": "SSL", "security.inter.broker.protocol": "SSL"}, "set only one"),
        ({"inter.broker.listener.name": "INTERNAL"}, "inter.broker.listener.name=INTERNAL: this broker has no such"),
        ({"security.inter.broker.protocol": "SASL_SSL"}, "names the listener SASL_SSL, which this broker does not"),
        ({"security.inter.broker.protocol": "TLS"}, "not a security protocol"),
        ({"security.inter.broker.protocol": "SASL_PLAINTEXT"}, "Kafka's default, GSSAPI, is not offered"),
        ({"security.inter.broker.protocol": "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol": "PLAIN",
          "sasl.enabled.mechanisms": "SCRAM-SHA-512"}, "does not enable it"),
        ({"security.inter.broker.protocol": "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
         "no JAAS configuration gives this broker's username and password"),
        ({"security.inter.broker.protocol": "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol": "PLAIN",
          "sasl.jaas.config": PLAIN_JAAS}, "needs org.apache.kafka.common.security.plain.PlainLoginModule with"),
        ({"security.inter.broker.protocol": "SSL", "ssl.endpoint.identification.algorithm": "ldap"},
         "ssl.endpoint.identification.algorithm=ldap"),
    ],
)  # fmt: skip
def test_an_unusable_inter_broker_setting_is_refused_at_start(
    tmp_path: Path, values: dict[str, str], message: str
) -> None:
    listeners = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"}
    config = BrokerConfig(data_dir=tmp_path, values=CLUSTER | listeners | values)
    with pytest.raises(BrokerConfigError, match=re.escape(message)):
        check_cluster_listener(config)


def test_a_broker_logs_in_to_the_others_with_its_listeners_jaas_username_and_password(tmp_path: Path) -> None:
    values = CLUSTER | {
        "listeners": "CLIENT://127.0.0.1:0,BROKER://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,BROKER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "BROKER",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.broker.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    }
    config = BrokerConfig(data_dir=tmp_path, values=values)
    security = inter_broker_security(config)
    assert (security.listener, security.security_protocol, security.sasl_mechanism) == (
        "BROKER", "SASL_PLAINTEXT", "SCRAM-SHA-512"
    )  # fmt: skip
    assert (security.sasl_username, security.sasl_password) == ("broker", "b-secret")
    assert "b-secret" not in repr(security) and security.ssl_context is None
    assert config.unused_kafka_keys() == []


@pytest.mark.parametrize(("algorithm", "checked"), [(None, True), ("https", True), ("", False)])
def test_the_other_brokers_host_name_is_checked_unless_the_algorithm_is_empty(
    tmp_path: Path, algorithm: str | None, checked: bool
) -> None:
    values = CLUSTER | {"listeners": "SSL://127.0.0.1:0", "security.inter.broker.protocol": "SSL"}
    if algorithm is not None:
        values["listener.name.ssl.ssl.endpoint.identification.algorithm"] = algorithm
    security = inter_broker_security(BrokerConfig(data_dir=tmp_path, values=values))
    assert security.ssl_context is not None and security.ssl_context.check_hostname is checked
