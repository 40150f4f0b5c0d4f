"""The SASL and SCRAM credential APIs as a PLAINTEXT connection sees them: advertised exactly,
ILLEGAL_SASL_STATE where there is nothing to authenticate, credentials altered and described."""

from __future__ import annotations

from strom.broker.scram_store import SCRAM_CREDENTIALS_FILE_NAME
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
from strom.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from strom.protocol.messages.sasl_handshake import SaslHandshakeRequest
from tests.unit.broker.conftest import InProcessBroker

Upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
Deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion
UserName = DescribeUserScramCredentialsRequest.UserName


def test_the_versions_advertised_are_the_specifications(broker: InProcessBroker) -> None:
    versions = {
        entry.api_key: (entry.min_version, entry.max_version)
        for entry in broker.call(ApiVersionsRequest(), 3).api_keys
    }
    assert versions[17] == (0, 1)
    assert versions[36] == (0, 2)
    assert versions[50] == (0, 0)
    assert versions[51] == (0, 0)


def test_sasl_on_a_listener_without_sasl_is_an_illegal_state(broker: InProcessBroker) -> None:
    assert broker.call(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == ErrorCode.ILLEGAL_SASL_STATE
    answer = broker.call(SaslAuthenticateRequest(auth_bytes=b"\x00a\x00b"), 2)
    assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE


def test_credentials_are_altered_described_and_persisted(broker: InProcessBroker) -> None:
    alter = AlterUserScramCredentialsRequest(
        upsertions=[
            Upsertion(name="alice", mechanism=2, iterations=8192, salt=b"salt", salted_password=b"x" * 64),
            Upsertion(name="bob", mechanism=1, iterations=100, salt=b"salt", salted_password=b"x" * 32),
        ],
        deletions=[Deletion(name="carol", mechanism=1)],
    )
    results = {result.user: result.error_code for result in broker.call(alter, 0).results}
    assert results == {
        "alice": ErrorCode.NONE,
        "bob": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "carol": ErrorCode.RESOURCE_NOT_FOUND,
    }
    described = broker.call(
        DescribeUserScramCredentialsRequest(users=[UserName(name="alice"), UserName(name="bob")]), 0
    )
    by_user = {result.user: result for result in described.results}
    assert [(info.mechanism, info.iterations) for info in by_user["alice"].credential_infos] == [(2, 8192)]
    assert by_user["bob"].error_code == ErrorCode.RESOURCE_NOT_FOUND
    everyone = broker.call(DescribeUserScramCredentialsRequest(users=None), 0)
    assert [result.user for result in everyone.results] == ["alice"]
    stored = (broker.config.data_dir / SCRAM_CREDENTIALS_FILE_NAME).read_text()
    assert '"alice"' in stored and "SCRAM-SHA-512" in stored and '"bob"' not in stored
