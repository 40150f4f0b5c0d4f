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
from dataclasses import dataclass, field
from pathlib import Path

from strom.broker.config import BrokerConfig, BrokerConfigError
from strom.broker.listeners import SECURITY_PROTOCOLS
from strom.cluster.model import Endpoint
from strom.security.jaas import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    JaasError,
    parse_jaas_config,
    plain_users,
)
from strom.security.sasl import DEFAULT_MECHANISMS, SaslSettings
from strom.security.sasl_client import CLIENT_MECHANISMS
from strom.security.scram import ScramCredential

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_VERSIONS = {
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# Names Kafka knows that strom does not offer. A server.properties listing them beside ones strom
# offers still starts (a Kafka on Java 17 does not offer TLSv1 or TLSv1.1 either); they are left out
# and named in one warning at start (``unoffered_security_settings``). Listing only these stops it.
UNOFFERED_TLS_VERSIONS = ("SSLv2Hello", "SSLv3", "TLSv1", "TLSv1.1")
UNOFFERED_SASL_MECHANISMS = ("GSSAPI", "OAUTHBEARER")
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
    prefix = f"listener {listener}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _set_versions(context, config, listener)
    _load_keystore(context, config, listener, required=True)
    client_auth = listener_value(config, listener, "ssl.client.auth").lower() or "none"
    if client_auth not in CLIENT_AUTH:
        raise BrokerConfigError(
            f"{prefix}: ssl.client.auth={client_auth}: must be none, requested or required"
        )
    trusted = _load_truststore(context, config, listener)
    if client_auth != "none" and not trusted:
        raise BrokerConfigError(
            f"{prefix}: ssl.client.auth={client_auth} needs ssl.truststore.location (the CA certificates"
            " client certificates are checked against)"
        )
    context.verify_mode = CLIENT_AUTH[client_auth]
    return context


def client_ssl_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The context of this broker's connections to other brokers' ``listener`` (SSL, SASL_SSL):
    their certificates checked against the listener's truststore (the system's CAs without one),
    their host name against the certificate unless ``ssl.endpoint.identification.algorithm`` is
    empty (Kafka's default ``https`` checks it), and the listener's keystore shown as this
    broker's client certificate (what ``ssl.client.auth=required`` asks of it)."""
    prefix = f"listener {listener}"
    algorithm = listener_value(config, listener, "ssl.endpoint.identification.algorithm").lower()
    if algorithm not in ("", "https"):
        raise BrokerConfigError(
            f"{prefix}: ssl.endpoint.identification.algorithm={algorithm}: must be https (check the"
            " other broker's host name against its certificate) or empty (do not)"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _set_versions(context, config, listener)
    if not _load_truststore(context, config, listener):
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    _load_keystore(context, config, listener, required=False)
    return context


def _set_versions(context: ssl.SSLContext, config: BrokerConfig, listener: str) -> None:
    prefix = f"listener {listener}"
    for type_key in ("ssl.keystore.type", "ssl.truststore.type"):
        kind = listener_value(config, listener, type_key)
        if kind.upper() != "PEM":
            raise BrokerConfigError(
                f"{prefix}: {type_key}={kind}: strom reads PEM files only"
                " (convert a JKS or PKCS12 store with keytool/openssl)"
            )
    names = _listed(config, listener, "ssl.enabled.protocols")
    versions = [name for name in names if name in TLS_VERSIONS]
    unknown = [name for name in names if name not in TLS_VERSIONS and name not in UNOFFERED_TLS_VERSIONS]
    if unknown or not versions:
        raise BrokerConfigError(
            f"{prefix}: ssl.enabled.protocols: {', '.join(unknown or names) or '(none)'}: strom offers"
            f" {', '.join(TLS_VERSIONS)}"
        )
    context.minimum_version = min(TLS_VERSIONS[name] for name in versions)
    context.maximum_version = max(TLS_VERSIONS[name] for name in versions)


def _load_truststore(context: ssl.SSLContext, config: BrokerConfig, listener: str) -> bool:
    """The listener's CA certificates (``ssl.truststore.*``) into ``context``; False without any."""
    trust_location = listener_value(config, listener, "ssl.truststore.location")
    trust_inline = listener_value(config, listener, "ssl.truststore.certificates")
    try:
        if trust_location:
            context.load_verify_locations(cafile=str(_readable(trust_location, "ssl.truststore.location")))
        elif trust_inline:
            context.load_verify_locations(cadata=trust_inline)
        else:
            return False
    except ssl.SSLError as error:
        raise BrokerConfigError(
            f"listener {listener}: the truststore ({trust_location or 'ssl.truststore.certificates'})"
            f" does not hold PEM CA certificates: {error}"
        ) from None
    return True


def _load_keystore(context: ssl.SSLContext, config: BrokerConfig, listener: str, *, required: bool) -> bool:
    """The listener's certificate and key (``ssl.keystore.*``) into ``context``: the broker's own
    certificate as a server, and as a client of another broker (mTLS). False when none is
    configured and not ``required``."""

    def value(key: str) -> str:
        return listener_value(config, listener, key)

    prefix = f"listener {listener}"
    password = value("ssl.key.password") or None
    location = value("ssl.keystore.location")
    chain, key = value("ssl.keystore.certificate.chain"), value("ssl.keystore.key")
    try:
        if location:
            context.load_cert_chain(_readable(location, "ssl.keystore.location"), password=password)
        elif chain and key:
            _load_inline_cert_chain(context, chain, key, password)
        elif required:
            raise BrokerConfigError(
                f"{prefix} needs the broker's certificate and key: ssl.keystore.location"
                " (a PEM file holding both) or ssl.keystore.certificate.chain and ssl.keystore.key"
            )
        else:
            return False
    except ssl.SSLError as error:
        raise BrokerConfigError(
            f"{prefix}: the keystore ({location or 'ssl.keystore.certificate.chain/key'}) does not hold a"
            f" PEM certificate chain and its private key, or ssl.key.password is wrong: {error}"
        ) from None
    return True


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
    named = [name.upper() for name in _listed(config, listener, "sasl.enabled.mechanisms")]
    mechanisms = tuple(dict.fromkeys(name for name in named if name not in UNOFFERED_SASL_MECHANISMS))
    if named and not mechanisms:
        raise BrokerConfigError(
            f"listener {listener}: sasl.enabled.mechanisms: strom does not offer {', '.join(named)}"
            f" (it has {', '.join(DEFAULT_MECHANISMS)})"
        )
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


@dataclass(frozen=True)
class InterBrokerSecurity:
    """How this broker reaches the other brokers of its cluster (its replica fetchers, the
    controller's commands, its requests to the controller, transaction markers): at their endpoint
    of ``listener`` (``inter.broker.listener.name``, every broker of a cluster names the same), with
    that listener's TLS as a client and, on a SASL listener, logging in as ``sasl_username``."""

    listener: str
    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)

    @property
    def plaintext(self) -> bool:
        return self.ssl_context is None and self.sasl_mechanism is None

    def describe(self) -> str:
        """For log lines: ``listener BROKER (SASL_SSL, SCRAM-SHA-512 as broker)``."""
        login = f", {self.sasl_mechanism} as {self.sasl_username}" if self.sasl_mechanism else ""
        return f"listener {self.listener} ({self.security_protocol}{login})"


# What a broker of a cluster configured with none of the inter-broker keys, or a unit test, uses.
PLAINTEXT_INTER_BROKER = InterBrokerSecurity("PLAINTEXT")


def inter_broker_listener(config: BrokerConfig) -> Endpoint:
    """The listener brokers reach one another at, as Kafka chooses it: ``inter.broker.listener.name``,
    or the listener named after ``security.inter.broker.protocol`` (at most one of the two is
    set). With neither, Kafka's default is the listener named PLAINTEXT; a broker without one uses
    its first listener (strom's rule before it read these keys)."""
    listeners = config.listeners()
    by_name = {endpoint.listener: endpoint for endpoint in listeners}
    named = config.get_str("inter.broker.listener.name").strip().upper()
    protocol = config.get_str("security.inter.broker.protocol").strip().upper()
    if named and protocol:
        raise BrokerConfigError(
            "inter.broker.listener.name and security.inter.broker.protocol are both set: set only one"
            " (as Kafka requires; inter.broker.listener.name names the listener itself)"
        )
    if named:
        if named not in by_name:
            raise BrokerConfigError(
                f"inter.broker.listener.name={named}: this broker has no such listener"
                f" (its listeners: {', '.join(by_name)})"
            )
        return by_name[named]
    if protocol:
        if protocol not in SECURITY_PROTOCOLS:
            raise BrokerConfigError(
                f"security.inter.broker.protocol={protocol}: not a security protocol"
                f" ({', '.join(SECURITY_PROTOCOLS)})"
            )
        if protocol not in by_name:
            raise BrokerConfigError(
                f"security.inter.broker.protocol={protocol} names the listener {protocol}, which this"
                f" broker does not open (its listeners: {', '.join(by_name)}); name the listener with"
                " inter.broker.listener.name instead"
            )
        return by_name[protocol]
    return by_name.get("PLAINTEXT", listeners[0])


def inter_broker_security(config: BrokerConfig) -> InterBrokerSecurity:
    """This broker's side of its connections to other brokers (``InterBrokerSecurity``); a setting
    that cannot work is a ``BrokerConfigError`` naming it, so the broker stops at start."""
    endpoint = inter_broker_listener(config)
    listener, protocol = endpoint.listener, endpoint.security_protocol
    if protocol == "PLAINTEXT":
        return InterBrokerSecurity(listener)
    context = client_ssl_context(config, listener) if protocol in TLS_PROTOCOLS else None
    if protocol not in SASL_PROTOCOLS:
        return InterBrokerSecurity(listener, protocol, context)
    mechanism = config.get_str("sasl.mechanism.inter.broker.protocol").strip().upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise BrokerConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism or '(empty)'}: brokers log in to one another"
            f" with {', '.join(CLIENT_MECHANISMS)} (Kafka's default, GSSAPI, is not offered): set it for"
            f" the inter-broker listener {listener} ({protocol})"
        )
    enabled = sasl_settings(config, listener, lambda _user, _mechanism: None).mechanisms
    if mechanism not in enabled:
        raise BrokerConfigError(
            f"sasl.mechanism.inter.broker.protocol={mechanism}: the inter-broker listener {listener}"
            f" does not enable it (sasl.enabled.mechanisms: {', '.join(enabled)})"
        )
    username, password = _inter_broker_login(config, listener, mechanism)
    return InterBrokerSecurity(listener, protocol, context, mechanism, username, password)


