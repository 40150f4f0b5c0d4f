"""One connection's SASL authentication, as Kafka's broker runs it (KIP-43, KIP-152, KIP-368).

A pure state machine: the broker's shell feeds it the SASL requests of a connection on a
SASL_PLAINTEXT or SASL_SSL listener and asks it, before every other request, whether the request
may be served. States (``SaslState``):

``HANDSHAKE``      the connection is new. ApiVersions and SaslHandshake are served; anything else
                   (SaslAuthenticate included) closes the connection. SaslHandshake with an enabled
                   mechanism moves to ``AUTHENTICATE`` (v1) or ``RAW_TOKENS`` (v0); an unknown one
                   is answered UNSUPPORTED_SASL_MECHANISM with the enabled list, then ``FAILED``.
``AUTHENTICATE``   only SaslAuthenticate is served; it carries the mechanism's tokens. Success moves
                   to ``AUTHENTICATED``, failure to ``FAILED``.
``RAW_TOKENS``     SaslHandshake v0: the next frames are bare SASL tokens (no Kafka header), each
                   answered with a bare token; success moves to ``AUTHENTICATED``, failure closes.
``AUTHENTICATED``  every request is served as ``principal`` while the session lasts
                   (``connections.max.reauth.ms``, when > 0); once it expired, any request but a
                   SaslHandshake closes the connection. A SaslHandshake (same mechanism) starts a
                   re-authentication: ``REAUTHENTICATE``.
``REAUTHENTICATE`` like ``AUTHENTICATE``, but other requests are still served as the old principal
                   until the session expires; the new login must be the same principal.
``FAILED``         the connection is closed after the failure is answered.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from strom.security.plain import PlainError, PlainServer
from strom.security.principal import KafkaPrincipal
from strom.security.scram import MECHANISMS as SCRAM_MECHANISMS
from strom.security.scram import ScramCredential, ScramError, ScramServer

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
# What strom offers when sasl.enabled.mechanisms is not set (Kafka's default, GSSAPI, is not offered).
DEFAULT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SUPPORTED_MECHANISMS = frozenset({"PLAIN", *SCRAM_MECHANISMS})
# Kafka's error codes, written here so this module needs nothing of the protocol package.
NONE = 0
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58


class SaslState(enum.Enum):
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    RAW_TOKENS = "raw tokens"
    AUTHENTICATED = "authenticated"
    REAUTHENTICATE = "reauthenticate"
    FAILED = "failed"


class MechanismServer(Protocol):
    mechanism: str
    username: str | None
    complete: bool

    @property
    def failure(self) -> str | None: ...

    def step(self, token: bytes) -> bytes: ...


class _ScramMechanism:
    """ScramServer's two messages as steps."""

    def __init__(self, server: ScramServer) -> None:
        self._server = server
        self.mechanism = server.mechanism
        self.username: str | None = None
        self.complete = False
        self._steps = 0

    @property
    def failure(self) -> str | None:
        return self._server.failure

    def step(self, token: bytes) -> bytes:
        self._steps += 1
        if self._steps == 1:
            return self._server.first(token)
        if self._steps == 2:
            answer = self._server.final(token)
            self.username = self._server.username
            self.complete = True
            return answer
        raise ScramError("the SCRAM exchange is already complete")


@dataclass(frozen=True)
class SaslSettings:
    """A listener's SASL configuration."""

    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]
    # (user, mechanism) -> the stored credential, None for an unknown user.
    scram_credential: Callable[[str, str], ScramCredential | None]
    reauth_ms: int = 0  # connections.max.reauth.ms; 0: sessions do not expire
    # connection.failed.authentication.delay.ms: a failed login is answered this much later.
    failed_authentication_delay_ms: int = 100

    def __post_init__(self) -> None:
        unknown = [name for name in self.mechanisms if name not in SUPPORTED_MECHANISMS]
        if unknown:
            raise ValueError(
                f"sasl.enabled.mechanisms: strom does not offer {', '.join(unknown)}"
                f" (it has {', '.join(sorted(SUPPORTED_MECHANISMS))})"
            )
        if not self.mechanisms:
            raise ValueError("sasl.enabled.mechanisms names no mechanism")

    def server(self, mechanism: str) -> MechanismServer:
        if mechanism == "PLAIN":
            return PlainServer(self.plain_users)
        lookup = self.scram_credential
        return _ScramMechanism(ScramServer(mechanism, lambda name: lookup(name, mechanism)))


@dataclass(frozen=True)
class HandshakeAnswer:
    error_code: int
    mechanisms: list[str]


@dataclass(frozen=True)
class AuthenticateAnswer:
    error_code: int
    error_message: str | None
    token: bytes
    session_lifetime_ms: int
    # For the broker's log only: why it failed (it may name the user; the peer is never told).
    failure: str | None = None

    @property
    def failed(self) -> bool:
        return self.error_code != NONE


