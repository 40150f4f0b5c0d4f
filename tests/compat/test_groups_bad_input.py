"""Bad group requests get the error Kafka gives, and the coordinator keeps serving everyone else.

A session timeout outside the broker's bounds is refused both to librdkafka (the error surfaces from
``poll()``) and to a raw JoinGroup; a raw member that joined and synced properly then sends an
OffsetCommit with a wrong generation, Heartbeats under unknown member ids and a wrong generation;
meanwhile a confluent-kafka group on the same broker consumes and commits as usual.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError

from strom.assignors import Assignment, Subscription, encode_assignment, encode_subscription
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from strom.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from strom.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from strom.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from tests.compat.conftest import BrokerProcess
from tests.compat.support import (
    confluent_produce,
    confluent_producer,
    create_topic,
    make_records,
    unique_topic,
)
from tests.compat.test_groups_helpers import (
    GROUP_BROKER_SETTINGS,
    ConfluentMember,
    all_partitions,
    assert_consumed_exactly_once,
    committed_offsets,
    end_offsets,
    wait_for_consumed,
    wait_until_stable,
)
from tests.compat.wire import WireClient

pytestmark = pytest.mark.compat

PARTITIONS = 2
SESSION_TIMEOUT_MIN_MS = 1_000
SESSION_TIMEOUT_MAX_MS = 60_000
RAW_SESSION_TIMEOUT_MS = 10_000
FIND_COORDINATOR_VERSION = 3
JOIN_VERSION = 5  # the last version before flexible encoding: exercises the classic layout
SYNC_VERSION = 5
HEARTBEAT_VERSION = 4
LEAVE_VERSION = 3
OFFSET_COMMIT_VERSION = 8
CLIENT_ERROR_TIMEOUT_S = 20.0


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return {
        **GROUP_BROKER_SETTINGS,
        "group.min.session.timeout.ms": str(SESSION_TIMEOUT_MIN_MS),
        "group.max.session.timeout.ms": str(SESSION_TIMEOUT_MAX_MS),
    }


@pytest.fixture(scope="module")
def topic(shared_broker: BrokerProcess) -> str:
    name = unique_topic("groups-bad")
    create_topic(shared_broker.bootstrap, name, PARTITIONS)
    return name


def _join_request(group: str, topic: str, session_timeout_ms: int, member_id: str = "") -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=session_timeout_ms,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[
            JoinGroupRequest.JoinGroupRequestProtocol(
                name="range", metadata=encode_subscription(Subscription([topic]))
            )
        ],
    )


def _join(client: WireClient, group: str, topic: str, session_timeout_ms: int) -> JoinGroupResponse:
    """FindCoordinator (as every client does first: until the coordinator partition is loaded the
    broker answers NOT_COORDINATOR, as Kafka does), then the two-step join of JoinGroup v4+:
    MEMBER_ID_REQUIRED hands out the id to join with."""
    found = client.round_trip(
        FindCoordinatorRequest(key=group), FindCoordinatorResponse, FIND_COORDINATOR_VERSION
    )
    assert (found.error_code, found.port) == (ErrorCode.NONE, client.sock.getpeername()[1])
    first: JoinGroupResponse = client.round_trip(
        _join_request(group, topic, session_timeout_ms), JoinGroupResponse, JOIN_VERSION
    )
    if first.error_code != ErrorCode.MEMBER_ID_REQUIRED:
        return first
    assert first.member_id, "MEMBER_ID_REQUIRED without a member id"
    second: JoinGroupResponse = client.round_trip(
        _join_request(group, topic, session_timeout_ms, first.member_id), JoinGroupResponse, JOIN_VERSION
    )
    return second


def _heartbeat(client: WireClient, group: str, generation_id: int, member_id: str) -> int:
    request = HeartbeatRequest(group_id=group, generation_id=generation_id, member_id=member_id)
    return int(client.round_trip(request, HeartbeatResponse, HEARTBEAT_VERSION).error_code)


def _commit(
    client: WireClient, group: str, topic: str, generation_id: int, member_id: str, offset: int
) -> int:
    request = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation_id,
        member_id=member_id,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset
                    )
                ],
            )
        ],
    )
    response = client.round_trip(request, OffsetCommitResponse, OFFSET_COMMIT_VERSION)
    [[error_code]] = [[partition.error_code for partition in result.partitions] for result in response.topics]
    return int(error_code)


def _assert_group_still_works(broker: BrokerProcess) -> None:
    """A confluent-kafka member on fresh connections joins, consumes and commits as usual."""
    group = unique_topic("bystander")
    topic = unique_topic("bystander")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    member = ConfluentMember(
        "bystander", broker.bootstrap, group, [topic], partition_assignment_strategy="range"
    )
    member.start()
    try:
        wait_until_stable([member], all_partitions(topic, PARTITIONS))
        sent = confluent_produce(confluent_producer(broker.bootstrap), topic, make_records(100, seed=5))
        wait_for_consumed([member], len(sent))
        assert_consumed_exactly_once([member], sent, topic)
        member.request_commit()
        assert member.commit_done.wait(30)
        assert not member.snapshot().errors
    finally:
        member.stop()
    committed = committed_offsets(broker.bootstrap, group, topic, PARTITIONS)
    assert committed == end_offsets(sent)


@pytest.mark.parametrize("session_timeout_ms", [SESSION_TIMEOUT_MIN_MS - 1, SESSION_TIMEOUT_MAX_MS + 1])
def test_raw_join_with_session_timeout_out_of_bounds_is_refused(
    shared_broker: BrokerProcess, topic: str, session_timeout_ms: int
) -> None:
    group = unique_topic("bad-session")
    with WireClient(shared_broker.port) as client:
        response = _join(client, group, topic, session_timeout_ms)
        assert response.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
        assert response.generation_id == -1
        # The same connection, within bounds, joins fine.
        accepted = _join(client, group, topic, RAW_SESSION_TIMEOUT_MS)
        assert accepted.error_code == ErrorCode.NONE
        assert accepted.generation_id >= 1
    _assert_group_still_works(shared_broker)


def test_librdkafka_sees_invalid_session_timeout(shared_broker: BrokerProcess, topic: str) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": shared_broker.bootstrap,
            "broker.address.family": "v4",
            "group.id": unique_topic("too-short"),
            "session.timeout.ms": SESSION_TIMEOUT_MIN_MS // 2,
            "heartbeat.interval.ms": 100,
        }
    )
    errors: list[int] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + CLIENT_ERROR_TIMEOUT_S
        while time.monotonic() < deadline and KafkaError.INVALID_SESSION_TIMEOUT not in errors:
            message = consumer.poll(0.2)
            error = message.error() if message is not None else None
            if error is not None:
                errors.append(error.code())
        assert KafkaError.INVALID_SESSION_TIMEOUT in errors, f"errors seen: {errors}"
        assert consumer.assignment() == []
    finally:
        consumer.close()


def test_wrong_generation_and_unknown_members_are_refused(shared_broker: BrokerProcess, topic: str) -> None:
    group = unique_topic("raw-member")
    with WireClient(shared_broker.port) as client:
        joined = _join(client, group, topic, RAW_SESSION_TIMEOUT_MS)
        assert joined.error_code == ErrorCode.NONE
        assert joined.leader == joined.member_id  # alone, so the leader
        assert [member.member_id for member in joined.members] == [joined.member_id]
        generation, member_id = joined.generation_id, joined.member_id
        assignment = encode_assignment(Assignment([(topic, 0), (topic, 1)]))
        synced = client.round_trip(
            SyncGroupRequest(
                group_id=group,
                generation_id=generation,
                member_id=member_id,
                protocol_type="consumer",
                protocol_name="range",
                assignments=[
                    SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_id, assignment=assignment)
                ],
            ),
            SyncGroupResponse,
            SYNC_VERSION,
        )
        assert (synced.error_code, synced.assignment) == (ErrorCode.NONE, assignment)

        assert _heartbeat(client, group, generation, member_id) == ErrorCode.NONE
        assert _heartbeat(client, group, generation, "no-such-member") == ErrorCode.UNKNOWN_MEMBER_ID
        assert _heartbeat(client, group, generation + 1, member_id) == ErrorCode.ILLEGAL_GENERATION

        assert _commit(client, group, topic, generation + 1, member_id, 7) == ErrorCode.ILLEGAL_GENERATION
        assert _commit(client, group, topic, generation - 1, member_id, 7) == ErrorCode.ILLEGAL_GENERATION
        assert _commit(client, group, topic, generation, "no-such-member", 7) == ErrorCode.UNKNOWN_MEMBER_ID
        assert committed_offsets(shared_broker.bootstrap, group, topic, PARTITIONS) == {0: -1001, 1: -1001}
        assert _commit(client, group, topic, generation, member_id, 7) == ErrorCode.NONE
        assert committed_offsets(shared_broker.bootstrap, group, topic, PARTITIONS) == {0: 7, 1: -1001}

        # The refused requests did not disturb the member: it still heartbeats, then leaves cleanly.
        assert _heartbeat(client, group, generation, member_id) == ErrorCode.NONE
        left = client.round_trip(
            LeaveGroupRequest(
                group_id=group, members=[LeaveGroupRequest.MemberIdentity(member_id=member_id)]
            ),
            LeaveGroupResponse,
            LEAVE_VERSION,
        )
        assert left.error_code == ErrorCode.NONE
        assert _heartbeat(client, group, generation, member_id) == ErrorCode.UNKNOWN_MEMBER_ID
    _assert_group_still_works(shared_broker)
