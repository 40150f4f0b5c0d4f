"""Partition reassignment (AlterPartitionReassignments, KIP-455) on the in-memory ZooKeeper: the
controller's writes in Kafka's order, what each broker is told, the end of a reassignment,
cancellation, refusals, a controller failover in the middle, and the topic znode's format."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from strom.cluster import znodes
from strom.cluster.actions import (
    AlterPartitionReply,
    OngoingReassignment,
    ReassignmentsListReply,
    ReassignmentsReply,
)
from strom.cluster.events import (
    AlterPartitionItem,
    AlterPartitionReceived,
    ReassignmentsListed,
    ReassignmentsReceived,
)
from strom.cluster.model import TopicAssignment, TopicPartition
from strom.protocol.errors import ErrorCode

from .harness import ClusterHarness

T0 = TopicPartition("t", 0)


def brokers(*node_ids: int) -> ClusterHarness:
    cluster = ClusterHarness()
    for node_id in node_ids:
        cluster.start(node_id)
    return cluster


def reassign(
    cluster: ClusterHarness, targets: dict[TopicPartition, tuple[int, ...] | None]
) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
    [reply] = cluster.handle(ReassignmentsReceived("r", targets))
    assert isinstance(reply, ReassignmentsReply) and reply.error is ErrorCode.NONE
    return dict(reply.results)


def ongoing(
    cluster: ClusterHarness, partitions: tuple[TopicPartition, ...] | None = None
) -> dict[TopicPartition, OngoingReassignment]:
    [reply] = cluster.handle(ReassignmentsListed("l", partitions))
    assert isinstance(reply, ReassignmentsListReply) and reply.error is ErrorCode.NONE
    return dict(reply.ongoing)


def assignment(cluster: ClusterHarness, topic: str = "t") -> TopicAssignment:
    found = cluster.reader.read_topic(topic)
    assert found is not None
    return found


def join_isr(cluster: ClusterHarness, tp: TopicPartition, isr: tuple[int, ...]) -> None:
    """The leader proposes ``isr`` (its new followers caught up), as AlterPartition."""
    state = cluster.state(tp.topic, tp.partition)
    leader = cluster.brokers[state.leader]
    topic_id = assignment(cluster, tp.topic).topic_id
    item = AlterPartitionItem(topic_id, tp.partition, state.leader_epoch, isr, state.version)
    [reply] = cluster.handle(AlterPartitionReceived("a", state.leader, leader.registration.epoch, (item,)))
    assert isinstance(reply, AlterPartitionReply) and reply.partitions[0].error is ErrorCode.NONE


def stopped(cluster: ClusterHarness, node_id: int, tp: TopicPartition) -> bool:
    return any(
        (stop.topic, stop.partition, stop.delete) == (tp.topic, tp.partition, True)
        for command in cluster.brokers[node_id].stop_replica()
        for stop in command.partitions
    )


def test_moving_a_replica_writes_the_assignment_then_tells_every_replica_then_ends_in_the_isr() -> None:
    cluster = brokers(1, 2, 3)
    cluster.create_topic("t", assignment={0: (1, 2)})
    before = cluster.state("t")
    assert reassign(cluster, {T0: (2, 3)}) == {T0: (ErrorCode.NONE, None)}
    # Written as Kafka writes it: target first, then the leaving replica; who joins and who leaves.
    written = assignment(cluster)
    assert (written.replicas[0], written.adding, written.removing) == ((2, 3, 1), {0: (3,)}, {0: (1,)})
    # The state was written again (the partition epoch moves, the leader epoch does not) so the
    # joining broker follows and the leader counts it.
    state = cluster.state("t")
    assert (state.leader, state.leader_epoch, state.isr) == (1, before.leader_epoch, (1, 2))
    assert state.version > before.version
    info = cluster.brokers[3].control.partitions[T0]
    assert (info.leader, info.replicas) == (1, (2, 3, 1))
    assert cluster.brokers[1].control.partitions[T0].replicas == (2, 3, 1)
    assert ongoing(cluster) == {T0: OngoingReassignment((2, 3, 1), (3,), (1,))}
    assert ongoing(cluster, (TopicPartition("t", 0), TopicPartition("other", 0))) == {
        T0: OngoingReassignment((2, 3, 1), (3,), (1,))
    }

    # Broker 3 caught up: the leader puts it in the ISR, and the reassignment ends. The leader is
    # leaving, so the first in-sync member of the target leads, in a new epoch.
    join_isr(cluster, T0, (1, 2, 3))
    state = cluster.state("t")
    assert (state.leader, state.leader_epoch, state.isr) == (2, before.leader_epoch + 1, (2, 3))
    done = assignment(cluster)
    assert (done.replicas[0], done.adding, done.removing) == ((2, 3), {}, {})
    assert stopped(cluster, 1, T0) and not stopped(cluster, 3, T0)
    assert T0 not in cluster.brokers[1].control.partitions
    assert cluster.brokers[3].control.partitions[T0].leader == 2
    assert cluster.brokers[1].control.metadata.partition(T0).replicas == (2, 3)  # type: ignore[union-attr]
    assert ongoing(cluster) == {}


def test_a_leader_that_stays_gets_a_new_epoch_and_a_shrink_ends_at_once() -> None:
    cluster = brokers(1, 2, 3)
    cluster.create_topic("t", assignment={0: (1, 2, 3)})
    # Only a replica leaving: nothing to wait for.
    assert reassign(cluster, {T0: (1, 2)}) == {T0: (ErrorCode.NONE, None)}
    state = cluster.state("t")
    assert (state.leader, state.leader_epoch, state.isr) == (1, 1, (1, 2))
    assert assignment(cluster).replicas[0] == (1, 2) and ongoing(cluster) == {}
    assert stopped(cluster, 3, T0)
    # Growing it again: broker 3 joins, the leader stays.
    reassign(cluster, {T0: (1, 2, 3)})
    assert ongoing(cluster) == {T0: OngoingReassignment((1, 2, 3), (3,), ())}
    join_isr(cluster, T0, (1, 2, 3))
    state = cluster.state("t")
    assert (state.leader, state.leader_epoch, state.isr) == (1, 2, (1, 2, 3))
    assert assignment(cluster).replicas[0] == (1, 2, 3) and ongoing(cluster) == {}


def test_a_new_order_of_the_same_replicas_changes_the_preferred_leader_only() -> None:
    cluster = brokers(1, 2, 3)
    cluster.create_topic("t", assignment={0: (1, 2, 3)})
    reassign(cluster, {T0: (3, 1, 2)})
    assert assignment(cluster).replicas[0] == (3, 1, 2) and ongoing(cluster) == {}
    assert cluster.state("t").leader == 1  # a preferred election moves it, not the reassignment


def test_cancelling_goes_back_to_the_original_replicas_and_stops_the_joining_ones() -> None:
    cluster = brokers(1, 2, 3, 4)
    cluster.create_topic("t", assignment={0: (1, 2)})
    reassign(cluster, {T0: (3, 4)})
    assert ongoing(cluster) == {T0: OngoingReassignment((3, 4, 1, 2), (3, 4), (1, 2))}
    join_isr(cluster, T0, (1, 2, 3))  # one of the two joined
    assert reassign(cluster, {T0: None}) == {T0: (ErrorCode.NONE, None)}
    assert ongoing(cluster) == {}
    back = assignment(cluster)
    assert (back.replicas[0], back.adding, back.removing) == ((1, 2), {}, {})
    # A new leader epoch fences the joining replica that was in the ISR; the leader hears of the
    # smaller replica set.
    state = cluster.state("t")
    assert (state.leader, state.leader_epoch, state.isr) == (1, 1, (1, 2))
    assert cluster.brokers[1].control.partitions[T0].replicas == (1, 2)
    assert stopped(cluster, 3, T0) and stopped(cluster, 4, T0)
    assert all(
        outcome.partition_errors.get(T0, ErrorCode.NONE) is ErrorCode.NONE
        for outcome in cluster.brokers[3].outcomes
    )
    assert not stopped(cluster, 1, T0) and not stopped(cluster, 2, T0)
    # Nothing left to cancel.
    assert reassign(cluster, {T0: None})[T0][0] is ErrorCode.NO_REASSIGNMENT_IN_PROGRESS


def test_changing_a_reassignment_in_progress_starts_from_the_original_replicas() -> None:
    cluster = brokers(1, 2, 3, 4)
    cluster.create_topic("t", assignment={0: (1, 2)})
    reassign(cluster, {T0: (1, 3)})
    assert ongoing(cluster) == {T0: OngoingReassignment((1, 3, 2), (3,), (2,))}
    reassign(cluster, {T0: (1, 4)})
    assert ongoing(cluster) == {T0: OngoingReassignment((1, 4, 2), (4,), (2,))}
    assert stopped(cluster, 3, T0)  # it was joining, and is no longer wanted: fenced
    assert cluster.state("t").leader_epoch == 1
    assert cluster.brokers[4].control.partitions[T0].replicas == (1, 4, 2)
    join_isr(cluster, T0, (1, 2, 4))
    state = cluster.state("t")
    assert assignment(cluster).replicas[0] == (1, 4) and state.isr == (1, 4)
    assert state.leader_epoch == 2  # the end fences broker 2, once


def test_refusals_are_per_partition() -> None:
    cluster = brokers(1, 2, 3)
    cluster.create_topic("t", assignment={0: (1, 2)})
    results = reassign(
        cluster,
        {
            TopicPartition("nope", 0): (1,),
            TopicPartition("t", 5): (1,),
            TopicPartition("t", 0): (1, 9),
        },
    )
    assert results[TopicPartition("nope", 0)][0] is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert results[TopicPartition("t", 5)][0] is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    error, message = results[T0]
    assert error is ErrorCode.INVALID_REPLICA_ASSIGNMENT and message is not None and "[9]" in message
    assert reassign(cluster, {T0: ()})[T0][0] is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert reassign(cluster, {T0: (2, 2)})[T0][0] is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert assignment(cluster).replicas[0] == (1, 2) and ongoing(cluster) == {}


def test_a_new_controller_resumes_a_reassignment_it_finds_in_zookeeper() -> None:
    cluster = brokers(1, 2, 3)
    cluster.create_topic("t", assignment={0: (2, 3)})
    reassign(cluster, {T0: (2, 1)})
    assert cluster.controller().node_id == 1
    cluster.crash(1)  # the controller, and the replica joining
    survivor = cluster.controller()
    assert survivor.node_id != 1
    assert ongoing(cluster) == {T0: OngoingReassignment((2, 1, 3), (1,), (3,))}
    # Broker 1 comes back (a new process), follows, and catches up.
    cluster.start(1)
    assert cluster.brokers[1].control.partitions[T0].replicas == (2, 1, 3)
    join_isr(cluster, T0, (2, 3, 1))
    assert assignment(cluster).replicas[0] == (2, 1) and ongoing(cluster) == {}
    assert cluster.state("t").isr == (2, 1)
    assert stopped(cluster, 3, T0)


def test_partitions_added_meanwhile_are_kept_and_the_reassignment_too() -> None:
    cluster = brokers(1, 2, 3)
    cluster.create_topic("t", assignment={0: (1, 2)})
    reassign(cluster, {T0: (1, 3)})
    # CreatePartitions from another broker: it rewrites the topic znode, keeping what it read.
    read = assignment(cluster)
    cluster.reader.add_partitions(dataclasses.replace(read, replicas={**read.replicas, 1: (2, 3)}))
    cluster.settle()
    grown = assignment(cluster)
    assert grown.replicas == {0: (1, 3, 2), 1: (2, 3)} and grown.adding == {0: (3,)}
    assert cluster.state("t", 1).leader == 2
    join_isr(cluster, T0, (1, 2, 3))
    done = assignment(cluster)
    assert done.replicas == {0: (1, 3), 1: (2, 3)} and (done.adding, done.removing) == ({}, {})


def test_a_change_of_replicas_made_by_hand_is_ignored() -> None:
    cluster = brokers(1, 2, 3)
    cluster.create_topic("t", assignment={0: (1, 2)})
    read = assignment(cluster)
    cluster.reader.add_partitions(dataclasses.replace(read, replicas={0: (3, 1)}))
    cluster.settle()
    assert cluster.brokers[3].control.partitions.get(T0) is None
    assert cluster.state("t").isr == (1, 2) and ongoing(cluster) == {}


def test_topic_znode_round_trip_with_a_reassignment() -> None:
    topic = TopicAssignment("t", uuid.uuid4(), {0: (2, 3, 1), 1: (1, 2)}, 4, {0: (3,)}, {0: (1,)})
    data = znodes.encode_topic(topic)
    assert (
        b'"adding_replicas": {"0": [3]}' in data.replace(b" ", b"").replace(b":", b": ") or b'"0":[3]' in data
    )
    assert znodes.decode_topic("t", data, 4) == topic
    # Kafka before 2.4 wrote neither key.
    old = (
        b'{"version":2,"topic_id":"'
        + znodes.uuid_to_string(topic.topic_id).encode()
        + b'","partitions":{"0":[1]}}'
    )
    assert znodes.decode_topic("t", old, 0).adding == {}
    bad = data.replace(b'"removing_replicas": {"0": [1]}', b'"removing_replicas": {"0": [7]}')
    bad = bad.replace(b'"removing_replicas":{"0":[1]}', b'"removing_replicas":{"0":[7]}')
    with pytest.raises(znodes.ZnodeFormatError, match="removing_replicas"):
        znodes.decode_topic("t", bad, 4)


def test_a_topic_deleted_during_its_reassignment_is_gone_and_nothing_is_listed() -> None:
    cluster = brokers(1, 2, 3)
    cluster.create_topic("t", assignment={0: (1, 2)})
    reassign(cluster, {T0: (2, 3)})
    cluster.reader.request_topic_deletion("t")
    cluster.settle()
    assert cluster.reader.read_topic("t") is None
    assert ongoing(cluster) == {}
    assert reassign(cluster, {T0: None})[T0][0] is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # Created again under the name: a topic of its own, not being reassigned.
    cluster.create_topic("t", assignment={0: (3, 1)})
    assert ongoing(cluster) == {} and cluster.state("t").leader == 3


def test_a_request_not_reaching_the_controller_is_refused_not_controller() -> None:
    cluster = brokers(1, 2)
    follower = cluster.brokers[2]
    before = len(cluster.replies)
    follower.driver.handle(ReassignmentsReceived("x", {T0: (1,)}))
    follower.driver.handle(ReassignmentsListed("y", None))
    refused = cluster.replies[before:]
    assert [type(reply) for reply in refused] == [ReassignmentsReply, ReassignmentsListReply]
    assert all(reply.error is ErrorCode.NOT_CONTROLLER for reply in refused)
