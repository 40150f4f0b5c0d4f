"""What each listener's security protocol asks of its connections: a TLS context (SSL, SASL_SSL)
and SASL settings (SASL_PLAINTEXT, SASL_SSL), made once at start from Kafka's keys.

Every ``ssl.*`` and SASL key may be given per listener as ``listener.name.<listener>.<key>``
(the listener's name in lower case), which wins over the plain key, as in Kafka; the JAAS
configuration may also be given per mechanism: ``listener.name.<listener>.plain.sasl.jaas.config``.
A file that is missing or does not hold what it should stops the broker at start with a message
naming the key and the file (``BrokerConfigError``).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from strom.broker.config import BrokerConfig, BrokerConfigError
from strom.cluster.model import Endpoint
from strom.security.jaas import JaasError, plain_users
from strom.security.sasl import DEFAULT_MECHANISMS, SaslSettings
from strom.security.scram import ScramCredential

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


@dataclass(frozen=True)
class ListenerSecurity:
    listener: str
    security_protocol: str
    ssl_context: ssl.SSLContext | None
    sasl: SaslSettings | None
    # connection.failed.authentication.delay.ms: how long a failed login waits before its answer.
    failed_authentication_delay_ms: int


def listener_value(config: BrokerConfig, listener: str, key: str) -> str:
    """``listener.name.<listener>.<key>`` when given, else ``key`` (its default when unset)."""
    override = config.values.get(f"listener.name.{listener.lower()}.{key}")
    if override is not None:
        return override.strip()
    return config.raw(key).strip()


def _readable(path_text: str, key: str) -> Path:
    path = Path(path_text)
    if not path.is_file():
        raise BrokerConfigError(f"{key}: {path} does not exist or is not a file")
    if not os.access(path, os.R_OK):
        raise BrokerConfigError(f"{key}: {path} is not readable by this process")
    return path


def ssl_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """A server context from the listener's ``ssl.*`` keys (PEM keystore and truststore)."""

    def value(key: str) -> str:
        return listener_value(config, listener, key)

    prefix = f"listener {listener}"
    for type_key in ("ssl.keystore.type", "ssl.truststore.type"):
        if value(type_key).upper() != "PEM":
            raise BrokerConfigError(
                f"{prefix}: {type_key}={value(type_key)}: strom reads PEM files only"
                " (convert a JKS or PKCS12 store with keytool/openssl)"
            )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [name.strip() for name in value("ssl.enabled.protocols").split(",") if name.strip()]
    unknown = [name for name in versions if name not in TLS_VERSIONS]
    if unknown or not versions:
        raise BrokerConfigError(
            f"{prefix}: ssl.enabled.protocols: {', '.join(unknown) or '(none)'}: strom offers"
            f" {', '.join(TLS_VERSIONS)}"
        )
    context.minimum_version = min(TLS_VERSIONS[name] for name in versions)
    context.maximum_version = max(TLS_VERSIONS[name] for name in versions)
    password = value("ssl.key.password") or None
    location = value("ssl.keystore.location")
    chain, key = value("ssl.keystore.certificate.chain"), value("ssl.keystore.key")
    try:
        if location:
            context.load_cert_chain(_readable(location, "ssl.keystore.location"), password=password)
        elif chain and key:
            _load_inline_cert_chain(context, chain, key, password)
        else:
            raise BrokerConfigError(
                f"{prefix} needs the broker's certificate and key: ssl.keystore.location"
                " (a PEM file holding both) or ssl.keystore.certificate.chain and ssl.keystore.key"
            )
    except ssl.SSLError as error:
        raise BrokerConfigError(
            f"{prefix}: the keystore ({location or 'ssl.keystore.certificate.chain/key'}) does not hold a"
            f" PEM certificate chain and its private key, or ssl.key.password is wrong: {error}"
        ) from None
    trust_location = value("ssl.truststore.location")
    trust_inline = value("ssl.truststore.certificates")
    client_auth = value("ssl.client.auth").lower() or "none"
    if client_auth not in CLIENT_AUTH:
        raise BrokerConfigError(
            f"{prefix}: ssl.client.auth={client_auth}: must be none, requested or required"
        )
    try:
        if trust_location:
            context.load_verify_locations(cafile=str(_readable(trust_location, "ssl.truststore.location")))
        elif trust_inline:
            context.load_verify_locations(cadata=trust_inline)
    except ssl.SSLError as error:
        raise BrokerConfigError(
            f"{prefix}: the truststore ({trust_location or 'ssl.truststore.certificates'}) does not hold"
            f" PEM CA certificates: {error}"
        ) from None
    if client_auth != "none" and not (trust_location or trust_inline):
        raise BrokerConfigError(
            f"{prefix}: ssl.client.auth={client_auth} needs ssl.truststore.location (the CA certificates"
            " client certificates are checked against)"
        )
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def _load_inline_cert_chain(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """``load_cert_chain`` reads files only: the inline PEM goes through a private temporary file."""
    descriptor, name = tempfile.mkstemp(prefix="strom-keystore-", suffix=".pem")
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as handle:
            handle.write(chain.strip() + "\n" + key.strip() + "\n")
        context.load_cert_chain(name, password=password)
    finally:
        os.unlink(name)


def sasl_settings(
    config: BrokerConfig, listener: str, scram_credential: Callable[[str, str], ScramCredential | None]
) -> SaslSettings:
    text = listener_value(config, listener, "sasl.enabled.mechanisms")
    mechanisms = tuple(dict.fromkeys(name.strip().upper() for name in text.split(",") if name.strip()))
    plain: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        jaas = config.values.get(
            f"listener.name.{listener.lower()}.plain.sasl.jaas.config"
        ) or listener_value(config, listener, "sasl.jaas.config")
        explicit = "sasl.enabled.mechanisms" in config.values or (
            f"listener.name.{listener.lower()}.sasl.enabled.mechanisms" in config.values
        )
        if not jaas and not explicit:
            mechanisms = tuple(name for name in mechanisms if name != "PLAIN")  # the default, unusable
        elif not jaas:
            raise BrokerConfigError(
                f"listener {listener} enables PLAIN but no users are configured: set"
                f" listener.name.{listener.lower()}.plain.sasl.jaas.config (or sasl.jaas.config) to"
                ' org.apache.kafka.common.security.plain.PlainLoginModule required user_NAME="PASSWORD" ...;'
            )
        else:
            try:
                plain = plain_users(jaas)
            except JaasError as error:
                raise BrokerConfigError(f"listener {listener}: sasl.jaas.config: {error}") from None
    try:
        return SaslSettings(
            mechanisms=mechanisms,
            plain_users=plain,
            scram_credential=scram_credential,
            reauth_ms=max(config.get_int("connections.max.reauth.ms"), 0),
            failed_authentication_delay_ms=max(
                config.get_int("connection.failed.authentication.delay.ms"), 0
            ),
        )
    except ValueError as error:
        raise BrokerConfigError(f"listener {listener}: {error}") from None


def listener_security(
    config: BrokerConfig,
    endpoint: Endpoint,
    scram_credential: Callable[[str, str], ScramCredential | None],
) -> ListenerSecurity | None:
    """The security of one listener; None for PLAINTEXT (whose connections cost nothing extra)."""
    protocol = endpoint.security_protocol
    if protocol == "PLAINTEXT":
        return None
    return ListenerSecurity(
        listener=endpoint.listener,
        security_protocol=protocol,
        ssl_context=ssl_context(config, endpoint.listener) if protocol in TLS_PROTOCOLS else None,
        sasl=sasl_settings(config, endpoint.listener, scram_credential)
        if protocol in SASL_PROTOCOLS
        else None,
        failed_authentication_delay_ms=max(config.get_int("connection.failed.authentication.delay.ms"), 0),
    )


def check_listener_security(config: BrokerConfig) -> None:
    """Raise BrokerConfigError now for what would stop the broker at start (a missing keystore,
    unusable JAAS users), so ``strom broker`` exits before it creates anything."""
    check_cluster_listener(config)
    for endpoint in config.listeners():
        listener_security(config, endpoint, lambda _user, _mechanism: None)


def check_cluster_listener(config: BrokerConfig) -> None:
    """Brokers of a cluster reach one another at each one's first listener, without TLS or SASL
    (strom's replica connections speak plaintext only): there it must be PLAINTEXT."""
    if not config.is_set("zookeeper.connect"):
        return
    first = config.listeners()[0]
    if first.security_protocol != "PLAINTEXT":
        raise BrokerConfigError(
            f"listeners: in a cluster other brokers connect to the first listener, {first.listener}"
            f" ({first.security_protocol}), and strom's broker-to-broker connections are plaintext"
            " only: put a PLAINTEXT listener (on a private interface) first"
        )


__all__ = [
    "DEFAULT_MECHANISMS",
    "ListenerSecurity",
    "check_cluster_listener",
    "check_listener_security",
    "listener_security",
    "listener_value",
]
