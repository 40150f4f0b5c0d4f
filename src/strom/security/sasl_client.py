"""The client's side of one SASL exchange, without sockets: what strom's client and a broker
reaching another broker (``inter.broker.listener.name`` on SASL_PLAINTEXT or SASL_SSL) both run.

``start()`` gives the SaslHandshake request, ``receive(response)`` the next SaslAuthenticate
request, until it returns None (authenticated) or raises ``SaslClientError``. The caller sends what
it is given on the connection being set up (before any other request) and again before the
server's session lifetime runs out (KIP-368).

PLAIN sends ``\\0username\\0password`` (RFC 4616): only over TLS is that private. SCRAM-SHA-256/512
(RFC 5802, RFC 7677) never sends the password, and the client checks the server's final message,
so a server that does not hold the user's credential cannot pretend to have authenticated it.
"""

from __future__ import annotations

from collections.abc import Callable

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from strom.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from strom.security.scram import MECHANISMS as SCRAM_MECHANISMS
from strom.security.scram import ScramClient, ScramError

CLIENT_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)


class SaslClientError(Exception):
    """The server refused the login (``code`` its error code), or could not prove it holds the
    credential (SCRAM; ``code`` None)."""

    def __init__(self, message: str, code: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.code = code


def _code_name(code: ErrorCode) -> str:
    return code.name.lower().replace("_", " ")


class SaslClient:
    """One client-side SASL exchange: SaslHandshake v1 naming the mechanism, then SaslAuthenticate
    requests carrying the mechanism's messages. Not thread-safe; used once. ``describe`` puts an
    error code in words (for the messages of ``SaslClientError``)."""

    def __init__(
        self,
        mechanism: str,
        username: str,
        password: str,
        *,
        scram_nonce: Callable[[], str] | None = None,
        describe: Callable[[ErrorCode], str] = _code_name,
    ) -> None:
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._describe = describe
        self._scram: ScramClient | None = None
        if mechanism in SCRAM_MECHANISMS:
            self._scram = (
                ScramClient(mechanism, username, password)
                if scram_nonce is None
                else ScramClient(mechanism, username, password, nonce=scram_nonce)
            )
        elif mechanism != "PLAIN":
            raise ValueError(
                f"no SASL mechanism {mechanism!r} on the client side (there are {', '.join(CLIENT_MECHANISMS)})"
            )
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
        """The next request to send, or None once authenticated. Raises ``SaslClientError``
        when the server refuses, or (SCRAM) cannot prove it holds the credential."""
        if isinstance(response, SaslHandshakeResponse):
            return self._on_handshake(response)
        return self._on_authenticate(response)

    def _on_handshake(self, response: SaslHandshakeResponse) -> SaslAuthenticateRequest:
        if self._step != 0:
            raise SaslClientError("SaslHandshake answered twice")
        code = _code(response.error_code)
        if code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            enabled = ", ".join(response.mechanisms) or "none"
            raise SaslClientError(
                f"the broker does not enable SASL mechanism {self.mechanism} (it enables: {enabled}); "
                "set sasl.mechanism to one of them",
                code,
            )
        if code == ErrorCode.ILLEGAL_SASL_STATE:
            raise SaslClientError(
                "the broker does not expect SASL on this listener (ILLEGAL_SASL_STATE): "
                "is its security protocol SASL_PLAINTEXT or SASL_SSL?",
                code,
            )
        if code != ErrorCode.NONE:
            raise SaslClientError(f"SaslHandshake failed: {self._describe(code)} ({code.name})", code)
        self._step = 1
        if self._scram is not None:
            return SaslAuthenticateRequest(auth_bytes=self._scram.first())
        # RFC 4616: [authzid] NUL authcid NUL passwd, with no authorization id.
        token = b"\0" + self.username.encode("utf-8") + b"\0" + self._password.encode("utf-8")
        return SaslAuthenticateRequest(auth_bytes=token)

    def _on_authenticate(self, response: SaslAuthenticateResponse) -> SaslAuthenticateRequest | None:
        if self._step == 0 or self.authenticated:
            raise SaslClientError("SaslAuthenticate answered out of turn")
        code = _code(response.error_code)
        if code != ErrorCode.NONE:
            said = response.error_message or self._describe(code)
            raise SaslClientError(
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
            raise SaslClientError(
                f"authentication of {self.username!r} with {self.mechanism} failed: {error}"
            ) from None
        self.authenticated = True
        return None


def _code(value: int) -> ErrorCode:
    try:
        return ErrorCode(value)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR
