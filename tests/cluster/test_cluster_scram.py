"""SCRAM credentials of a cluster live in ZooKeeper as Kafka keeps them (``/config/users/<user>``):
a user stored at start through one broker logs in on another, a user created with
AlterUserScramCredentials through one broker logs in on the other soon after, and the znode is in
Kafka's form."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kazoo.client import KazooClient

from strom.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from strom.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from strom.security.scram import ScramClient
from tests.compat.conftest import BrokerProcess, free_port
from tests.compat.wire import WireClient

from .cluster_support import CLUSTER_SETTINGS
from .zookeeper_server import ZooKeeperServer

CHROOT = "/strom-scram"


def scram_login(port: int, user: str, password: str) -> bool:
    with WireClient(port) as client:
        client.round_trip(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), SaslHandshakeResponse, 1)
        scram = ScramClient("SCRAM-SHA-512", user, password)
        first = client.round_trip(
            SaslAuthenticateRequest(auth_bytes=scram.first()), SaslAuthenticateResponse, 2
        )
        if first.error_code:
            return False
        final = client.round_trip(
            SaslAuthenticateRequest(auth_bytes=scram.final(first.auth_bytes)), SaslAuthenticateResponse, 2
        )
        if final.error_code:
            return False
        scram.verify(final.auth_bytes)
        return True


@pytest.fixture
def two_brokers(
    tmp_path: Path, zookeeper_server: ZooKeeperServer
) -> Iterator[list[tuple[BrokerProcess, int]]]:
    started: list[tuple[BrokerProcess, int]] = []
    try:
        for node_id in (1, 2):
            sasl_port = free_port()
            settings = CLUSTER_SETTINGS | {
                "zookeeper.connect": zookeeper_server.connect_string + CHROOT,
                "listeners": f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            }
            arguments = ["--node-id", str(node_id)]
            if node_id == 1:
                arguments += [
                    "--add-scram",
                    "SCRAM-SHA-512=[name=alice,password=alice-secret,iterations=8192]",
                ]
            (tmp_path / f"broker{node_id}").mkdir()
            broker = BrokerProcess(tmp_path / f"broker{node_id}", settings, arguments)
            started.append((broker, sasl_port))
            broker.start()
        yield started
    finally:
        for broker, _ in started:
            broker.close()


def test_credentials_are_shared_through_zookeeper(
    two_brokers: list[tuple[BrokerProcess, int]], zookeeper_server: ZooKeeperServer
) -> None:
    (_, port1), (_, port2) = two_brokers
    assert scram_login(port2, "alice", "alice-secret")  # stored through broker 1 at its start
    assert not scram_login(port2, "alice", "wrong")

    admin = AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{port2}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": "alice-secret",
        }
    )
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    for future in admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion("bob", info, b"bob-secret")]
    ).values():
        future.result(30)
    # librdkafka sends it to the controller, whichever broker that is; the other one reads it
    # from ZooKeeper when the change notification arrives.
    deadline = time.monotonic() + 30
    for port in (port1, port2):
        while not scram_login(port, "bob", "bob-secret"):
            assert time.monotonic() < deadline, f"bob cannot log in on the broker of port {port}"
            time.sleep(0.2)

    zookeeper = KazooClient(hosts=zookeeper_server.connect_string + CHROOT)
    zookeeper.start(timeout=30)
    try:
        data, _ = zookeeper.get("/config/users/bob")
        alice, _ = zookeeper.get("/config/users/alice")
        changes = zookeeper.get_children("/config/changes")
        notifications = [json.loads(zookeeper.get(f"/config/changes/{child}")[0]) for child in changes]
    finally:
        zookeeper.stop()
        zookeeper.close()
    document = json.loads(data)
    assert document["version"] == 1 and set(document["config"]) == {"SCRAM-SHA-512"}
    text = document["config"]["SCRAM-SHA-512"]
    assert text.startswith("salt=") and ",stored_key=" in text and text.endswith(",iterations=4096")
    assert "bob-secret" not in text
    assert json.loads(alice)["config"]["SCRAM-SHA-512"].endswith(",iterations=8192")
    assert {"version": 2, "entity_path": "users/bob"} in notifications
