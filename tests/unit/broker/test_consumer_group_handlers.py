"""ConsumerGroupHeartbeat and ConsumerGroupDescribe handlers, in-process: the versions advertised,
the ACL checks Kafka makes before the coordinator sees a request, and what reaches it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from strom.broker.handlers.consumer_groups import (
    handle_consumer_group_describe,
    handle_consumer_group_heartbeat,
)
from strom.broker.state import BrokerState
from strom.protocol.acl import GROUP_OPERATIONS
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from strom.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from strom.protocol.messages.describe_groups import DescribeGroupsRequest
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.protocol.messages.heartbeat import HeartbeatRequest
from strom.protocol.messages.join_group import JoinGroupRequest
from strom.protocol.messages.list_groups import ListGroupsRequest
from strom.protocol.messages.offset_commit import OffsetCommitRequest
from strom.protocol.messages.offset_fetch import OffsetFetchRequest
from strom.security.acl import AclOperation, ResourceType
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_authorization import allow, as_principal, authorizing_state

GROUP = "kip848"
ALICE = "User:alice"


def join(
    group: str, topics: list[str] | None = None, regex: str | None = None
) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=str(uuid.uuid4()),
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=topics if topics is not None else ([] if regex is None else None),
        subscribed_topic_regex=regex,
        topic_partitions=[],
    )


def test_api_versions_advertise_the_consumer_group_protocol(broker: InProcessBroker) -> None:
    response = broker.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    advertised = {api.api_key: (api.min_version, api.max_version) for api in response.api_keys}
    assert advertised[ConsumerGroupHeartbeatRequest.API_KEY] == (0, 1)
    assert advertised[ConsumerGroupDescribeRequest.API_KEY] == (0, 0)
    assert advertised[OffsetCommitRequest.API_KEY] == (0, 9)
    assert advertised[OffsetFetchRequest.API_KEY] == (0, 9)
    assert advertised[ListGroupsRequest.API_KEY] == (0, 5)


def test_without_the_consumer_protocol_neither_api_is_served(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path / "data", {"group.coordinator.rebalance.protocols": "classic"})
    try:
        response = broker.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
        advertised = {api.api_key for api in response.api_keys}
        assert ConsumerGroupHeartbeatRequest.API_KEY not in advertised
        assert ConsumerGroupDescribeRequest.API_KEY not in advertised
    finally:
        broker.close()


def test_a_heartbeat_joins_and_describe_shows_the_member(broker: InProcessBroker) -> None:
    assert broker.call(FindCoordinatorRequest(key=GROUP), 1).error_code == ErrorCode.NONE
    request = join(GROUP, topics=["not-yet"])
    joined = broker.call(request, 1)
    assert joined.error_code == ErrorCode.NONE, joined
    assert joined.member_epoch >= 1
    assert joined.heartbeat_interval_ms == 5000  # group.consumer.heartbeat.interval.ms' default
    described = broker.call(ConsumerGroupDescribeRequest(group_ids=[GROUP, "nobody"]), 0)
    first, second = described.groups
    assert (first.group_id, first.error_code) == (GROUP, ErrorCode.NONE)
    [member] = first.members
    assert member.member_id == (joined.member_id or request.member_id)
    assert member.member_epoch == joined.member_epoch
    assert member.subscribed_topic_names == ["not-yet"]
    assert (second.group_id, second.error_code) == ("nobody", ErrorCode.GROUP_ID_NOT_FOUND)


# -- with authorization on -------------------------------------------------------------------------


@dataclass
class Secured:
    """A broker's state with authorization on, and the one event loop its requests run on."""

    state: BrokerState
    loop: asyncio.AbstractEventLoop


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    made = authorizing_state(tmp_path / "data")
    loop = asyncio.new_event_loop()

    async def setup() -> None:
        made.groups.start()
        made.groups.ensure_offsets_topic()
        for topic in ("orders", "secret"):
            await made.replication.create_topic(topic, 2, -1, {}, {}, validate_only=False)
        assert made.acls is not None
        await made.acls.create(
            [
                allow(ResourceType.GROUP, GROUP, ALICE, AclOperation.READ),
                allow(ResourceType.TOPIC, "orders", ALICE, AclOperation.DESCRIBE),
            ]
        )

    loop.run_until_complete(setup())
    try:
        yield Secured(made, loop)
    finally:
        made.close()
        loop.close()


