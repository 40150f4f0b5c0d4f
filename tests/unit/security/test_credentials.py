"""The SCRAM credential table: Kafka's errors for Describe/AlterUserScramCredentials, the per-user
document, and kafka-storage's --add-scram form."""

from __future__ import annotations

import pytest

from strom.security.credentials import (
    DUPLICATE_RESOURCE,
    NONE,
    RESOURCE_NOT_FOUND,
    UNACCEPTABLE_CREDENTIAL,
    UNSUPPORTED_SASL_MECHANISM,
    CredentialTable,
    Deletion,
    Upsertion,
    parse_add_scram,
)
from strom.security.scram import ScramClient, ScramServer, salted_password

SHA256, SHA512 = 1, 2


def upsert(user: str, mechanism: int = SHA512, iterations: int = 4096, password: str = "pw") -> Upsertion:
    name = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}.get(mechanism, "SCRAM-SHA-512")
    salt = b"salt-of-" + user.encode()
    return Upsertion(user, mechanism, iterations, salt, salted_password(name, password, salt, 4096))


def test_an_upserted_salted_password_logs_in_and_is_described_without_secrets() -> None:
    table = CredentialTable()
    results, changed = table.alter([upsert("alice", password="secret")], [])
    assert [(result.user, result.error_code) for result in results] == [("alice", NONE)]
    assert changed == {"alice"}
    server = ScramServer("SCRAM-SHA-512", lambda name: table.credential(name, "SCRAM-SHA-512"))
    client = ScramClient("SCRAM-SHA-512", "alice", "secret")
    client.verify(server.final(client.final(server.first(client.first()))))
    described = table.describe(None)
    assert [(entry.user, entry.credentials) for entry in described] == [("alice", ((SHA512, 4096),))]


def test_describe_errors() -> None:
    table = CredentialTable()
    table.alter([upsert("alice")], [])
    results = {entry.user: entry.error_code for entry in table.describe(["alice", "bob", "carol", "carol"])}
    assert results == {"alice": NONE, "bob": RESOURCE_NOT_FOUND, "carol": DUPLICATE_RESOURCE}


@pytest.mark.parametrize(
    ("upsertions", "deletions", "code"),
    [
        ([upsert("u", iterations=4095)], [], UNACCEPTABLE_CREDENTIAL),
        ([upsert("u", iterations=16385)], [], UNACCEPTABLE_CREDENTIAL),
        ([upsert("u", mechanism=0)], [], UNSUPPORTED_SASL_MECHANISM),
        ([upsert("u", mechanism=3)], [], UNSUPPORTED_SASL_MECHANISM),
        ([upsert("u"), upsert("u")], [], DUPLICATE_RESOURCE),
        ([upsert("u")], [Deletion("u", SHA512)], DUPLICATE_RESOURCE),
        ([], [Deletion("u", SHA256)], RESOURCE_NOT_FOUND),
        ([upsert("")], [], UNACCEPTABLE_CREDENTIAL),
    ],
)
def test_alter_errors_leave_that_user_unchanged(
    upsertions: list[Upsertion], deletions: list[Deletion], code: int
) -> None:
    table = CredentialTable()
    results, changed = table.alter([*upsertions, upsert("other")], deletions)
    by_user = {result.user: result.error_code for result in results}
    assert by_user[upsertions[0].user if upsertions else deletions[0].user] == code
    assert by_user["other"] == NONE
    assert changed == {"other"}
    assert set(table.users) == {"other"}


def test_deleting_the_last_mechanism_forgets_the_user() -> None:
    table = CredentialTable()
    table.alter([upsert("u", SHA256), upsert("u", SHA512)], [])
    table.alter([], [Deletion("u", SHA256)])
    assert table.describe(["u"])[0].credentials == ((SHA512, 4096),)
    table.alter([], [Deletion("u", SHA512)])
    assert table.describe(["u"])[0].error_code == RESOURCE_NOT_FOUND


def test_the_per_user_document_is_kafkas_and_round_trips() -> None:
    table = CredentialTable()
    table.set_password("admin", "SCRAM-SHA-512", "admin-secret", 8192)
    document = table.user_document("admin")
    assert document["version"] == 1
    text = document["config"]["SCRAM-SHA-512"]  # type: ignore[index]
    assert text.startswith("salt=") and text.endswith(",iterations=8192") and "admin-secret" not in text
    copy = CredentialTable()
    copy.load_user_document("admin", document)
    assert copy.credential("admin", "SCRAM-SHA-512") == table.credential("admin", "SCRAM-SHA-512")


def test_add_scram_form() -> None:
    assert parse_add_scram("SCRAM-SHA-512=[name=admin,password=admin-secret]") == (
        "SCRAM-SHA-512",
        "admin",
        "admin-secret",
        4096,
    )
    assert parse_add_scram('scram-sha-256=[name="a,b",password="p,w",iterations=8192]') == (
        "SCRAM-SHA-256",
        "a,b",
        "p,w",
        8192,
    )
    for bad in ("PLAIN=[name=a,password=b]", "SCRAM-SHA-512=name=a", "SCRAM-SHA-512=[name=a]",
                "SCRAM-SHA-512=[name=a,password=b,iterations=10]", "SCRAM-SHA-512=[name=a,pass=b]"):  # fmt: skip
        with pytest.raises(ValueError, match="add-scram"):
            parse_add_scram(bad)
