"""Client quotas in a cluster: kept in ZooKeeper where Kafka keeps them (``/config/users/...``,
``/config/clients/...``, a ``/config/changes`` notification per change), read by every broker, so a
quota altered through one broker is enforced by the others and survives restarts."""

from __future__ import annotations

import json
import time

from strom.base.clock import SystemClock
from strom.cli.dev_cluster import LocalCluster
from strom.cluster.zookeeper import ClusterZooKeeper
from strom.protocol.messages.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from strom.protocol.messages.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.compat.wire import CLIENT_ID as WIRE_CLIENT_ID
from tests.compat.wire import WireClient

from .conftest import TEST_SESSION_TIMEOUT_MS, Backend, wait_until

ALICE_ANY_CLIENT = (("client-id", None), ("user", "alice"))


def test_quotas_are_kept_in_zookeeper_as_kafka_keeps_them(backend: Backend) -> None:
    zk = ClusterZooKeeper(backend.connect(TEST_SESSION_TIMEOUT_MS), SystemClock())
    zk.ensure_layout()
    seen = zk.read_config_changes().last
    zk.set_client_quota(ALICE_ANY_CLIENT, {"producer_byte_rate": 1048576.0})
    zk.set_client_quota((("user", None),), {"request_percentage": 12.5})
    zk.set_client_quota((("client-id", "a/b c"),), {"consumer_byte_rate": 2048.0})
    data, _ = zk.store.get("/config/users/alice/clients/<default>")
    assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "1048576.0"}}
    assert zk.store.exists("/config/clients/a%2Fb%20c") is not None  # names sanitized as Kafka does
    assert zk.read_client_quotas() == {
        ALICE_ANY_CLIENT: {"producer_byte_rate": 1048576.0},
        (("user", None),): {"request_percentage": 12.5},
        (("client-id", "a/b c"),): {"consumer_byte_rate": 2048.0},
    }
    changes = zk.read_config_changes(after=seen)
    assert changes.quotas and changes.topics == ()
    data, _ = zk.store.get(f"/config/changes/{changes.last}")
    assert json.loads(data)["entity_path"] == "clients/a%2Fb%20c"
    # Removing an entity's last quota leaves an empty config (users/alice keeps its clients).
    zk.set_client_quota(ALICE_ANY_CLIENT, {})
    assert ALICE_ANY_CLIENT not in zk.read_client_quotas()
    removal = zk.read_config_changes(after=changes.last)
    assert removal.quotas
    zk.set_topic_config("orders", {"retention.ms": "1"})
    assert not zk.read_config_changes(after=removal.last).quotas


def test_a_users_quotas_and_scram_credentials_share_its_znode_and_keep_each_other(backend: Backend) -> None:
    zk = ClusterZooKeeper(backend.connect(TEST_SESSION_TIMEOUT_MS), SystemClock())
    zk.ensure_layout()
    # A client quota of bob's makes /config/users/bob as a parent with no data: credentials still read.
    zk.set_client_quota((("client-id", "app"), ("user", "bob")), {"producer_byte_rate": 1024.0})
    assert zk.read_user_configs() == {"bob": {}}
    credential = "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,iterations=4096"
    zk.update_user_config("bob", {"SCRAM-SHA-512": credential})
    zk.set_client_quota((("user", "bob"),), {"consumer_byte_rate": 2048.0})
    assert zk.read_user_configs()["bob"] == {"SCRAM-SHA-512": credential, "consumer_byte_rate": "2048.0"}
    zk.update_user_config("bob", {"SCRAM-SHA-256": credential})
    zk.set_client_quota((("user", "bob"),), {})
    assert zk.read_user_configs()["bob"] == {"SCRAM-SHA-512": credential, "SCRAM-SHA-256": credential}
    zk.set_client_quota((("user", "bob"),), {"request_percentage": 50.0})
    assert zk.read_client_quotas() == {
        (("client-id", "app"), ("user", "bob")): {"producer_byte_rate": 1024.0},
        (("user", "bob"),): {"request_percentage": 50.0},
    }


def _describe(port: int) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    with WireClient(port) as client:
        response = client.round_trip(DescribeClientQuotasRequest(), DescribeClientQuotasResponse, 1)
    assert response.error_code == 0
    return {
        tuple((part.entity_type, part.entity_name) for part in entry.entity): {
            value.key: value.value for value in entry.values
        }
        for entry in response.entries or []
    }


def _alter(port: int, entity: tuple[tuple[str, str | None], ...], key: str, value: float | None) -> None:
    request = AlterClientQuotasRequest(
        entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[
                    AlterClientQuotasRequest.EntityData(entity_type=kind, entity_name=name)
                    for kind, name in entity
                ],
                ops=[AlterClientQuotasRequest.OpData(key=key, value=value or 0.0, remove=value is None)],
            )
        ]
    )
    with WireClient(port) as client:
        response = client.round_trip(request, AlterClientQuotasResponse, 1)
    assert [entry.error_code for entry in response.entries] == [0], response


def test_a_quota_altered_through_one_broker_is_enforced_by_another_and_survives_restarts(
    cluster: LocalCluster,
) -> None:
    first, second, third = (cluster.brokers[node_id] for node_id in sorted(cluster.brokers))
    entity = (("client-id", WIRE_CLIENT_ID),)
    # 0.01 % of a thread: a few milliseconds of Metadata handling are more than its credit.
    _alter(first.port, entity, "request_percentage", 0.01)
    wait_until(lambda: entity in _describe(second.port), "broker 2 to read the new quota from ZooKeeper")
    with WireClient(second.port) as client:
        throttle_ms = 0
        deadline = time.monotonic() + 30
        while not throttle_ms and time.monotonic() < deadline:
            throttle_ms = client.round_trip(
                MetadataRequest(topics=None), MetadataResponse, 4
            ).throttle_time_ms
    assert throttle_ms > 0

    second.stop()
    second.start()
    second.wait_listening()  # it listens before it has joined: the quotas come with joining
    wait_until(
        lambda: _describe(second.port).get(entity) == {"request_percentage": 0.01},
        "broker 2 to read the quotas again after its restart",
    )

    _alter(third.port, entity, "request_percentage", None)
    wait_until(lambda: entity not in _describe(second.port), "broker 2 to read the removal")
    wait_until(lambda: entity not in _describe(first.port), "broker 1 to read the removal")
