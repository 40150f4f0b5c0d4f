"""Handlers with authorization on, driven in-process with request contexts of any principal and
host (no SASL needed): the principal and host come from ``RequestContext``, decisions from the
ACLs the broker holds, and a change through CreateAcls takes effect at once.

``authorizing_state`` and ``as_principal`` are meant for reuse by tests of other principals."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.base.clock import SystemClock
from strom.broker.config import BrokerConfig
from strom.broker.context import RequestContext
from strom.broker.handlers import register_all
from strom.broker.handlers.acls import handle_create_acls, handle_describe_acls
from strom.broker.handlers.configs import handle_describe_configs, handle_incremental_alter_configs
from strom.broker.handlers.groups import handle_join_group
from strom.broker.handlers.metadata import handle_metadata
from strom.broker.handlers.produce import handle_produce
from strom.broker.handlers.replication import (
    handle_alter_partition_reassignments,
    handle_list_partition_reassignments,
)
from strom.broker.state import BrokerState
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_partition_reassignments import AlterPartitionReassignmentsRequest
from strom.protocol.messages.create_acls import CreateAclsRequest
from strom.protocol.messages.describe_acls import DescribeAclsRequest
from strom.protocol.messages.describe_configs import DescribeConfigsRequest
from strom.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from strom.protocol.messages.join_group import JoinGroupRequest
from strom.protocol.messages.list_partition_reassignments import ListPartitionReassignmentsRequest
from strom.protocol.messages.metadata import MetadataRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.protocol.records.batch import Record, build_batch
from strom.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from strom.security.principal import KafkaPrincipal

register_all()

HOST = "10.0.0.1"
TOPICS = ("orders", "secret")


def authorizing_state(data_dir: Path, **settings: str) -> BrokerState:
    """A broker's state with authorization on (``User:admin`` its super user), loaded; the caller
    closes it."""
    values = {"authorizer.class.name": "strom", "super.users": "User:admin", **settings}
    state = BrokerState(
        BrokerConfig(host="127.0.0.1", port=0, data_dir=data_dir, values=values), SystemClock()
    )
    state.load()
    return state


def as_principal(state: BrokerState, principal: str, api_version: int, host: str = HOST) -> RequestContext:
    return RequestContext(
        state, 0, api_version, 1, "test", host, 1, principal=KafkaPrincipal.parse(principal)
    )


def allow(
    resource_type: ResourceType, name: str, principal: str, operation: AclOperation, host: str = "*"
) -> AclBinding:
    return AclBinding(
        ResourcePattern(resource_type, name, PatternType.LITERAL),
        AccessControlEntry(principal, host, operation, AclPermissionType.ALLOW),
    )


@pytest.fixture
def state(tmp_path: Path) -> Iterator[BrokerState]:
    made = authorizing_state(tmp_path / "data")

    async def setup() -> None:
        for topic in TOPICS:
            await made.replication.create_topic(topic, 1, -1, {}, {}, validate_only=False)
        assert made.acls is not None
        await made.acls.create(
            [
                allow(ResourceType.TOPIC, "orders", "User:alice", AclOperation.WRITE, host=HOST),
                allow(ResourceType.GROUP, "billing", "User:alice", AclOperation.READ),
            ]
        )

    asyncio.run(setup())
    try:
        yield made
    finally:
        made.close()


def _produce(topic: str) -> ProduceRequest:
    batch = build_batch([Record(0, 0, None, b"v")], base_timestamp=int(time.time() * 1000))
    return ProduceRequest(
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=bytearray(batch))],
            )
        ],
    )


def _produce_error(state: BrokerState, principal: str, topic: str, host: str = HOST) -> int:
    response = asyncio.run(handle_produce(as_principal(state, principal, 9, host), _produce(topic)))
    assert response is not None
    return int(response.responses[0].partition_responses[0].error_code)


def test_produce_is_decided_by_principal_and_host(state: BrokerState) -> None:
    assert _produce_error(state, "User:alice", "orders") == ErrorCode.NONE
    assert (
        _produce_error(state, "User:alice", "orders", host="10.0.0.2") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    )
    assert _produce_error(state, "User:bob", "orders") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert _produce_error(state, "User:alice", "secret") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert _produce_error(state, "User:admin", "secret") == ErrorCode.NONE  # a super user


def _metadata(state: BrokerState, principal: str, topics: list[str] | None) -> dict[str | None, int]:
    request = MetadataRequest(
        topics=None
        if topics is None
        else [MetadataRequest.MetadataRequestTopic(name=name) for name in topics],
        allow_auto_topic_creation=True,
    )
    response = asyncio.run(handle_metadata(as_principal(state, principal, 12), request))
    return {topic.name: topic.error_code for topic in response.topics}


def test_metadata_hides_what_the_principal_may_not_describe(state: BrokerState) -> None:
    assert _metadata(state, "User:alice", None) == {"orders": 0}  # WRITE implies DESCRIBE
    assert _metadata(state, "User:bob", None) == {}
    assert _metadata(state, "User:admin", None) == {"orders": 0, "secret": 0}
    refused = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert _metadata(state, "User:alice", ["secret", "not-there"]) == {
        "secret": refused,
        "not-there": refused,
    }
    assert "not-there" not in _metadata(state, "User:admin", None)  # nor was it auto-created


def _join(state: BrokerState, principal: str, group: str) -> Any:
    request = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    return asyncio.run(handle_join_group(as_principal(state, principal, 9), request))


def test_groups_need_read(state: BrokerState) -> None:
    assert _join(state, "User:bob", "billing").error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert _join(state, "User:alice", "other").error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    # Alice may: the request reaches the coordinator, which answers as it would without ACLs (here
    # NOT_COORDINATOR: no FindCoordinator has made __consumer_offsets yet).
    assert _join(state, "User:alice", "billing").error_code == ErrorCode.NOT_COORDINATOR


def test_acls_change_only_with_alter_on_the_cluster_and_take_effect_at_once(state: BrokerState) -> None:
    creation = CreateAclsRequest(
        creations=[
            CreateAclsRequest.AclCreation(
                resource_type=ResourceType.TOPIC,
                resource_name="secret",
                resource_pattern_type=PatternType.LITERAL,
                principal="User:bob",
                host="*",
                operation=AclOperation.WRITE,
                permission_type=AclPermissionType.ALLOW,
            )
        ]
    )
    refused = asyncio.run(handle_create_acls(as_principal(state, "User:bob", 3), creation))
    assert [result.error_code for result in refused.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    assert _produce_error(state, "User:bob", "secret") == ErrorCode.TOPIC_AUTHORIZATION_FAILED  # cached now
    created = asyncio.run(handle_create_acls(as_principal(state, "User:admin", 3), creation))
    assert [result.error_code for result in created.results] == [ErrorCode.NONE]
    assert _produce_error(state, "User:bob", "secret") == ErrorCode.NONE
    listing = DescribeAclsRequest(
        resource_type_filter=ResourceType.ANY,
        resource_name_filter=None,
        pattern_type_filter=PatternType.ANY,
        principal_filter="User:bob",
        host_filter=None,
        operation=AclOperation.ANY,
        permission_type=AclPermissionType.ANY,
    )
    described = asyncio.run(handle_describe_acls(as_principal(state, "User:admin", 3), listing))
    assert [(r.resource_name, len(r.acls)) for r in described.resources] == [("secret", 1)]


def test_without_an_authorizer_acl_requests_are_security_disabled(tmp_path: Path) -> None:
    state = BrokerState(BrokerConfig(host="127.0.0.1", port=0, data_dir=tmp_path / "data"), SystemClock())
    try:
        state.load()
        assert state.authorizer is None
        listing = DescribeAclsRequest(
            resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
        )
        response = asyncio.run(handle_describe_acls(as_principal(state, "User:alice", 3), listing))
        assert response.error_code == ErrorCode.SECURITY_DISABLED
    finally:
        state.close()


def test_auto_create_needs_create_besides_describe(state: BrokerState) -> None:
    assert state.acls is not None
    prefixed_read = AclBinding(
        ResourcePattern(ResourceType.TOPIC, "new-", PatternType.PREFIXED),
        AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW),
    )
    asyncio.run(state.acls.create([prefixed_read]))
    refused = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert _metadata(state, "User:alice", ["new-1"]) == {"new-1": refused}  # DESCRIBE, but no CREATE
    assert state.replication.topic("new-1") is None
    asyncio.run(
        state.acls.create([allow(ResourceType.CLUSTER, "kafka-cluster", "User:alice", AclOperation.CREATE)])
    )
    assert _metadata(state, "User:alice", ["new-1"]) == {"new-1": ErrorCode.NONE}
    assert state.replication.topic("new-1") is not None


def test_group_description_follows_describe(state: BrokerState) -> None:
    from strom.broker.handlers.groups import handle_describe_groups
    from strom.protocol.messages.describe_groups import DescribeGroupsRequest

    described = asyncio.run(
        handle_describe_groups(
            as_principal(state, "User:alice", 5),
            DescribeGroupsRequest(groups=["billing", "other"], include_authorized_operations=True),
        )
    )
    by_group = {group.group_id: group for group in described.groups}
    assert by_group["other"].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert by_group["billing"].error_code != ErrorCode.GROUP_AUTHORIZATION_FAILED
    # READ on the group: READ and DESCRIBE (implied) of the group's operations.
    assert by_group["billing"].authorized_operations == (1 << AclOperation.READ) | (
        1 << AclOperation.DESCRIBE
    )


def test_offset_fetch_needs_describe_on_the_group_only(state: BrokerState) -> None:
    """KIP-163: OffsetFetch reads nothing of the group's members, so DESCRIBE suffices (READ, which
    implies it, too); without either it is GROUP_AUTHORIZATION_FAILED."""
    from strom.broker.handlers.groups import handle_offset_fetch
    from strom.protocol.messages.offset_fetch import OffsetFetchRequest

    assert state.acls is not None
    asyncio.run(state.acls.create([allow(ResourceType.GROUP, "audit", "User:carol", AclOperation.DESCRIBE)]))

    def fetch(principal: str, group: str, version: int) -> int:
        if version >= 8:
            request = OffsetFetchRequest(groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group)])
            response = asyncio.run(handle_offset_fetch(as_principal(state, principal, version), request))
            return int(response.groups[0].error_code)
        request = OffsetFetchRequest(group_id=group, topics=None)
        response = asyncio.run(handle_offset_fetch(as_principal(state, principal, version), request))
        return int(response.error_code)

    for version in (7, 8):
        assert fetch("User:carol", "audit", version) != ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert fetch("User:alice", "billing", version) != ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert fetch("User:carol", "billing", version) == ErrorCode.GROUP_AUTHORIZATION_FAILED


def test_group_configs_need_describe_configs_and_alter_configs_on_the_group(state: BrokerState) -> None:
    group_resource = 32

    def describe(principal: str) -> int:
        request = DescribeConfigsRequest(
            resources=[
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=group_resource, resource_name="billing"
                )
            ]
        )
        response = asyncio.run(handle_describe_configs(as_principal(state, principal, 4), request))
        return int(response.results[0].error_code)

    def alter(principal: str) -> int:
        request = IncrementalAlterConfigsRequest(
            resources=[
                IncrementalAlterConfigsRequest.AlterConfigsResource(
                    resource_type=group_resource,
                    resource_name="billing",
                    configs=[
                        IncrementalAlterConfigsRequest.AlterableConfig(
                            name="consumer.session.timeout.ms", config_operation=0, value="50000"
                        )
                    ],
                )
            ]
        )
        response = asyncio.run(handle_incremental_alter_configs(as_principal(state, principal, 1), request))
        return int(response.responses[0].error_code)

    # Alice may READ the group (so DESCRIBE it), which is not DESCRIBE_CONFIGS.
    assert describe("User:alice") == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert alter("User:alice") == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert state.group_configs.overrides("billing") == {}

    async def grant() -> None:
        assert state.acls is not None
        await state.acls.create(
            [
                allow(ResourceType.GROUP, "billing", "User:alice", AclOperation.DESCRIBE_CONFIGS),
                allow(ResourceType.GROUP, "billing", "User:alice", AclOperation.ALTER_CONFIGS),
            ]
        )

    asyncio.run(grant())
    assert describe("User:alice") == ErrorCode.NONE
    assert alter("User:alice") == ErrorCode.NONE
    assert state.group_configs.overrides("billing") == {"consumer.session.timeout.ms": "50000"}


def test_reassignments_need_alter_and_describe_on_the_cluster(state: BrokerState) -> None:
    move = AlterPartitionReassignmentsRequest(
        topics=[
            AlterPartitionReassignmentsRequest.ReassignableTopic(
                name="orders",
                partitions=[
                    AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=0, replicas=[0])
                ],
            )
        ]
    )
    refused = asyncio.run(handle_alter_partition_reassignments(as_principal(state, "User:alice", 0), move))
    assert (refused.error_code, refused.responses) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    listing = ListPartitionReassignmentsRequest(topics=None)
    hidden = asyncio.run(handle_list_partition_reassignments(as_principal(state, "User:alice", 0), listing))
    assert hidden.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    moved = asyncio.run(handle_alter_partition_reassignments(as_principal(state, "User:admin", 0), move))
    assert moved.error_code == ErrorCode.NONE
    assert [(p.partition_index, p.error_code) for p in moved.responses[0].partitions] == [(0, ErrorCode.NONE)]
    listed = asyncio.run(handle_list_partition_reassignments(as_principal(state, "User:admin", 0), listing))
    assert (listed.error_code, listed.topics) == (ErrorCode.NONE, [])