def _inter_broker_login(config: BrokerConfig, listener: str, mechanism: str) -> tuple[str, str]:
    """The broker's own user and password: ``username`` and ``password`` of the JAAS configuration
    of the listener's mechanism (``listener.name.<l>.<mechanism>.sasl.jaas.config``, else
    ``sasl.jaas.config``), as Kafka reads them."""
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    module = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    example = f'{key}={module} required username="broker" password="...";'
    text = config.values.get(key) or listener_value(config, listener, "sasl.jaas.config")
    if not text:
        raise BrokerConfigError(
            f"the inter-broker listener {listener} logs in with {mechanism}, but no JAAS configuration"
            f" gives this broker's username and password: set {example}"
        )
    try:
        entries = parse_jaas_config(text)
    except JaasError as error:
        raise BrokerConfigError(f"{key}: {error}") from None
    entry = next((found for found in entries if found.login_module == module), None)
    username = entry.options.get("username", "") if entry is not None else ""
    password = entry.options.get("password", "") if entry is not None else ""
    if not username or not password:
        raise BrokerConfigError(
            f"the inter-broker listener {listener} logs in with {mechanism}: its JAAS configuration needs"
            f" {module} with this broker's username and password ({example})"
        )
    return username, password


def _listed(config: BrokerConfig, listener: str, key: str) -> list[str]:
    """A list-valued key of the listener: its items, spaces around them dropped."""
    return [name.strip() for name in listener_value(config, listener, key).split(",") if name.strip()]