class SaslAuthenticator:
    """The SASL state of one connection (see the module's docstring for the states)."""

    def __init__(self, settings: SaslSettings) -> None:
        self.settings = settings
        self.state = SaslState.HANDSHAKE
        self.principal: KafkaPrincipal | None = None
        self.mechanism: str | None = None
        self.session_expires_ms: int | None = None
        self.failure: str | None = None  # why the authentication failed, for the broker's log
        self._server: MechanismServer | None = None

    @property
    def expects_raw_tokens(self) -> bool:
        return self.state is SaslState.RAW_TOKENS

    def refusal(self, api_key: int, now_ms: int) -> str | None:
        """Why a request of ``api_key`` closes the connection now; None when it may be served."""
        state = self.state
        if state is SaslState.AUTHENTICATED or state is SaslState.REAUTHENTICATE:
            if api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
                return None
            expires = self.session_expires_ms
            if expires is not None and now_ms >= expires:
                return "the SASL session expired (connections.max.reauth.ms) and was not re-authenticated"
            return None
        if state is SaslState.HANDSHAKE:
            if api_key in (API_VERSIONS, SASL_HANDSHAKE):
                return None
            return f"unexpected request (API key {api_key}) before SASL authentication"
        if state is SaslState.AUTHENTICATE:
            if api_key == SASL_AUTHENTICATE:
                return None
            return f"unexpected request (API key {api_key}) during SASL authentication"
        if state is SaslState.RAW_TOKENS:
            return "a Kafka request came where a SASL token (SaslHandshake v0) was expected"
        return "SASL authentication failed"

    def handshake(self, mechanism: str, version: int) -> HandshakeAnswer:
        enabled = list(self.settings.mechanisms)
        state = self.state
        if state is SaslState.AUTHENTICATED:
            if mechanism != self.mechanism:  # a re-authentication keeps the mechanism
                self.state = SaslState.FAILED
                self.failure = f"re-authentication with {mechanism[:100]!r} instead of {self.mechanism}"
                return HandshakeAnswer(UNSUPPORTED_SASL_MECHANISM, [self.mechanism or ""])
            self._server = self.settings.server(mechanism)
            self.state = SaslState.REAUTHENTICATE
            return HandshakeAnswer(NONE, enabled)
        if state is not SaslState.HANDSHAKE:
            self.state = SaslState.FAILED
            self.failure = "SaslHandshake during an authentication"
            return HandshakeAnswer(ILLEGAL_SASL_STATE, enabled)
        if mechanism not in enabled:
            # As Kafka: answered with the enabled mechanisms, then the connection is closed.
            self.state = SaslState.FAILED
            self.failure = f"unsupported SASL mechanism {mechanism[:100]!r}"
            return HandshakeAnswer(UNSUPPORTED_SASL_MECHANISM, enabled)
        self.mechanism = mechanism
        self._server = self.settings.server(mechanism)
        self.state = SaslState.RAW_TOKENS if version == 0 else SaslState.AUTHENTICATE
        return HandshakeAnswer(NONE, enabled)

    def authenticate(self, token: bytes, now_ms: int) -> AuthenticateAnswer:
        """One SaslAuthenticate (or one bare token after SaslHandshake v0)."""
        server = self._server
        reauthenticating = self.state is SaslState.REAUTHENTICATE
        if server is None or self.state not in (
            SaslState.AUTHENTICATE,
            SaslState.RAW_TOKENS,
            SaslState.REAUTHENTICATE,
        ):
            self.state = SaslState.FAILED
            self.failure = "SaslAuthenticate outside an authentication"
            return AuthenticateAnswer(
                ILLEGAL_SASL_STATE,
                "SaslAuthenticate came outside an authentication",
                b"",
                0,
                "SaslAuthenticate outside an authentication",
            )
        try:
            answer = server.step(token)
        except (PlainError, ScramError) as error:
            return self._fail(str(error), server.failure or str(error))
        if not server.complete:
            return AuthenticateAnswer(NONE, None, answer, 0)
        assert server.username is not None
        principal = KafkaPrincipal.user(server.username)
        if reauthenticating and principal != self.principal:
            return self._fail(
                "Authentication failed: a re-authentication may not change the principal",
                f"re-authentication as {principal} on a connection of {self.principal}",
            )
        self.principal = principal
        self._server = None
        self.state = SaslState.AUTHENTICATED
        lifetime_ms = self.settings.reauth_ms if self.settings.reauth_ms > 0 else 0
        self.session_expires_ms = now_ms + lifetime_ms if lifetime_ms else None
        return AuthenticateAnswer(NONE, None, answer, lifetime_ms)

    def _fail(self, message: str, failure: str) -> AuthenticateAnswer:
        self.state = SaslState.FAILED
        self.failure = failure
        self._server = None
        return AuthenticateAnswer(SASL_AUTHENTICATION_FAILED, message, b"", 0, failure)
