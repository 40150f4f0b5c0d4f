"""``--console-login`` on the command line: the options parse (off by default), ``strom console
--console-login`` needs a SASL security.protocol, and the broker's console finds the SASL_PLAINTEXT
listener and mechanism to log its users in through (no cluster needed)."""

from __future__ import annotations

import pytest

from strom.broker.config import BrokerConfig, BrokerConfigError
from strom.cli.console import broker_console_login_settings
from strom.cli.main import build_parser, main


def test_the_login_options_parse_and_are_off_by_default() -> None:
    parser = build_parser()
    assert parser.parse_args(["console", "--console-login"]).console_login is True
    assert parser.parse_args(["console"]).console_login is False
    broker = parser.parse_args(["broker", "--console-port", "0", "--console-login"])
    assert (broker.console_port, broker.console_login) == (0, True)
    assert parser.parse_args(["broker"]).console_login is False


def test_console_login_needs_a_sasl_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["console", "--console-login", "--bootstrap-server", "127.0.0.1:1"]) == 2
    assert "--console-login needs security.protocol SASL_PLAINTEXT or SASL_SSL" in capsys.readouterr().err


def test_console_login_checks_the_rest_of_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    # SASL without a mechanism: the client would refuse it, so the command does, before serving.
    argv = ["console", "--console-login", "--bootstrap-server", "127.0.0.1:1"]
    assert main([*argv, "-X", "security.protocol=SASL_PLAINTEXT"]) == 2
    assert "sasl.mechanism" in capsys.readouterr().err


def config(**values: str) -> BrokerConfig:
    return BrokerConfig(values={key.replace("_", "."): value for key, value in values.items()})


def test_the_broker_console_logs_in_through_the_first_sasl_plaintext_listener() -> None:
    settings = broker_console_login_settings(
        config(
            listeners="PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://0.0.0.0:9094",
            advertised_listeners="PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://broker.example:9094",
            sasl_enabled_mechanisms="GSSAPI,SCRAM-SHA-256,PLAIN",
        )
    )
    assert settings == {
        "bootstrap.servers": "127.0.0.1:9094",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
    }


@pytest.mark.parametrize(
    ("listeners", "message"),
    [
        ("PLAINTEXT://127.0.0.1:9092", "needs a SASL_PLAINTEXT listener"),
        ("PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:0", "needs a fixed port"),
    ],
)
def test_the_broker_console_login_needs_a_sasl_listener_on_a_fixed_port(listeners: str, message: str) -> None:
    with pytest.raises(BrokerConfigError, match=message):
        broker_console_login_settings(config(listeners=listeners, sasl_enabled_mechanisms="PLAIN"))
