"""The controller on the in-memory ZooKeeper: elections, ISR changes, fencing, admin operations."""

from __future__ import annotations

import dataclasses
import uuid

from strom.cluster import znodes
from strom.cluster.actions import (
    AlterPartitionReply,
    ControlledShutdownReply,
    ControllerWrite,
    ElectLeadersReply,
    LeaderAndIsrCommand,
    UpdateMetadataCommand,
    WriteOutcome,
)
from strom.cluster.config import ControllerConfig
from strom.cluster.controller import Controller
from strom.cluster.events import (
    Activated,
    AlterPartitionItem,
    AlterPartitionReceived,
    BrokersChanged,
    ControlledShutdownReceived,
    ElectionType,
    ElectLeadersReceived,
    Tick,
    WritesCompleted,
)
from strom.cluster.model import (
    LEADER_DURING_DELETE,
    NO_LEADER,
    ClusterSnapshot,
    TopicAssignment,
    TopicPartition,
)
from strom.cluster.zk_store import NoNodeError
from strom.cluster.zookeeper import ControllerMovedError
from strom.protocol.errors import ErrorCode

from .harness import ClusterHarness


def three_brokers(config: ControllerConfig | None = None) -> ClusterHarness:
    cluster = ClusterHarness(config)
    for node_id in (1, 2, 3):
        cluster.start(node_id)
    return cluster


def test_the_first_broker_becomes_controller_and_new_partitions_get_leaders() -> None:
    cluster = three_brokers()
    assert cluster.controller().node_id == 1
    cluster.create_topic("t", assignment={0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)})
    for partition, leader in ((0, 1), (1, 2), (2, 3)):
        state = cluster.state("t", partition)
        assert (state.leader, state.leader_epoch, state.version) == (leader, 0, 0)
        assert set(state.isr) == {1, 2, 3}
    # Each broker was told what it leads and follows, and every broker has the metadata.
    for broker in cluster.brokers.values():
        known = {tp: info for tp, info in broker.control.partitions.items()}
        assert len(known) == 3
        assert all(info.leader == info.replicas[0] for info in known.values())
        image = broker.control.metadata
        assert image.controller_id == 1 and sorted(image.brokers) == [1, 2, 3]
        assert image.leader(TopicPartition("t", 1)) == cluster.brokers[2].registration


def test_leader_failure_elects_the_next_isr_replica_in_assignment_order() -> None:
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (2, 3, 1)})
    cluster.crash(2)
    state = cluster.state("t")
    assert (state.leader, state.leader_epoch, state.isr) == (3, 1, (3, 1))
    follower = cluster.brokers[1].control.partitions[TopicPartition("t", 0)]
    assert (follower.leader, follower.leader_epoch) == (3, 1)
    assert cluster.brokers[1].control.metadata.offline_replicas(follower) == (2,)


def test_follower_failure_shrinks_the_isr_without_a_new_leader_epoch() -> None:
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (1, 2, 3)})
    cluster.crash(3)
    state = cluster.state("t")
    assert (state.leader, state.leader_epoch, state.isr, state.version) == (1, 0, (1, 2), 1)
    leader_view = cluster.brokers[1].control.partitions[TopicPartition("t", 0)]
    assert (leader_view.isr, leader_view.partition_epoch) == ((1, 2), 1), "the leader heard of it at once"


def test_controller_failover_keeps_states_and_the_new_controller_tells_everyone() -> None:
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (2, 3, 1)})
    before = cluster.state("t")
    sent_before = len(cluster.brokers[3].commands)
    cluster.crash(1)
    assert cluster.controller().node_id in (2, 3)
    assert cluster.reader.read_controller_epoch() == (2, 2)  # created at 0, then two elections
    after = cluster.state("t")
    assert (after.leader, after.leader_epoch) == (before.leader, before.leader_epoch)
    assert after.isr == (2, 3)
    fresh = cluster.brokers[3].commands[sent_before:]
    full = [c for c in fresh if isinstance(c, LeaderAndIsrCommand) and c.full]
    assert full and full[0].controller_epoch == 2
    assert cluster.brokers[3].control.controller_epoch == 2