def heartbeat(
    secured: Secured, principal: str, request: ConsumerGroupHeartbeatRequest
) -> ConsumerGroupHeartbeatResponse:
    context = as_principal(secured.state, principal, 1)
    return secured.loop.run_until_complete(handle_consumer_group_heartbeat(context, request))


def describe(
    secured: Secured, principal: str, request: ConsumerGroupDescribeRequest
) -> ConsumerGroupDescribeResponse:
    context = as_principal(secured.state, principal, 0)
    return secured.loop.run_until_complete(handle_consumer_group_describe(context, request))


def test_heartbeat_needs_read_on_the_group(secured: Secured) -> None:
    refused = heartbeat(secured, "User:mallory", join(GROUP, topics=["orders"]))
    assert refused.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    allowed = heartbeat(secured, ALICE, join(GROUP, topics=["orders"]))
    assert allowed.error_code == ErrorCode.NONE, allowed


def test_heartbeat_naming_a_topic_it_may_not_describe_is_refused(secured: Secured) -> None:
    refused = heartbeat(secured, ALICE, join(GROUP, topics=["orders", "secret"]))
    assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # A topic that does not exist is no different: the answer must not say which ones exist.
    refused = heartbeat(secured, ALICE, join(GROUP, topics=["orders", "no-such-topic"]))
    assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_describe_needs_describe_on_the_group_and_on_its_topics(secured: Secured) -> None:
    assert heartbeat(secured, ALICE, join(GROUP, topics=["orders"])).error_code == ErrorCode.NONE
    request = ConsumerGroupDescribeRequest(group_ids=[GROUP], include_authorized_operations=True)
    [refused] = describe(secured, "User:mallory", request).groups
    assert (refused.group_id, refused.error_code) == (GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    [seen] = describe(secured, ALICE, request).groups
    assert seen.error_code == ErrorCode.NONE and len(seen.members) == 1
    # READ implies DESCRIBE: alice may read and describe the group, nothing else.
    assert seen.authorized_operations == (1 << AclOperation.READ) | (1 << AclOperation.DESCRIBE)
    [everything] = describe(secured, "User:admin", request).groups
    assert everything.authorized_operations == GROUP_OPERATIONS
    # Once a member subscribes to a topic alice may not describe, she is told nothing of the members.
    admin_join = join(GROUP, topics=["secret"])
    assert heartbeat(secured, "User:admin", admin_join).error_code == ErrorCode.NONE
    [hidden] = describe(secured, ALICE, request).groups
    assert (hidden.error_code, hidden.members) == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, [])


def test_classic_requests_naming_a_consumer_group_get_the_coordinators_answer(
    broker: InProcessBroker,
) -> None:
    """The classic handlers pass the coordinator's answer through: a member of another protocol
    type cannot join, an unknown classic member is unknown, DescribeGroups does not describe it."""
    assert broker.call(FindCoordinatorRequest(key=GROUP), 1).error_code == ErrorCode.NONE
    assert broker.call(join(GROUP, topics=["t"]), 1).error_code == ErrorCode.NONE
    joined = broker.call(
        JoinGroupRequest(
            group_id=GROUP,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            protocol_type="connect",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="x", metadata=b"")],
        ),
        5,
    )
    assert joined.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    beat = broker.call(HeartbeatRequest(group_id=GROUP, generation_id=1, member_id="nobody"), 4)
    assert beat.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    [described] = broker.call(DescribeGroupsRequest(groups=[GROUP]), 5).groups
    assert described.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    listed = broker.call(ListGroupsRequest(types_filter=["consumer"]), 5)
    assert [(group.group_id, group.group_type) for group in listed.groups] == [(GROUP, "consumer")]
    assert broker.call(ListGroupsRequest(types_filter=["classic"]), 5).groups == []
