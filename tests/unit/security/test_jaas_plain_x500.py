"""JAAS configuration text, PLAIN messages and certificate subjects as Kafka names them."""

from __future__ import annotations

import pytest

from strom.security.jaas import JaasError, parse_jaas_config, plain_users
from strom.security.plain import PlainError, PlainServer, parse_plain_message
from strom.security.x500 import certificate_principal, rfc2253_name

KAFKA_EXAMPLE = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
)


def test_kafkas_example_gives_its_users() -> None:
    assert plain_users(KAFKA_EXAMPLE) == {"admin": "admin-secret", "alice": "alice-secret"}


def test_quoting_escapes_bare_values_and_several_entries() -> None:
    entries = parse_jaas_config('a.B required user_x="p\\"q\\\\r;=" debug=true;\n  c.D optional ;')
    assert [(entry.login_module, entry.flag) for entry in entries] == [
        ("a.B", "required"),
        ("c.D", "optional"),
    ]
    assert entries[0].options == {"user_x": 'p"q\\r;=', "debug": "true"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no login module"),
        ('a.B required user_x="y"', "ends early"),
        ("a.B mandatory;", "control flag"),
        ('a.B required user_x "y";', "no '='"),
        ('a.B required user_x="unclosed;', "not closed"),
        ('a.B required k="1" k="2";', "twice"),
        ('a.B required = "y";', "option name"),
    ],
)
def test_bad_jaas_text_is_refused_without_quoting_values(text: str, message: str) -> None:
    with pytest.raises(JaasError, match=message) as raised:
        parse_jaas_config(text)
    assert '"y"' not in str(raised.value)


def test_plain_needs_the_plain_login_module_and_one_entry() -> None:
    with pytest.raises(JaasError, match="PlainLoginModule"):
        plain_users("org.apache.kafka.common.security.scram.ScramLoginModule required;")
    with pytest.raises(JaasError, match="exactly one"):
        plain_users(KAFKA_EXAMPLE + KAFKA_EXAMPLE)


def test_plain_message_fields() -> None:
    assert parse_plain_message(b"\x00alice\x00pw") == ("", "alice", "pw")
    assert parse_plain_message("z\x00ålice\x00pw".encode()) == ("z", "ålice", "pw")
    for bad in (b"alice\x00pw", b"\x00\x00pw", b"\x00alice\x00", b"\x00a\x00b\x00c", b"\xff\x00a\x00b"):
        with pytest.raises(PlainError):
            parse_plain_message(bad)


def test_plain_server_checks_password_and_authorization_id() -> None:
    server = PlainServer({"alice": "pw"})
    assert server.step(b"alice\x00alice\x00pw") == b""
    assert server.username == "alice"
    with pytest.raises(PlainError, match="authorization id"):
        PlainServer({"alice": "pw"}).step(b"bob\x00alice\x00pw")
    unknown, wrong = PlainServer({"alice": "pw"}), PlainServer({"alice": "pw"})
    with pytest.raises(PlainError) as unknown_error:
        unknown.step(b"\x00mallory\x00pw")
    with pytest.raises(PlainError) as wrong_error:
        wrong.step(b"\x00alice\x00px")
    assert str(unknown_error.value) == str(wrong_error.value)
    assert unknown.failure != wrong.failure


def test_subjects_are_written_most_specific_first_as_rfc_2253_says() -> None:
    subject = (
        (("countryName", "DE"),),
        (("organizationName", "strom"),),
        (("organizationalUnitName", "eng"),),
        (("commonName", "alice"),),
    )
    assert rfc2253_name(subject) == "CN=alice,OU=eng,O=strom,C=DE"
    assert str(certificate_principal(subject)) == "User:CN=alice,OU=eng,O=strom,C=DE"
    assert certificate_principal(None) is None and certificate_principal(()) is None


def test_special_characters_multi_valued_rdns_and_attributes_without_keyword() -> None:
    subject = (
        (("organizationName", "A, B+C"),),
        (("commonName", " lead#"), ("userId", "u1")),
        (("emailAddress", "a@b.c"),),
    )
    assert rfc2253_name(subject) == ("1.2.840.113549.1.9.1=#16056140622e63,CN=\\ lead#+UID=u1,O=A\\, B\\+C")