def test_all_isr_members_gone_leaves_the_partition_offline_without_unclean_election() -> None:
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (1, 2, 3)})
    cluster.crash(3)  # leaves the ISR
    cluster.crash(2)
    assert cluster.state("t").isr == (1,)
    cluster.start(3)
    cluster.crash(1)
    state = cluster.state("t")
    assert (state.leader, state.isr) == (NO_LEADER, (1,)), "3 is live but not in the ISR: offline"
    assert cluster.controller().driver.controller.offline_partitions() == [TopicPartition("t", 0)]
    assert cluster.unclean == []
    cluster.start(1)
    state = cluster.state("t")
    assert (state.leader, state.isr) == (1, (1,)), "the last ISR member returns and leads cleanly"
    epochs = [epoch for epoch, _ in cluster.epochs_and_leaders(TopicPartition("t", 0))]
    assert epochs == sorted(epochs)


def test_unclean_election_when_enabled_is_reported() -> None:
    cluster = three_brokers(
        ControllerConfig(unclean_leader_election_enable=True, auto_leader_rebalance_enable=False)
    )
    cluster.create_topic("t", assignment={0: (1, 2, 3)})
    cluster.crash(3)
    cluster.crash(2)
    cluster.start(3)
    cluster.crash(1)
    state = cluster.state("t")
    assert (state.leader, state.isr) == (3, (3,))
    assert [(u.topic_partition, u.leader) for u in cluster.unclean] == [(TopicPartition("t", 0), 3)]


def test_unclean_election_per_topic_override_and_by_elect_leaders() -> None:
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (1, 2)}, config={"unclean.leader.election.enable": "true"})
    cluster.create_topic("u", assignment={0: (1, 2)})
    cluster.crash(2)
    cluster.start(2)  # back, but out of the ISR of both
    cluster.crash(1)
    assert cluster.state("t").leader == 2, "the topic override allows it"
    assert cluster.state("u").leader == NO_LEADER
    [reply] = cluster.handle(ElectLeadersReceived("k", ElectionType.UNCLEAN, (TopicPartition("u", 0),)))
    assert isinstance(reply, ElectLeadersReply)
    assert reply.results == {TopicPartition("u", 0): ErrorCode.NONE}
    assert cluster.state("u").leader == 2
    [again] = cluster.handle(ElectLeadersReceived("k2", ElectionType.UNCLEAN, (TopicPartition("u", 0),)))
    assert again.results == {TopicPartition("u", 0): ErrorCode.ELECTION_NOT_NEEDED}  # type: ignore[union-attr]


def test_broker_expiry_during_an_election() -> None:
    """The elected broker dies while the controller's write for it is in flight: the controller
    adopts the written state, sees the leader gone, and elects again with a higher epoch."""
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (3, 2, 1)})
    ctl = cluster.controller()
    assert ctl.node_id == 1
    core = ctl.driver.controller
    lease = ctl.driver.lease
    assert lease is not None
    live = cluster.reader.read_live_brokers()
    # Broker 3 (the leader) dies: the controller decides on broker 2, but its write is held back.
    core.step(BrokersChanged({1: live[1], 2: live[2]}))
    ready = core.ready()
    [write] = ready.writes
    # Broker 2 dies too before the write completes.
    core.step(BrokersChanged({1: live[1]}))
    assert core.ready().writes == [], "the partition is busy: no second write while one is in flight"
    outcomes = ctl.zk.apply_controller_writes(lease, [write])
    core.step(WritesCompleted(tuple(outcomes)))
    ready = core.ready()
    [rewrite] = ready.writes
    outcomes = ctl.zk.apply_controller_writes(lease, [rewrite])
    core.step(WritesCompleted(tuple(outcomes)))
    core.ready()
    state = cluster.state("t")
    assert (state.leader, state.leader_epoch, state.isr) == (1, 2, (1,))


