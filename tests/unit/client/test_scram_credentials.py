"""SCRAM credentials through the admin API: the requests built without a broker (the password
salted here, never sent), the answers read, then Admin against the scripted broker, whose stored
credential then lets the user log in."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from strom.client.admin import (
    Admin,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from strom.client.errors import AuthenticationError, BrokerResponseError, ProtocolError
from strom.client.scram_credentials import (
    alter_user_scram_credentials_request,
    describe_user_scram_credentials_request,
    raise_for_alter,
    user_scram_credentials_from,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsResponse
from strom.protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsResponse
from strom.security.scram import SALT_BYTES, salted_password
from tests.unit.client.sasl_broker import ScriptedBroker, running_in_thread

Result = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult
Info = DescribeUserScramCredentialsResponse.CredentialInfo


def test_an_upsertion_sends_the_salted_password_never_the_password() -> None:
    request = alter_user_scram_credentials_request(
        [UserScramCredentialUpsertion("alice", "scram-sha-512", "alice-secret", iterations=8192)]
    )
    [upsertion] = request.upsertions
    assert (upsertion.name, upsertion.mechanism, upsertion.iterations) == ("alice", 2, 8192)
    assert len(upsertion.salt) == SALT_BYTES
    assert upsertion.salted_password == salted_password("SCRAM-SHA-512", "alice-secret", upsertion.salt, 8192)
    assert b"alice-secret" not in request.encode(0)
    again = alter_user_scram_credentials_request(
        [UserScramCredentialUpsertion("alice", "SCRAM-SHA-512", "alice-secret")]
    )
    assert again.upsertions[0].salt != upsertion.salt, "a fresh random salt each time"
    assert again.upsertions[0].iterations == 4096


def test_a_deletion_names_the_mechanism() -> None:
    request = alter_user_scram_credentials_request([UserScramCredentialDeletion("bob", "SCRAM-SHA-256")])
    assert [(deletion.name, deletion.mechanism) for deletion in request.deletions] == [("bob", 1)]
    assert request.upsertions == []


@pytest.mark.parametrize(
    ("alteration", "message"),
    [
        (UserScramCredentialUpsertion("alice", "SCRAM-SHA-1", "x"), "unknown SCRAM mechanism"),
        (UserScramCredentialUpsertion("alice", "SCRAM-SHA-256", "x", iterations=100), "4096..16384"),
        (UserScramCredentialUpsertion("alice", "SCRAM-SHA-256", "x", iterations=10**9), "4096..16384"),
        (UserScramCredentialDeletion("", "SCRAM-SHA-256"), "needs a user name"),
    ],
)
def test_what_kafka_would_refuse_is_refused_before_hashing(
    alteration: UserScramCredentialUpsertion | UserScramCredentialDeletion, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        alter_user_scram_credentials_request([alteration])


def test_the_password_stays_out_of_repr() -> None:
    assert "alice-secret" not in repr(UserScramCredentialUpsertion("alice", "SCRAM-SHA-512", "alice-secret"))


def test_describe_reads_each_users_credentials() -> None:
    assert describe_user_scram_credentials_request(None).users is None
    assert [user.name for user in describe_user_scram_credentials_request(["a", "b", "a"]).users or []] == [
        "a",
        "b",
    ]
    response = DescribeUserScramCredentialsResponse(
        results=[
            Result(
                user="alice",
                credential_infos=[Info(mechanism=2, iterations=8192), Info(mechanism=1, iterations=4096)],
            ),
            Result(user="nobody", error_code=ErrorCode.RESOURCE_NOT_FOUND, error_message="no credentials"),
        ]
    )
    assert user_scram_credentials_from(response) == {
        "alice": [ScramCredentialInfo("SCRAM-SHA-256", 4096), ScramCredentialInfo("SCRAM-SHA-512", 8192)],
        "nobody": [],
    }


def test_describe_errors_raise() -> None:
    denied = DescribeUserScramCredentialsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    with pytest.raises(BrokerResponseError, match="CLUSTER_AUTHORIZATION_FAILED"):
        user_scram_credentials_from(denied)
    bad_user = DescribeUserScramCredentialsResponse(
        results=[Result(user="x", error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM)]
    )
    with pytest.raises(BrokerResponseError, match="describe SCRAM credentials of 'x'"):
        user_scram_credentials_from(bad_user)


def test_alter_errors_raise_with_the_user_and_the_brokers_message() -> None:
    Altered = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
    refused = AlterUserScramCredentialsResponse(
        results=[
            Altered(
                user="alice", error_code=ErrorCode.UNACCEPTABLE_CREDENTIAL, error_message="too few iterations"
            )
        ]
    )
    with pytest.raises(BrokerResponseError, match="alter SCRAM credentials of 'alice': too few iterations"):
        raise_for_alter(refused, ["alice"])
    with pytest.raises(ProtocolError, match="did not answer for 'bob'"):
        raise_for_alter(AlterUserScramCredentialsResponse(results=[Altered(user="alice")]), ["alice", "bob"])


# -- Admin against the scripted broker -----------------------------------------------------------


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    with running_in_thread(ScriptedBroker(passwords={"admin": "admin-secret"})) as running:
        yield running


def login(broker: ScriptedBroker, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> list[str]:
    settings = {
        "bootstrap.servers": broker.address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    with Admin(settings) as admin:
        return admin.list_topics()


def test_admin_adds_lists_and_removes_credentials_and_the_new_user_logs_in(broker: ScriptedBroker) -> None:
    settings = {
        "bootstrap.servers": broker.address,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
    }
    with Admin(settings) as admin:
        admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion("carol", "SCRAM-SHA-512", "carol-secret", iterations=4096),
                UserScramCredentialUpsertion("carol", "SCRAM-SHA-256", "carol-secret", iterations=8192),
            ]
        )
        assert admin.describe_user_scram_credentials(["carol"]) == {
            "carol": [ScramCredentialInfo("SCRAM-SHA-256", 8192), ScramCredentialInfo("SCRAM-SHA-512", 4096)]
        }
        assert set(admin.describe_user_scram_credentials()) == {"admin", "carol"}
        assert all(b"carol-secret" not in request.encode(0) for request in broker.alterations)

        assert login(broker, "carol", "carol-secret") == []
        assert login(broker, "carol", "carol-secret", "SCRAM-SHA-256") == []
        with pytest.raises(AuthenticationError):
            login(broker, "carol", "wrong")

        admin.alter_user_scram_credentials([UserScramCredentialDeletion("carol", "SCRAM-SHA-512")])
        assert admin.describe_user_scram_credentials(["carol"]) == {
            "carol": [ScramCredentialInfo("SCRAM-SHA-256", 8192)]
        }
        with pytest.raises(AuthenticationError):
            login(broker, "carol", "carol-secret", "SCRAM-SHA-512")
