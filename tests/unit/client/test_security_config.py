"""The client's security settings: Kafka's and librdkafka's key names, and the combinations refused
before any connection (with the fix named)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from strom.client.config import AdminConfig, ConsumerConfig, ProducerConfig
from strom.client.errors import ConfigError

SCRAM = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "alice",
    "sasl.password": "alice-secret",
}


def test_the_defaults_are_plaintext_without_tls_or_sasl() -> None:
    config = ProducerConfig.from_settings()
    assert config.security_protocol == "PLAINTEXT"
    assert not config.uses_tls and not config.uses_sasl
    assert config.ssl_endpoint_identification_algorithm == "https"


@pytest.mark.parametrize("config_class", [ProducerConfig, ConsumerConfig, AdminConfig])
def test_every_client_takes_the_security_keys(config_class: type[AdminConfig]) -> None:
    config = config_class.from_settings(SCRAM)
    assert (config.security_protocol, config.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (config.sasl_username, config.sasl_password) == ("alice", "alice-secret")
    assert config.uses_tls and config.uses_sasl


def test_keyword_arguments_with_underscores_work_too() -> None:
    config = AdminConfig.from_settings(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p"
    )
    assert config.uses_sasl and not config.uses_tls


def test_protocol_and_mechanism_are_taken_in_any_case() -> None:
    config = AdminConfig.from_settings(
        {
            "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "scram-sha-256",
            "sasl.username": "u",
            "sasl.password": "p",
        }
    )
    assert (config.security_protocol, config.sasl_mechanism) == ("SASL_PLAINTEXT", "SCRAM-SHA-256")


def test_librdkafka_spells_it_sasl_mechanisms() -> None:
    settings = dict(SCRAM)
    settings["sasl.mechanisms"] = settings.pop("sasl.mechanism")
    assert AdminConfig.from_settings(settings).sasl_mechanism == "SCRAM-SHA-512"
    # Both names with the same value is fine; with different values, which one is meant?
    assert (
        AdminConfig.from_settings({**SCRAM, "sasl.mechanisms": "SCRAM-SHA-512"}).sasl_mechanism
        == "SCRAM-SHA-512"
    )
    with pytest.raises(ConfigError, match=r"'sasl.mechanism' and 'sasl.mechanisms'"):
        AdminConfig.from_settings({**SCRAM, "sasl.mechanisms": "PLAIN"})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"security.protocol": "TLS"}, "must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, not 'TLS'"),
        ({"security.protocol": "SASL_SSL"}, "SASL_SSL needs sasl.mechanism"),
        ({**SCRAM, "sasl.mechanism": "GSSAPI"}, "no GSSAPI or OAUTHBEARER"),
        ({**SCRAM, "sasl.mechanism": "OAUTHBEARER"}, "must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
        ({key: value for key, value in SCRAM.items() if key != "sasl.username"}, "needs sasl.username"),
        ({**SCRAM, "sasl.username": ""}, "needs sasl.username"),
        ({key: value for key, value in SCRAM.items() if key != "sasl.password"}, "needs sasl.password"),
        (
            {"sasl.username": "alice", "sasl.password": "x"},
            "sasl.username, sasl.password are set but security.protocol is PLAINTEXT",
        ),
        ({"security.protocol": "SSL", "sasl.mechanism": "PLAIN"}, "use SASL_PLAINTEXT or SASL_SSL"),
        ({"ssl.endpoint.identification.algorithm": "dns"}, "must be one of https, none"),
    ],
)
def test_combinations_that_cannot_work_are_refused(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        ProducerConfig.from_settings(settings)


def test_tls_files_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'ssl.ca.location': no such file"):
        AdminConfig.from_settings(
            {"security.protocol": "SSL", "ssl.ca.location": str(tmp_path / "missing.pem")}
        )


def test_tls_files_without_tls_are_refused(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    with pytest.raises(ConfigError, match=r"ssl.ca.location is set but security.protocol is SASL_PLAINTEXT"):
        AdminConfig.from_settings(
            {**SCRAM, "security.protocol": "SASL_PLAINTEXT", "ssl.ca.location": str(ca)}
        )


def test_a_key_needs_its_certificate(tmp_path: Path) -> None:
    key = tmp_path / "client.key"
    key.write_text("")
    with pytest.raises(ConfigError, match=r"ssl.key.location is set without ssl.certificate.location"):
        AdminConfig.from_settings({"security.protocol": "SSL", "ssl.key.location": str(key)})
    with pytest.raises(ConfigError, match=r"ssl.key.password is set but there is no key"):
        AdminConfig.from_settings({"security.protocol": "SSL", "ssl.key.password": "x"})


def test_an_empty_endpoint_identification_algorithm_turns_the_check_off_as_in_java() -> None:
    config = AdminConfig.from_settings(
        {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": ""}
    )
    assert config.ssl_endpoint_identification_algorithm == "none"
    config = AdminConfig.from_settings(
        {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "HTTPS"}
    )
    assert config.ssl_endpoint_identification_algorithm == "https"


def test_secrets_stay_out_of_repr() -> None:
    text = repr(AdminConfig.from_settings({**SCRAM, "sasl.password": "hunter2"}))
    assert "hunter2" not in text and "alice" in text


JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="a \\"quoted\\" secret;";'
)


def test_the_java_clients_jaas_config_gives_the_credentials() -> None:
    config = AdminConfig.from_settings(
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": JAAS}
    )
    assert (config.sasl_username, config.sasl_password) == ("alice", 'a "quoted" secret;')
    unquoted = "org.apache.kafka.common.security.plain.PlainLoginModule required username=bob password=x;"
    config = AdminConfig.from_settings(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.jaas.config": unquoted}
    )
    assert (config.sasl_username, config.sasl_password) == ("bob", "x")
    assert "secret" not in repr(config)


def test_jaas_credentials_must_agree_with_sasl_username() -> None:
    with pytest.raises(ConfigError, match=r"sasl\.jaas\.config's username differs from sasl\.username"):
        AdminConfig.from_settings({**SCRAM, "sasl.jaas.config": JAAS.replace("alice", "mallory")})
    with pytest.raises(ConfigError, match=r"sasl\.jaas\.config are set but security\.protocol is PLAINTEXT"):
        AdminConfig.from_settings({"sasl.jaas.config": JAAS})