def test_a_deposed_controller_is_fenced_in_zookeeper_and_by_brokers() -> None:
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (2, 3, 1)})
    old = cluster.controller()
    old_lease = old.driver.lease
    assert old_lease is not None and old_lease.epoch == 1
    old_core = Controller(old.node_id, cluster.config, cluster.clock)
    old_core.step(Activated(old_lease.epoch, old_lease.epoch_version, cluster.reader.read_snapshot()))
    stale_commands = old_core.ready().commands
    cluster.expire(old.node_id)  # paused past its session: someone else takes over
    cluster.settle()
    new = cluster.controller()
    assert new.driver.lease is not None and new.driver.lease.epoch == 2
    # The zombie acts on its stale view: broker 2 "died".
    live = cluster.reader.read_live_brokers()
    old_core.step(BrokersChanged({1: live[1], 3: live[3]}))
    writes = old_core.ready().writes
    assert writes, "the zombie wants to elect a new leader"
    try:
        old.zk.apply_controller_writes(old_lease, writes)
        raise AssertionError("the zombie's write went through")
    except ControllerMovedError:
        pass
    assert cluster.state("t").leader == 2, "ZooKeeper unchanged"
    # Brokers refuse the zombie's commands: they have seen epoch 2.
    for command in stale_commands:
        if isinstance(command, LeaderAndIsrCommand) and command.broker_id == 3:
            command = LeaderAndIsrCommand(
                3, cluster.brokers[3].registration.epoch, 1, 1, command.partitions, command.leaders
            )
            outcome = cluster.brokers[3].control.on_leader_and_isr(command)
            assert outcome.error is ErrorCode.STALE_CONTROLLER_EPOCH


def test_alter_partition_shrinks_and_expands_the_isr() -> None:
    cluster = three_brokers()
    topic = cluster.create_topic("t", assignment={0: (1, 2, 3)})
    leader = cluster.brokers[1]
    state = cluster.state("t")
    shrink = AlterPartitionReceived(
        "a", 1, leader.registration.epoch, (AlterPartitionItem(topic.topic_id, 0, 0, (1, 2), state.version),)
    )
    [reply] = cluster.handle(shrink)
    assert isinstance(reply, AlterPartitionReply) and reply.error is ErrorCode.NONE
    [result] = reply.partitions
    assert (result.error, result.isr, result.leader_epoch, result.partition_epoch) == (
        ErrorCode.NONE,
        (1, 2),
        0,
        1,
    )
    assert cluster.state("t").isr == (1, 2)
    assert cluster.brokers[3].control.metadata.partition(TopicPartition("t", 0)).isr == (1, 2)  # type: ignore[union-attr]
    # The same request again is now stale.
    [stale] = cluster.handle(shrink)
    assert stale.partitions[0].error is ErrorCode.INVALID_UPDATE_VERSION  # type: ignore[union-attr]
    expand = AlterPartitionReceived(
        "b", 1, leader.registration.epoch, (AlterPartitionItem(topic.topic_id, 0, 0, (1, 2, 3), 1),)
    )
    [grown] = cluster.handle(expand)
    assert grown.partitions[0].isr == (1, 2, 3)  # type: ignore[union-attr]


def test_alter_partition_refusals() -> None:
    cluster = three_brokers()
    topic = cluster.create_topic("t", assignment={0: (1, 2, 3)})
    epoch_of = {node_id: broker.registration.epoch for node_id, broker in cluster.brokers.items()}

    def ask(broker_id: int, item: AlterPartitionItem, broker_epoch: int | None = None) -> AlterPartitionReply:
        [reply] = cluster.handle(
            AlterPartitionReceived(
                "k", broker_id, epoch_of[broker_id] if broker_epoch is None else broker_epoch, (item,)
            )
        )
        assert isinstance(reply, AlterPartitionReply)
        return reply

    item = AlterPartitionItem(topic.topic_id, 0, 0, (1, 2), 0)
    assert ask(1, item, broker_epoch=epoch_of[1] + 1000).error is ErrorCode.STALE_BROKER_EPOCH
    assert ask(2, item).partitions[0].error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (
        ask(1, AlterPartitionItem(topic.topic_id, 0, 7, (1, 2), 0)).partitions[0].error
        is ErrorCode.FENCED_LEADER_EPOCH
    )
    assert (
        ask(1, AlterPartitionItem(uuid.uuid4(), 0, 0, (1,), 0)).partitions[0].error
        is ErrorCode.UNKNOWN_TOPIC_ID
    )
    assert (
        ask(1, AlterPartitionItem(topic.topic_id, 0, 0, (2, 3), 0)).partitions[0].error
        is ErrorCode.INVALID_REQUEST
    )
    assert ask(1, AlterPartitionItem(topic.topic_id, 0, 0, (1,), 0)).partitions[0].error is ErrorCode.NONE
    cluster.crash(3)
    state = cluster.state("t")
    refused = ask(1, AlterPartitionItem(topic.topic_id, 0, 0, (1, 3), state.version))
    assert refused.partitions[0].error is ErrorCode.INELIGIBLE_REPLICA, "a gone broker cannot join"
    assert (
        ask(1, AlterPartitionItem(topic.topic_id, 0, 0, state.isr, state.version)).partitions[0].error
        is ErrorCode.NONE
    )


