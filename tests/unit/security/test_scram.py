"""SCRAM against RFC 7677's SCRAM-SHA-256 example, both ends against each other, and the failures a
hostile or mistaken client can cause."""

from __future__ import annotations

import base64
import hashlib
import hmac

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
    forged = client_final.replace(b",p=", b"X,p=", 1)  # the server's part of the nonce altered
    with pytest.raises(ScramError, match="Invalid nonce"):
        server.final(forged)
    assert server.username is None


def test_a_client_nonce_repeated_before_the_combined_one_is_accepted_as_kafka_does() -> None:
    """librdkafka's client-final carries r=<client nonce><client nonce + server nonce>; Kafka's
    server checks only that the nonce ends with the one it sent, and the proof covers the rest."""
    credential = ScramCredential.from_password("SCRAM-SHA-512", "right")
    server = _server("SCRAM-SHA-512", credential)
    client_first = b"n,,n=user,r=abc"
    server_first = server.first(client_first).decode()
    combined = server_first.split(",")[0][2:]
    salt = base64.b64decode(server_first.split(",s=")[1].split(",")[0])
    without_proof = f"c=biws,r=abc{combined}"
    auth_message = f"n=user,r=abc,{server_first},{without_proof}".encode()
    salted = hashlib.pbkdf2_hmac("sha512", b"right", salt, 4096)
    client_key = hmac.digest(salted, b"Client Key", "sha512")
    signature = hmac.digest(hashlib.sha512(client_key).digest(), auth_message, "sha512")
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server.final(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    assert server.username == "user"


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
