"""The per-connection SASL state machine: which requests each state serves, PLAIN and SCRAM
through it, failures, re-authentication and session expiry (no sockets, a number for the clock)."""

from __future__ import annotations

import pytest

from strom.security.principal import KafkaPrincipal
from strom.security.sasl import (
    API_VERSIONS,
    ILLEGAL_SASL_STATE,
    NONE,
    SASL_AUTHENTICATE,
    SASL_AUTHENTICATION_FAILED,
    SASL_HANDSHAKE,
    UNSUPPORTED_SASL_MECHANISM,
    SaslAuthenticator,
    SaslSettings,
    SaslState,
)
from strom.security.scram import ScramClient, ScramCredential

PRODUCE = 0
CREDENTIAL = ScramCredential.from_password("SCRAM-SHA-512", "alice-secret")


def settings(reauth_ms: int = 0, mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-512")) -> SaslSettings:
    return SaslSettings(
        mechanisms=mechanisms,
        plain_users={"bob": "bob-secret"},
        scram_credential=lambda user, mechanism: (
            CREDENTIAL if (user, mechanism) == ("alice", "SCRAM-SHA-512") else None
        ),
        reauth_ms=reauth_ms,
    )


def plain_login(sasl: SaslAuthenticator, password: str = "bob-secret", now_ms: int = 0) -> int:
    assert sasl.handshake("PLAIN", 1).error_code == NONE
    return sasl.authenticate(b"\x00bob\x00" + password.encode(), now_ms).error_code


def test_before_authentication_only_api_versions_and_the_handshake_are_served() -> None:
    sasl = SaslAuthenticator(settings())
    assert sasl.refusal(API_VERSIONS, 0) is None
    assert sasl.refusal(SASL_HANDSHAKE, 0) is None
    assert "before SASL authentication" in (sasl.refusal(PRODUCE, 0) or "")
    assert sasl.refusal(SASL_AUTHENTICATE, 0) is not None  # SaslAuthenticate before SaslHandshake
    assert sasl.handshake("PLAIN", 1).error_code == NONE
    assert sasl.state is SaslState.AUTHENTICATE
    assert sasl.refusal(SASL_AUTHENTICATE, 0) is None
    assert sasl.refusal(API_VERSIONS, 0) is not None
    assert sasl.refusal(PRODUCE, 0) is not None


def test_an_unknown_mechanism_is_refused_with_the_enabled_list_then_closed() -> None:
    sasl = SaslAuthenticator(settings())
    answer = sasl.handshake("GSSAPI", 1)
    assert answer.error_code == UNSUPPORTED_SASL_MECHANISM
    assert answer.mechanisms == ["PLAIN", "SCRAM-SHA-512"]
    assert sasl.state is SaslState.FAILED
    assert sasl.refusal(API_VERSIONS, 0) is not None


def test_plain_login_sets_the_principal() -> None:
    sasl = SaslAuthenticator(settings())
    assert plain_login(sasl) == NONE
    assert sasl.state is SaslState.AUTHENTICATED
    assert sasl.principal == KafkaPrincipal.user("bob")
    assert sasl.refusal(PRODUCE, 10**12) is None  # no reauth: the session never expires


@pytest.mark.parametrize("token", [b"\x00bob\x00wrong", b"\x00nobody\x00bob-secret"])
def test_a_wrong_password_and_an_unknown_user_get_the_same_answer(token: bytes) -> None:
    sasl = SaslAuthenticator(settings())
    sasl.handshake("PLAIN", 1)
    answer = sasl.authenticate(token, 0)
    assert answer.error_code == SASL_AUTHENTICATION_FAILED
    assert answer.error_message == "Authentication failed: Invalid username or password"
    assert sasl.state is SaslState.FAILED
    assert sasl.refusal(API_VERSIONS, 0) is not None
    assert sasl.failure is not None  # the broker's log knows which


@pytest.mark.parametrize(
    "token", [b"", b"bob", b"\x00\x00", b"\x00bob\x00", b"\xff\x00bob\x00x", b"a" * 10_000]
)
def test_malformed_plain_messages_fail_the_authentication(token: bytes) -> None:
    sasl = SaslAuthenticator(settings())
    sasl.handshake("PLAIN", 1)
    assert sasl.authenticate(token, 0).error_code == SASL_AUTHENTICATION_FAILED


def test_scram_login_in_two_steps_then_the_server_signature() -> None:
    sasl = SaslAuthenticator(settings(reauth_ms=1000))
    assert sasl.handshake("SCRAM-SHA-512", 1).error_code == NONE
    client = ScramClient("SCRAM-SHA-512", "alice", "alice-secret")
    first = sasl.authenticate(client.first(), 0)
    assert first.error_code == NONE and sasl.state is SaslState.AUTHENTICATE
    final = sasl.authenticate(client.final(first.token), 5)
    assert final.error_code == NONE
    client.verify(final.token)
    assert final.session_lifetime_ms == 1000
    assert sasl.principal == KafkaPrincipal.user("alice")
    assert sasl.refusal(PRODUCE, 1004) is None
    assert "expired" in (sasl.refusal(PRODUCE, 1005) or "")


def test_scram_with_a_wrong_nonce_fails() -> None:
    sasl = SaslAuthenticator(settings())
    sasl.handshake("SCRAM-SHA-512", 1)
    client = ScramClient("SCRAM-SHA-512", "alice", "alice-secret")
    first = sasl.authenticate(client.first(), 0)
    forged = client.final(first.token).replace(b",p=", b"x,p=")
    answer = sasl.authenticate(forged, 0)
    assert answer.error_code == SASL_AUTHENTICATION_FAILED
    assert sasl.state is SaslState.FAILED


def test_reauthentication_keeps_serving_until_expiry_and_renews_the_session() -> None:
    sasl = SaslAuthenticator(settings(reauth_ms=100))
    assert plain_login(sasl, now_ms=0) == NONE
    assert sasl.handshake("PLAIN", 1).error_code == NONE
    assert sasl.state is SaslState.REAUTHENTICATE
    assert sasl.refusal(PRODUCE, 50) is None  # still the old session
    assert sasl.refusal(PRODUCE, 100) is not None
    assert sasl.authenticate(b"\x00bob\x00bob-secret", 90).error_code == NONE
    assert sasl.refusal(PRODUCE, 150) is None
    assert sasl.refusal(PRODUCE, 190) is not None


def test_reauthentication_may_not_change_the_principal_or_the_mechanism() -> None:
    sasl = SaslAuthenticator(settings())
    assert plain_login(sasl) == NONE
    assert sasl.handshake("SCRAM-SHA-512", 1).error_code == UNSUPPORTED_SASL_MECHANISM
    assert sasl.state is SaslState.FAILED
    settings_with_two = SaslAuthenticator(
        SaslSettings(("PLAIN",), {"bob": "b", "carol": "c"}, lambda _u, _m: None)
    )
    settings_with_two.handshake("PLAIN", 1)
    assert settings_with_two.authenticate(b"\x00bob\x00b", 0).error_code == NONE
    settings_with_two.handshake("PLAIN", 1)
    assert settings_with_two.authenticate(b"\x00carol\x00c", 0).error_code == SASL_AUTHENTICATION_FAILED


def test_handshake_v0_expects_raw_tokens() -> None:
    sasl = SaslAuthenticator(settings())
    assert sasl.handshake("PLAIN", 0).error_code == NONE
    assert sasl.expects_raw_tokens
    assert sasl.authenticate(b"\x00bob\x00bob-secret", 0).error_code == NONE
    assert not sasl.expects_raw_tokens


def test_a_second_handshake_during_authentication_is_an_illegal_state() -> None:
    sasl = SaslAuthenticator(settings())
    sasl.handshake("PLAIN", 1)
    assert sasl.handshake("PLAIN", 1).error_code == ILLEGAL_SASL_STATE
    assert sasl.state is SaslState.FAILED


def test_settings_refuse_mechanisms_strom_does_not_offer() -> None:
    with pytest.raises(ValueError, match="GSSAPI"):
        settings(mechanisms=("GSSAPI",))
