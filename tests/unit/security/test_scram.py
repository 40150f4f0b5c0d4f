"""SCRAM against RFC 7677's SCRAM-SHA-256 example, both ends against each other, and the failures a
hostile or mistaken client can cause."""

from __future__ import annotations

import base64

import pytest

from strom.security.scram import ScramClient, ScramCredential, ScramError, ScramServer

RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def _server(mechanism: str, credential: ScramCredential, user: str = "user") -> ScramServer:
    return ScramServer(mechanism, lambda name: credential if name == user else None)


def test_rfc_7677_example() -> None:
    credential = ScramCredential.from_password("SCRAM-SHA-256", "pencil", RFC_SALT, 4096)
    server = ScramServer("SCRAM-SHA-256", lambda name: credential, nonce=lambda: RFC_SERVER_NONCE)
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=lambda: RFC_CLIENT_NONCE)
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = server.first(client.first())
    assert (
        server_first
        == b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    client_final = client.final(server_first)
    assert client_final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    server_final = server.final(client_final)
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    client.verify(server_final)
    assert server.username == "user"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_both_ends_agree_and_a_name_with_commas_survives(mechanism: str) -> None:
    credential = ScramCredential.from_password(mechanism, "s3cret")
    server = _server(mechanism, credential, user="a,b=c")
    client = ScramClient(mechanism, "a,b=c", "s3cret")
    client.verify(server.final(client.final(server.first(client.first()))))
    assert server.username == "a,b=c"


def test_the_stored_form_is_kafkas_and_holds_no_password() -> None:
    credential = ScramCredential.from_password("SCRAM-SHA-512", "s3cret", iterations=8192)
    text = credential.to_text()
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=8192")
    assert "s3cret" not in text
    assert ScramCredential.parse(text) == credential


def test_wrong_password_unknown_user_and_wrong_nonce_fail_alike() -> None:
    credential = ScramCredential.from_password("SCRAM-SHA-256", "right")
    server = _server("SCRAM-SHA-256", credential)
    client = ScramClient("SCRAM-SHA-256", "user", "wrong")
    with pytest.raises(ScramError, match="Invalid user credentials"):
        server.final(client.final(server.first(client.first())))
    assert server.username is None and server.failure == "wrong password for 'user'"

    with pytest.raises(ScramError, match="Invalid user credentials"):
        _server("SCRAM-SHA-256", credential).first(ScramClient("SCRAM-SHA-256", "nobody", "x").first())

    server = _server("SCRAM-SHA-256", credential)
    client = ScramClient("SCRAM-SHA-256", "user", "right")
    client_final = client.final(server.first(client.first()))
    forged = client_final.replace(b",r=", b",r=X", 1)
    with pytest.raises(ScramError, match="Invalid nonce"):
        server.final(forged)
    assert server.username is None


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"garbage",
        b"p=tls-unique,,n=user,r=abc",
        b"n,,r=abc,n=user",
        b"n,,n=user",
        b"\xff\xfe",
        b"n" * 5000,
    ],
)
def test_malformed_client_first_messages_are_refused(message: bytes) -> None:
    server = _server("SCRAM-SHA-256", ScramCredential.from_password("SCRAM-SHA-256", "x"))
    with pytest.raises(ScramError):
        server.first(message)


def test_a_final_message_first_and_delegation_tokens_are_refused() -> None:
    server = _server("SCRAM-SHA-256", ScramCredential.from_password("SCRAM-SHA-256", "x"))
    with pytest.raises(ScramError):
        server.final(b"c=biws,r=abc,p=AAAA")
    with pytest.raises(ScramError, match="delegation tokens"):
        server.first(b"n,,n=user,r=abc,tokenauth=true")
