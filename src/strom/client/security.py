"""The client's side of TLS and SASL (docs/security.md), without sockets.

``ssl_context`` turns the ``ssl.*`` settings into the standard library's ``ssl.SSLContext`` once per
client; the transport hands it to asyncio. ``SaslAuthenticator`` is one SASL exchange as a
sans-I/O object (``strom.security.sasl_client``, which a broker's connections to other brokers run too): ``start()`` gives the SaslHandshake request, ``receive(response)`` the next
SaslAuthenticate request, until it returns None (authenticated) or raises ``AuthenticationError``.
The transport sends what it is given on the connection being set up (after ApiVersions, before any
other request) and again before the broker's session lifetime runs out (KIP-368).

PLAIN sends ``\\0username\\0password`` (RFC 4616): only over TLS is that private. SCRAM-SHA-256/512
(RFC 5802, RFC 7677) never sends the password, and the client checks the server's final message,
so a broker that does not hold the user's credential cannot pretend to have authenticated it.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

from strom.client.config import ClientConfig
from strom.client.errors import AuthenticationError, ConfigError, describe_error_code
from strom.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from strom.protocol.messages.sasl_handshake import SaslHandshakeResponse
from strom.security.sasl_client import SaslClient, SaslClientError

__all__ = ["SaslAuthenticator", "describe_tls_failure", "ssl_context"]


def ssl_context(config: ClientConfig) -> ssl.SSLContext:
    """The TLS context for ``config`` (security.protocol SSL or SASL_SSL). A file that cannot be
    read or does not hold what its key says is a ``ConfigError`` here, not a handshake failure later."""
    try:
        # Verifies the broker's chain against ssl.ca.location, or the system's CAs without one.
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=config.ssl_ca_location)
    except (ssl.SSLError, OSError) as error:
        raise ConfigError(
            f"config 'ssl.ca.location': cannot load CA certificates from {config.ssl_ca_location!r}: {error}"
        ) from None
    context.check_hostname = config.ssl_endpoint_identification_algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    if config.ssl_certificate_location is not None:
        try:
            context.load_cert_chain(
                config.ssl_certificate_location, config.ssl_key_location, config.ssl_key_password
            )
        except (ssl.SSLError, OSError) as error:
            key = config.ssl_key_location or config.ssl_certificate_location
            raise ConfigError(
                f"cannot load the client certificate {config.ssl_certificate_location!r} with its key "
                f"{key!r} (not PEM, a key of another certificate, or a wrong ssl.key.password): {error}"
            ) from None
    return context


def describe_tls_failure(error: ssl.SSLError, config: ClientConfig) -> str:
    """A failed TLS handshake in words, with the setting that most likely fixes it."""
    if isinstance(error, ssl.SSLCertVerificationError):
        reason = error.verify_message or str(error)
        if "hostname" in reason.lower() or "ip address mismatch" in reason.lower():
            hint = (
                "the broker's certificate does not name the host connected to "
                "(ssl.endpoint.identification.algorithm=none skips this check)"
            )
        else:
            hint = "the broker's certificate is not signed by a CA in ssl.ca.location" + (
                "" if config.ssl_ca_location else " (not set: the system's CAs were used)"
            )
        return f"certificate verify failed: {reason}; {hint}"
    reason = error.reason or str(error)
    if reason == "WRONG_VERSION_NUMBER":
        return "the broker did not answer in TLS (is this a TLS listener? security.protocol=SSL/SASL_SSL asks for one)"
    if "ALERT" in reason:
        return (
            f"the broker refused the handshake ({reason}): it may require a client certificate "
            "(ssl.certificate.location, ssl.key.location) or not trust the one given"
        )
    return str(error)


class SaslAuthenticator(SaslClient):
    """One client-side SASL exchange (``strom.security.sasl_client.SaslClient``, shared with the
    broker's own connections to other brokers), its failures as this client's errors: a mechanism
    it does not have is a ``ConfigError``, a refused login an ``AuthenticationError``."""

    def __init__(
        self, mechanism: str, username: str, password: str, *, scram_nonce: Callable[[], str] | None = None
    ) -> None:
        try:
            super().__init__(
                mechanism, username, password, scram_nonce=scram_nonce, describe=describe_error_code
            )
        except ValueError:
            raise ConfigError(f"strom's client has no SASL mechanism {mechanism!r}") from None

    def receive(
        self, response: SaslHandshakeResponse | SaslAuthenticateResponse
    ) -> SaslAuthenticateRequest | None:
        """The next request to send, or None once authenticated. Raises ``AuthenticationError``
        when the broker refuses, or (SCRAM) cannot prove it holds the credential."""
        try:
            return super().receive(response)
        except SaslClientError as error:
            raise AuthenticationError(str(error), error.code) from None
