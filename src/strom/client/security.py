"""The client's side of TLS and SASL (docs/security.md), without sockets.

``ssl_context`` turns the ``ssl.*`` settings into the standard library's ``ssl.SSLContext`` once per
client; the transport hands it to asyncio. ``SaslAuthenticator`` is one SASL exchange as a
sans-I/O object: ``start()`` gives the SaslHandshake request, ``receive(response)`` the next
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
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from strom.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from strom.security.scram import MECHANISMS as SCRAM_MECHANISMS
from strom.security.scram import ScramClient, ScramError

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


class SaslAuthenticator:
    """One client-side SASL exchange: SaslHandshake v1 naming the mechanism, then SaslAuthenticate
    requests carrying the mechanism's messages. Not thread-safe; used once."""

    def __init__(
        self, mechanism: str, username: str, password: str, *, scram_nonce: Callable[[], str] | None = None
    ) -> None:
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._scram: ScramClient | None = None
        if mechanism in SCRAM_MECHANISMS:
            self._scram = (
                ScramClient(mechanism, username, password)
                if scram_nonce is None
                else ScramClient(mechanism, username, password, nonce=scram_nonce)
            )
        elif mechanism != "PLAIN":
            raise ConfigError(f"strom's client has no SASL mechanism {mechanism!r}")
        self._step = 0
        self.authenticated = False
        # From the last SaslAuthenticate answer (v1+): re-authenticate before it runs out; 0: never.
        self.session_lifetime_ms = 0

    @property
    def hashes_next(self) -> bool:
        """The next ``receive`` salts the password (SCRAM's server-first message): PBKDF2 with
        4096-16384 iterations, 10-30 ms of CPU that the caller may run off its event loop."""
        return self._scram is not None and self._step == 1

    def start(self) -> SaslHandshakeRequest:
        return SaslHandshakeRequest(mechanism=self.mechanism)

    def receive(
        self, response: SaslHandshakeResponse | SaslAuthenticateResponse
    ) -> SaslAuthenticateRequest | None:
        """The next request to send, or None once authenticated. Raises ``AuthenticationError``
        when the broker refuses, or (SCRAM) cannot prove it holds the credential."""
        if isinstance(response, SaslHandshakeResponse):
            return self._on_handshake(response)
        return self._on_authenticate(response)

    def _on_handshake(self, response: SaslHandshakeResponse) -> SaslAuthenticateRequest:
        if self._step != 0:
            raise AuthenticationError("SaslHandshake answered twice")
        code = _code(response.error_code)
        if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            enabled = ", ".join(response.mechanisms) or "none"
            raise AuthenticationError(
                f"the broker does not enable SASL mechanism {self.mechanism} (it enables: {enabled}); "
                "set sasl.mechanism to one of them",
                code,
            )
        if code == ErrorCode.ILLEGAL_SASL_STATE:
            raise AuthenticationError(
                "the broker does not expect SASL on this listener (ILLEGAL_SASL_STATE): "
                "is its security protocol SASL_PLAINTEXT or SASL_SSL?",
                code,
            )
        if code != ErrorCode.NONE:
            raise AuthenticationError(
                f"SaslHandshake failed: {describe_error_code(code)} ({code.name})", code
            )
        self._step = 1
        if self._scram is not None:
            return SaslAuthenticateRequest(auth_bytes=self._scram.first())
        # RFC 4616: [authzid] NUL authcid NUL passwd, with no authorization id.
        token = b"\0" + self.username.encode("utf-8") + b"\0" + self._password.encode("utf-8")
        return SaslAuthenticateRequest(auth_bytes=token)

    def _on_authenticate(self, response: SaslAuthenticateResponse) -> SaslAuthenticateRequest | None:
        if self._step == 0 or self.authenticated:
            raise AuthenticationError("SaslAuthenticate answered out of turn")
        code = _code(response.error_code)
        if code != ErrorCode.NONE:
            said = response.error_message or describe_error_code(code)
            raise AuthenticationError(
                f"authentication of {self.username!r} with {self.mechanism} failed: {said}", code
            )
        self.session_lifetime_ms = max(0, getattr(response, "session_lifetime_ms", 0) or 0)
        if self._scram is None:
            self.authenticated = True
            return None
        try:
            if self._step == 1:
                self._step = 2
                return SaslAuthenticateRequest(auth_bytes=self._scram.final(bytes(response.auth_bytes)))
            self._scram.verify(bytes(response.auth_bytes))
        except ScramError as error:
            raise AuthenticationError(
                f"authentication of {self.username!r} with {self.mechanism} failed: {error}"
            ) from None
        self.authenticated = True
        return None


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