def test_controlled_shutdown_moves_leaderships_away() -> None:
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (2, 1, 3), 1: (1, 2, 3), 2: (2, 3, 1)})
    cluster.create_topic("solo", assignment={0: (2,)})
    [reply] = cluster.handle(ControlledShutdownReceived("s", 2, cluster.brokers[2].registration.epoch))
    assert isinstance(reply, ControlledShutdownReply)
    assert (reply.error, reply.remaining) == (ErrorCode.NONE, ()), (
        "an RF=1 partition cannot move and is not counted"
    )
    for partition in range(3):
        state = cluster.state("t", partition)
        assert state.leader != 2 and 2 not in state.isr
    assert cluster.state("t", 0).leader == 1 and cluster.state("t", 2).leader == 3
    assert cluster.state("solo").leader == 2
    # A broker shutting down is not given leadership back by a preferred election.
    [elect] = cluster.handle(ElectLeadersReceived("e", ElectionType.PREFERRED, (TopicPartition("t", 0),)))
    assert elect.results == {TopicPartition("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}  # type: ignore[union-attr]
    [stale] = cluster.handle(ControlledShutdownReceived("s2", 2, 12345))
    assert stale.error is ErrorCode.STALE_BROKER_EPOCH  # type: ignore[union-attr]


def test_controlled_shutdown_with_no_other_isr_member_reports_remaining_partitions() -> None:
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (2, 3)})
    cluster.crash(3)
    [reply] = cluster.handle(ControlledShutdownReceived("s", 2, cluster.brokers[2].registration.epoch))
    assert reply.remaining == (TopicPartition("t", 0),)  # type: ignore[union-attr]
    assert cluster.state("t").leader == 2


def test_preferred_leader_election_and_auto_rebalance() -> None:
    cluster = three_brokers(ControllerConfig(leader_imbalance_check_interval_ms=1_000))
    cluster.create_topic("t", assignment={0: (3, 2, 1), 1: (3, 1, 2)})
    cluster.crash(3)
    assert {cluster.state("t", p).leader for p in (0, 1)} == {1, 2}
    cluster.start(3)
    for p in (0, 1):  # the followers catch up and the leader adds 3 back
        state = cluster.state("t", p)
        topic_id = cluster.reader.read_topic("t").topic_id  # type: ignore[union-attr]
        cluster.handle(
            AlterPartitionReceived(
                "x",
                state.leader,
                cluster.brokers[state.leader].registration.epoch,
                (AlterPartitionItem(topic_id, p, state.leader_epoch, (*state.isr, 3), state.version),),
            )
        )
    [reply] = cluster.handle(ElectLeadersReceived("e", ElectionType.PREFERRED, (TopicPartition("t", 0),)))
    assert reply.results == {TopicPartition("t", 0): ErrorCode.NONE}  # type: ignore[union-attr]
    assert cluster.state("t", 0).leader == 3 and cluster.state("t", 0).leader_epoch == 2
    [again] = cluster.handle(ElectLeadersReceived("e", ElectionType.PREFERRED, None))
    assert again.results[TopicPartition("t", 0)] is ErrorCode.ELECTION_NOT_NEEDED  # type: ignore[union-attr]
    assert again.results[TopicPartition("t", 1)] is ErrorCode.NONE  # type: ignore[union-attr]
    # Auto rebalance: knock 3 off again and let the timer bring it back.
    cluster.crash(3)
    cluster.start(3)
    for p in (0, 1):
        state = cluster.state("t", p)
        topic_id = cluster.reader.read_topic("t").topic_id  # type: ignore[union-attr]
        cluster.handle(
            AlterPartitionReceived(
                "x",
                state.leader,
                cluster.brokers[state.leader].registration.epoch,
                (AlterPartitionItem(topic_id, p, state.leader_epoch, (*state.isr, 3), state.version),),
            )
        )
    assert {cluster.state("t", p).leader for p in (0, 1)} != {3}
    cluster.tick(999)
    assert {cluster.state("t", p).leader for p in (0, 1)} != {3}, "not due yet"
    cluster.tick(1_000)
    assert {cluster.state("t", p).leader for p in (0, 1)} == {3}