def unoffered_security_settings(config: BrokerConfig) -> list[str]:
    """What the listeners' ``ssl.enabled.protocols`` and ``sasl.enabled.mechanisms`` name that
    strom leaves out (``UNOFFERED_*``), one text per listener and key, for a warning at start."""
    texts: list[str] = []
    for endpoint in config.listeners():
        listener, protocol = endpoint.listener, endpoint.security_protocol
        for key, wanted, unoffered, offered in (
            ("ssl.enabled.protocols", TLS_PROTOCOLS, UNOFFERED_TLS_VERSIONS, tuple(TLS_VERSIONS)),
            ("sasl.enabled.mechanisms", SASL_PROTOCOLS, UNOFFERED_SASL_MECHANISMS, DEFAULT_MECHANISMS),
        ):
            if protocol not in wanted:
                continue
            left_out = [
                name
                for name in _listed(config, listener, key)
                if name.upper() in {unoffered_name.upper() for unoffered_name in unoffered}
            ]
            if left_out:
                texts.append(
                    f"listener {listener}: {key} {', '.join(left_out)} (strom offers {', '.join(offered)})"
                )
    return texts


def check_listener_security(config: BrokerConfig) -> None:
    """Raise BrokerConfigError now for what would stop the broker at start (a missing keystore,
    unusable JAAS users), so ``strom broker`` exits before it creates anything."""
    check_cluster_listener(config)
    for endpoint in config.listeners():
        listener_security(config, endpoint, lambda _user, _mechanism: None)


def check_cluster_listener(config: BrokerConfig) -> None:
    """In a cluster: the inter-broker listener and what logging in there needs (``inter_broker_security``)."""
    if not config.is_set("zookeeper.connect"):
        return
    inter_broker_security(config)


__all__ = [
    "DEFAULT_MECHANISMS",
    "PLAINTEXT_INTER_BROKER",
    "InterBrokerSecurity",
    "ListenerSecurity",
    "check_cluster_listener",
    "check_listener_security",
    "client_ssl_context",
    "inter_broker_listener",
    "inter_broker_security",
    "listener_security",
    "listener_value",
]
