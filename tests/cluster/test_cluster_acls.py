"""A cluster's ACLs live in ZooKeeper, in Kafka's layout: an ACL created through one broker is
written to ``/kafka-acl...``, notified through ``/kafka-acl-changes`` and taken by every broker; a
deletion likewise; a broker that starts reads them all. (Every connection is User:ANONYMOUS until
SASL: it is the brokers' super user here, and the test asks each broker what it holds.)"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from strom.cli.dev_cluster import LocalCluster
from strom.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from strom.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from strom.protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from tests.compat.wire import WireClient

from .cluster_support import CLUSTER_SETTINGS
from .conftest import _LIVE_CLUSTERS, wait_until
from .zookeeper_server import ZooKeeperServer

CHROOT = "/strom-acls"
SETTINGS = {**CLUSTER_SETTINGS, "authorizer.class.name": "strom", "super.users": "User:ANONYMOUS"}
TOPIC, GROUP, LITERAL, PREFIXED = 2, 3, 3, 4
READ, WRITE, ALLOW, DENY = 3, 4, 3, 2
BROKER_NOT_AVAILABLE = 8
JOIN_WAIT_S = 20.0


@pytest.fixture(scope="module")
def acl_cluster(
    zookeeper_server: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    cluster = LocalCluster(
        Path(tmp_path_factory.mktemp("acl-cluster")),
        2,
        settings=SETTINGS,
        zookeeper=zookeeper_server,
        chroot=CHROOT,
    )
    _LIVE_CLUSTERS.append(cluster)
    try:
        cluster.start()
        yield cluster
    finally:
        _LIVE_CLUSTERS.remove(cluster)
        cluster.stop()


def _acls_of(port: int) -> set[tuple[int, str, int, str, str, int, int]]:
    request = DescribeAclsRequest(
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter=None,
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    with WireClient(port) as client:
        response = client.round_trip(request, DescribeAclsResponse, 3)
    assert response.error_code == 0, response
    return {
        (
            r.resource_type,
            r.resource_name,
            r.pattern_type,
            a.principal,
            a.host,
            a.operation,
            a.permission_type,
        )
        for r in response.resources
        for a in r.acls
    }


def _create(port: int, *acls: tuple[int, str, int, str, str, int, int]) -> None:
    request = CreateAclsRequest(
        creations=[
            CreateAclsRequest.AclCreation(
                resource_type=resource_type,
                resource_name=name,
                resource_pattern_type=pattern,
                principal=principal,
                host=host,
                operation=operation,
                permission_type=permission,
            )
            for resource_type, name, pattern, principal, host, operation, permission in acls
        ]
    )
    # A broker answers BROKER_NOT_AVAILABLE until it has joined the cluster (it listens first).
    deadline = time.monotonic() + JOIN_WAIT_S
    while True:
        with WireClient(port) as client:
            response = client.round_trip(request, CreateAclsResponse, 3)
        errors = [result.error_code for result in response.results]
        if errors != [BROKER_NOT_AVAILABLE] * len(acls) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert errors == [0] * len(acls)


def test_acls_are_shared_through_zookeeper_in_kafkas_layout(
    acl_cluster: LocalCluster, zookeeper_server: ZooKeeperServer
) -> None:
    one, two = acl_cluster.brokers[1], acl_cluster.brokers[2]
    literal = (TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW)
    prefixed = (TOPIC, "pay", PREFIXED, "User:bob", "10.0.0.1", WRITE, DENY)
    group = (GROUP, "billing", LITERAL, "User:alice", "*", READ, ALLOW)
    _create(one.port, literal, prefixed, group)
    wait_until(lambda: _acls_of(two.port) == {literal, prefixed, group}, "broker 2 to hold the new ACLs")

    zk = KazooClient(hosts=zookeeper_server.connect_string + CHROOT)
    zk.start()
    try:
        data, _ = zk.get("/kafka-acl/Topic/orders")
        assert json.loads(data) == {
            "version": 1,
            "acls": [
                {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}
            ],
        }
        data, _ = zk.get("/kafka-acl-extended/prefixed/Topic/pay")
        assert json.loads(data)["acls"] == [
            {"principal": "User:bob", "permissionType": "Deny", "operation": "Write", "host": "10.0.0.1"}
        ]
        assert zk.exists("/kafka-acl/Group/billing") is not None
        assert zk.get_children("/kafka-acl-changes") and zk.get_children("/kafka-acl-extended-changes")
    finally:
        zk.stop()
        zk.close()

    request = DeleteAclsRequest(
        filters=[
            DeleteAclsRequest.DeleteAclsFilter(
                resource_type_filter=TOPIC,
                resource_name_filter="orders",
                pattern_type_filter=LITERAL,
                principal_filter=None,
                host_filter=None,
                operation=1,
                permission_type=1,
            )
        ]
    )
    with WireClient(two.port) as client:
        deleted = client.round_trip(request, DeleteAclsResponse, 3)
    assert [len(result.matching_acls) for result in deleted.filter_results] == [1]
    wait_until(lambda: _acls_of(one.port) == {prefixed, group}, "broker 1 to drop the deleted ACL")

    # A broker that starts reads every ACL from ZooKeeper.
    two.stop()
    two.start()
    two.wait_listening()
    wait_until(lambda: _acls_of(two.port) == {prefixed, group}, "the restarted broker to hold the ACLs")