def test_topic_deletion_stops_replicas_and_removes_the_znodes() -> None:
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (1, 2, 3), 1: (2, 3, 1)})
    cluster.crash(3)
    cluster.reader.request_topic_deletion("t")
    cluster.settle()
    assert cluster.reader.read_topic_names() == []
    assert cluster.reader.read_topics_to_delete() == frozenset()
    assert not [p for p in cluster.server.dump() if p.startswith("/cluster/config/topics/t")]
    for node_id in (1, 2):
        broker = cluster.brokers[node_id]
        stops = [stop for command in broker.stop_replica() for stop in command.partitions]
        assert {(stop.topic, stop.partition, stop.delete) for stop in stops} == {
            ("t", 0, True),
            ("t", 1, True),
        }
        assert broker.control.metadata.topic("t") is None
        deleted = [
            info
            for command in broker.commands
            if isinstance(command, UpdateMetadataCommand)
            for info in command.partitions
            if info.leader == LEADER_DURING_DELETE
        ]
        assert {info.partition for info in deleted} == {0, 1}
    # The dead broker learns at its return: its full LeaderAndIsr no longer lists the topic.
    cluster.start(3)
    full = [c for c in cluster.brokers[3].leader_and_isr() if c.full][-1]
    assert full.partitions == ()
    # The name can be used again: a new topic id.
    again = cluster.create_topic("t", assignment={0: (1,)})
    assert cluster.state("t").leader == 1
    assert cluster.brokers[1].control.partitions[TopicPartition("t", 0)].topic_id == again.topic_id


def test_a_deleted_topic_is_not_brought_back_by_a_view_read_before_its_deletion() -> None:
    """Found by a chaos campaign with reassignments: a topic deleted, then another topic's znode
    written (CreatePartitions, a reassignment) before the topics watch was read. That topic's watch
    gave the controller the driver's whole map, still naming the deleted topic: the controller took
    it for a new one, and the create of its partition state failed NoNode and was retried at once,
    forever, inside one handle() (no Tick, no request answered)."""
    cluster = three_brokers()
    cluster.create_topic("main", assignment={0: (1, 2, 3)})
    cluster.create_topic("scratch", assignment={0: (1, 2, 3)})
    controller = cluster.controller()
    writes: list[str] = []
    apply = controller.zk.apply_controller_writes

    def counted(lease: object, batch: list[ControllerWrite]) -> list[WriteOutcome]:
        writes.extend(write.key for write in batch)
        assert len(writes) < 100, f"the controller spins: {writes[-3:]}"
        return apply(lease, batch)  # type: ignore[arg-type]

    controller.zk.apply_controller_writes = counted  # type: ignore[method-assign]
    cluster.reader.request_topic_deletion("scratch")
    main = cluster.reader.read_topic("main")
    assert main is not None
    # CreatePartitions of "main", before the deletion's notification is read: its watch fires too.
    cluster.reader.add_partitions(dataclasses.replace(main, replicas={**main.replicas, 1: (2, 3, 1)}))
    cluster.settle()
    assert "partition/scratch/0" not in writes
    assert controller.driver.controller.topic("scratch") is None
    assert cluster.state("main", 1).leader == 2
    # The name can still be used again (another topic id).
    cluster.create_topic("scratch", assignment={0: (3,)})
    assert cluster.state("scratch").leader == 3


def test_a_state_write_finding_its_topic_gone_is_tried_again_at_the_next_tick_only() -> None:
    cluster = three_brokers()
    controller = Controller(1, ControllerConfig(), cluster.clock)
    brokers = {node_id: broker.registration for node_id, broker in cluster.brokers.items()}
    topic = TopicAssignment("t", uuid.uuid4(), {0: (1, 2)}, 0)
    controller.step(Activated(1, 0, ClusterSnapshot(brokers, {"t": topic}, {})))
    [create] = controller.ready().writes
    missing = WriteOutcome(create.key, error=NoNodeError("parent gone"), current=None)
    controller.step(WritesCompleted((missing,)))
    assert controller.ready().writes == []  # not at once
    controller.step(Tick())
    assert [write.key for write in controller.ready().writes] == [create.key]


