"""A consumer-protocol group (KIP-848, librdkafka's ``group.protocol=consumer``) on three real
brokers and a real ZooKeeper: the broker coordinating it is killed (kill -9) while it consumes;
the group is loaded by the broker that takes over its ``__consumer_offsets`` partition (from the
replicated ConsumerGroup* records), its members go on with their epochs, every partition owned by
exactly one of them, and they consume what is produced after the kill; the offsets committed
before it are still there.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from strom.cli.dev_cluster import LocalCluster
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from tests.compat.consumer_protocol_support import (
    CONSUMER_PROTOCOL_BROKER_SETTINGS,
    Ledger,
    ProtocolMember,
)
from tests.compat.support import confluent_produce, confluent_producer, make_records
from tests.compat.test_groups_helpers import assignments_are_complete, stop_all
from tests.compat.wire import WireClient

from .cluster_support import CLUSTER_SETTINGS, create_topic, live_bootstrap, wait_until

PARTITIONS = 6
FAILOVER_TIMEOUT_S = 60.0
# What a member's poll loop may report while its coordinator's broker is gone: the connection
# dropped, the coordinator moving. Anything else fails the test.
TRANSIENT_ERRORS = ("transport", "brokers are down", "coordinator", "disconnected", "timed out")


@pytest.fixture(scope="module")
def cluster_settings() -> dict[str, str]:
    return {**CLUSTER_SETTINGS, **CONSUMER_PROTOCOL_BROKER_SETTINGS}


@pytest.fixture
def members() -> Iterator[list[ProtocolMember]]:
    started: list[ProtocolMember] = []
    yield started
    stop_all(member for member in started if not member.closed.is_set())


def _live_port(cluster: LocalCluster) -> int:
    return next(broker.port for broker in cluster.brokers.values() if broker.running)


def coordinator_of(cluster: LocalCluster, group: str) -> tuple[int, int]:
    """(node id, port) of the group's coordinator, as a live broker says."""
    with WireClient(_live_port(cluster)) as client:
        found = client.round_trip(FindCoordinatorRequest(key=group), FindCoordinatorResponse, 1)
    assert found.error_code == ErrorCode.NONE, found
    return found.node_id, found.port


def described(cluster: LocalCluster, group: str) -> ConsumerGroupDescribeResponse.DescribedGroup | None:
    """The group as its coordinator describes it (None while there is none, or it is loading)."""
    try:
        _, port = coordinator_of(cluster, group)
        with WireClient(port) as client:
            response = client.round_trip(
                ConsumerGroupDescribeRequest(group_ids=[group]), ConsumerGroupDescribeResponse, 0
            )
    except (AssertionError, OSError):
        return None
    [found] = response.groups
    return found if found.error_code == ErrorCode.NONE else None


def lasting_errors(member: ProtocolMember) -> list[str]:
    return [
        error
        for error in member.snapshot().errors
        if not any(transient in error.lower() for transient in TRANSIENT_ERRORS)
    ]


def test_the_group_survives_its_coordinators_broker_being_killed(
    cluster: LocalCluster, members: list[ProtocolMember]
) -> None:
    topic = f"kip848-failover-{time.monotonic_ns()}"
    group = f"kip848-failover-group-{time.monotonic_ns()}"
    create_topic(cluster, topic, PARTITIONS)
    expected = {(topic, partition) for partition in range(PARTITIONS)}
    ledger = Ledger()
    for name in ("a", "b"):
        members.append(ProtocolMember(name, cluster.bootstrap, group, [topic], ledger).start())

    def complete() -> bool:
        return assignments_are_complete(
            [member.current_assignment() for member in members], expected, every_member_has_one=True
        )

    wait_until(complete, "both members share the topic", FAILOVER_TIMEOUT_S)
    before = confluent_produce(confluent_producer(cluster.bootstrap), topic, make_records(120))
    wait_until(
        lambda: sum(len(member.snapshot().records) for member in members) >= len(before),
        "records produced before the kill consumed",
        FAILOVER_TIMEOUT_S,
    )
    for member in members:
        member.request_commit()
    for member in members:
        assert member.commit_done.wait(30) and not member.snapshot().errors, member.snapshot().errors
    group_before = described(cluster, group)
    assert group_before is not None and len(group_before.members) == 2
    epochs_before = {member.member_id: member.member_epoch for member in group_before.members}

    coordinator, _ = coordinator_of(cluster, group)
    cluster.brokers[coordinator].kill()
    killed_at = time.monotonic()

    def taken_over() -> bool:
        found = described(cluster, group)
        return found is not None and len(found.members) == 2 and complete()

    wait_until(taken_over, "the group described by a new coordinator with both members", FAILOVER_TIMEOUT_S)
    new_coordinator, _ = coordinator_of(cluster, group)
    assert new_coordinator != coordinator
    group_after = described(cluster, group)
    assert group_after is not None
    # The same members, loaded from the replicated records: nobody had to join again.
    assert {member.member_id for member in group_after.members} == set(epochs_before)
    assert all(member.member_epoch >= epochs_before[member.member_id] for member in group_after.members)
    print(
        f"\nkill -9 of broker {coordinator}: group on broker {new_coordinator} after {time.monotonic() - killed_at:.1f} s"
    )

    after = confluent_produce(confluent_producer(live_bootstrap(cluster)), topic, make_records(120, seed=3))
    received = set[tuple[int, int]]()

    def all_after_received() -> bool:
        received.clear()
        received.update((r.partition, r.offset) for member in members for r in member.snapshot().records)
        return all((record.partition, record.offset) in received for record in after)

    wait_until(all_after_received, "records produced after the kill consumed", FAILOVER_TIMEOUT_S)
    assert not ledger.double_ownership(), ledger.double_ownership()[:5]
    for member in members:
        assert not lasting_errors(member), (member.name, lasting_errors(member)[:5])
    # What was committed before the kill is there (or later: the members committed since).
    reader = Consumer({"bootstrap.servers": live_bootstrap(cluster), "group.id": group})
    try:
        committed = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
    finally:
        reader.close()
    ends = {}
    for record in before:
        ends[record.partition] = max(ends.get(record.partition, 0), record.offset + 1)
    assert all(found.offset >= ends.get(found.partition, 0) for found in committed), committed
