"""The client configurations docs/security.md shows, for each client the tests drive, and a
raw-socket client over TLS."""

from __future__ import annotations

import socket
import ssl
import subprocess
from typing import Any

from tests.compat.wire import WireClient
from tests.security.certs import Certificates
from tests.security.conftest import PLAIN_PASSWORD, PLAIN_USER, SCRAM_PASSWORD, SCRAM_USER, SecureBroker

MODES = ("sasl_ssl_scram", "mtls", "sasl_plaintext_plain")


def port_of(broker: SecureBroker, mode: str) -> int:
    return {
        "sasl_ssl_scram": broker.sasl_ssl_port,
        "mtls": broker.ssl_port,
        "sasl_plaintext_plain": broker.sasl_plaintext_port,
    }[mode]


def confluent_config(
    broker: SecureBroker, mode: str, user: str = SCRAM_USER, password: str = SCRAM_PASSWORD
) -> dict[str, Any]:
    certificates = broker.certificates
    config: dict[str, Any] = {"bootstrap.servers": broker.bootstrap(port_of(broker, mode))}
    if mode == "sasl_ssl_scram":
        config |= {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": str(certificates.ca),
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
            "sasl.mechanisms": "PLAIN",
            "sasl.username": PLAIN_USER,
            "sasl.password": PLAIN_PASSWORD,
        }
    return config


def kafka_python_config(broker: SecureBroker, mode: str) -> dict[str, Any]:
    certificates = broker.certificates
    config: dict[str, Any] = {"bootstrap_servers": broker.bootstrap(port_of(broker, mode))}
    if mode == "sasl_ssl_scram":
        config |= {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": SCRAM_USER,
            "sasl_plain_password": SCRAM_PASSWORD,
            "ssl_cafile": str(certificates.ca),
        }
    elif mode == "mtls":
        config |= {
            "security_protocol": "SSL",
            "ssl_cafile": str(certificates.ca),
            "ssl_certfile": str(certificates.client_certificate),
            "ssl_keyfile": str(certificates.client_key),
        }
    else:
        config |= {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": PLAIN_USER,
            "sasl_plain_password": PLAIN_PASSWORD,
        }
    return config


def aiokafka_config(broker: SecureBroker, mode: str) -> dict[str, Any]:
    from aiokafka.helpers import create_ssl_context

    certificates = broker.certificates
    config: dict[str, Any] = {"bootstrap_servers": broker.bootstrap(port_of(broker, mode))}
    if mode == "sasl_ssl_scram":
        config |= {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": SCRAM_USER,
            "sasl_plain_password": SCRAM_PASSWORD,
            "ssl_context": create_ssl_context(cafile=str(certificates.ca)),
        }
    elif mode == "mtls":
        config |= {
            "security_protocol": "SSL",
            "ssl_context": create_ssl_context(
                cafile=str(certificates.ca),
                certfile=str(certificates.client_certificate),
                keyfile=str(certificates.client_key),
            ),
        }
    else:
        config |= {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": PLAIN_USER,
            "sasl_plain_password": PLAIN_PASSWORD,
        }
    return config


def kcat_options(broker: SecureBroker, mode: str) -> list[str]:
    return ["-b", broker.bootstrap(port_of(broker, mode))] + [
        argument
        for key, value in confluent_config(broker, mode).items()
        if key != "bootstrap.servers"
        for argument in ("-X", f"{key}={value}")
    ]


def kcat(*arguments: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kcat", *arguments], input=stdin, capture_output=True, text=True, timeout=60)


def client_tls_context(certificates: Certificates, *, with_certificate: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certificates.ca))
    if with_certificate:
        context.load_cert_chain(str(certificates.client_certificate), str(certificates.client_key))
    return context


def tls_wire_client(port: int, context: ssl.SSLContext, timeout_s: float = 10.0) -> WireClient:
    """The raw-socket client of the bad-input tests, over TLS."""
    client = WireClient(port, timeout_s)
    try:
        client.sock = context.wrap_socket(client.sock, server_hostname="127.0.0.1")
    except BaseException:
        client.close()
        raise
    return client


def tcp_connection(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)