def test_deletion_of_an_unknown_topic_just_clears_the_marker() -> None:
    cluster = three_brokers()
    cluster.reader.request_topic_deletion("nothing")
    cluster.settle()
    assert cluster.reader.read_topics_to_delete() == frozenset()


def test_create_partitions_adds_states_for_the_new_partitions() -> None:
    cluster = three_brokers()
    topic = cluster.create_topic("t", assignment={0: (1, 2)})
    current = cluster.reader.read_topic("t")
    assert current is not None
    grown = type(topic)("t", topic.topic_id, {0: (1, 2), 1: (2, 3), 2: (3, 1)}, current.version)
    cluster.reader.add_partitions(grown)
    cluster.settle()
    assert [cluster.state("t", p).leader for p in (0, 1, 2)] == [1, 2, 3]
    assert TopicPartition("t", 2) in cluster.brokers[3].control.partitions


def test_a_partition_without_live_replicas_gets_its_state_when_one_arrives() -> None:
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (4,)})
    assert cluster.reader.read_partition_states([cluster.reader.read_topic("t")]) == {}  # type: ignore[list-item]
    cluster.start(4)
    assert cluster.state("t").leader == 4


def test_a_bounced_broker_is_handled_as_gone_then_back() -> None:
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (2, 1, 3)})
    controller = cluster.controller()
    core = controller.driver.controller
    live = cluster.reader.read_live_brokers()
    bounced = live[2].with_epoch(live[2].epoch + 1000)
    core.step(BrokersChanged({1: live[1], 2: bounced, 3: live[3]}))
    ready = core.ready()
    [write] = ready.writes
    assert not [c for c in ready.commands if isinstance(c, LeaderAndIsrCommand) and c.broker_id == 2], (
        "no full LeaderAndIsr while one of its partitions is changing"
    )
    outcomes = controller.zk.apply_controller_writes(controller.driver.lease, [write])  # type: ignore[arg-type]
    core.step(WritesCompleted(tuple(outcomes)))
    state = core.partition_state(TopicPartition("t", 0))
    assert state is not None and state.leader == 1 and state.leader_epoch == 1
    [full] = [c for c in core.ready().commands if isinstance(c, LeaderAndIsrCommand) and c.broker_id == 2]
    assert full.full and full.broker_epoch == bounced.epoch
    [info] = full.partitions
    assert (info.leader, info.leader_epoch) == (1, 1), "the restarted broker follows the new leader"


def test_requests_to_a_broker_that_is_not_the_controller_get_not_controller() -> None:
    core = Controller(1, ControllerConfig(), ClusterHarness().clock)
    core.step(ControlledShutdownReceived("k", 2, 1))
    core.step(ElectLeadersReceived("e", ElectionType.PREFERRED, None))
    core.step(AlterPartitionReceived("a", 2, 1, ()))
    assert [reply.error for reply in core.ready().replies] == [ErrorCode.NOT_CONTROLLER] * 3


def test_a_write_conflict_adopts_what_zookeeper_holds() -> None:
    cluster = three_brokers()
    cluster.create_topic("t", assignment={0: (1, 2, 3)})
    controller = cluster.controller()
    core = controller.driver.controller
    live = cluster.reader.read_live_brokers()
    core.step(BrokersChanged({1: live[1], 2: live[2]}))
    [write] = core.ready().writes
    # Someone edits the state behind the controller's back (an operator, say).
    path = znodes.partition_state_path("t", 0)
    data, stat = cluster.reader.store.get(path)
    cluster.reader.store.set(path, data, stat.version)
    outcomes = controller.zk.apply_controller_writes(controller.driver.lease, [write])  # type: ignore[arg-type]
    assert isinstance(outcomes[0], WriteOutcome) and not outcomes[0].ok
    core.step(WritesCompleted(tuple(outcomes)))
    [retry] = core.ready().writes
    assert isinstance(retry, ControllerWrite)
    outcomes = controller.zk.apply_controller_writes(controller.driver.lease, [retry])  # type: ignore[arg-type]
    core.step(WritesCompleted(tuple(outcomes)))
    assert cluster.state("t").isr == (1, 2)
