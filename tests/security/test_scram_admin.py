"""Describe/AlterUserScramCredentials with confluent-kafka's admin client: a user created with
AlterUserScramCredentials logs in over SASL_SSL, survives a restart (the data directory's file),
and Kafka's per-user errors come back."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from strom.broker.scram_store import SCRAM_CREDENTIALS_FILE_NAME
from tests.security.clients import confluent_config
from tests.security.conftest import SecureBroker

TIMEOUT_S = 30.0


def can_log_in(broker: SecureBroker, user: str, password: str) -> bool:
    """True once the user gets metadata, False once librdkafka reports an authentication error."""
    errors: list[KafkaError] = []
    producer = Producer(
        confluent_config(broker, "sasl_ssl_scram", user, password) | {"error_cb": errors.append}
    )
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            producer.list_topics(timeout=1)
        except KafkaException:
            producer.poll(0.1)
            if any(error.code() == KafkaError._AUTHENTICATION for error in errors):
                return False
        else:
            return True
    raise AssertionError(f"neither logged in nor refused: {errors}")


def test_alter_describe_delete_and_restart(secure_broker: SecureBroker) -> None:
    admin = AdminClient(confluent_config(secure_broker, "sasl_ssl_scram"))
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("carol", info, b"carol-secret", b"some-salt")]
    )
    for future in futures.values():
        future.result(TIMEOUT_S)
    assert can_log_in(secure_broker, "carol", "carol-secret")
    assert not can_log_in(secure_broker, "carol", "wrong")
    stored = (secure_broker.process.data_dir / SCRAM_CREDENTIALS_FILE_NAME).read_text()
    assert "carol" in stored and "carol-secret" not in stored

    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(TIMEOUT_S)
    assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)
    ]
    with pytest.raises(KafkaException) as raised:
        admin.describe_user_scram_credentials(["nobody"])["nobody"].result(TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND
    with pytest.raises(KafkaException) as raised:
        bad = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100)
        admin.alter_user_scram_credentials([UserScramCredentialUpsertion("dave", bad, b"pw")])["dave"].result(
            TIMEOUT_S
        )
    assert raised.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL

    secure_broker.process.restart()
    assert can_log_in(secure_broker, "carol", "carol-secret")
    admin = AdminClient(confluent_config(secure_broker, "sasl_ssl_scram"))
    deletion = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)
    admin.alter_user_scram_credentials([deletion])["carol"].result(TIMEOUT_S)
    assert not can_log_in(secure_broker, "carol", "carol-secret")
    everyone = admin.describe_user_scram_credentials()
    users = (
        everyone.result(TIMEOUT_S)
        if hasattr(everyone, "result")
        else {u: f.result(TIMEOUT_S) for u, f in everyone.items()}
    )
    assert set(users) == {"alice"}
