"""The replication and controller figures of a broker of a cluster (``/metrics``), computed from the
replica state of the partitions it leads and follows and from the controller's metadata image:
under-replicated, under and at min ISR, offline partitions, the active controller, preferred
replica imbalance, ISR shrinks and expands, the replica fetcher's lag. No sockets: real partition
logs, a manual clock, and the pure replica and metadata objects."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from strom.base.clock import ManualClock
from strom.broker.cluster.fetcher import FollowedPartition, ReplicaFetcher
from strom.broker.cluster.partitions import PartitionRoles
from strom.broker.metrics import ReplicationGauges, cluster_replication_gauges
from strom.broker.replication import ReadAccess
from strom.cluster.actions import PartitionInfo, UpdateMetadataCommand
from strom.cluster.config import ReplicationConfig
from strom.cluster.metadata_image import MetadataImage
from strom.cluster.model import NO_LEADER, BrokerRegistration, Endpoint, TopicPartition
from strom.cluster.replica import PartitionFollower, PartitionLeader
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.fetch import FetchResponse
from strom.storage.config import LogConfig
from strom.storage.partition_log import PartitionLog
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import create_topic
from tests.unit.broker.test_metrics import scrape, value

from ..storage.helpers import make_batch

TOPIC_ID = uuid.uuid4()


def leader(partition: int, isr: tuple[int, ...], min_insync_replicas: int) -> PartitionLeader:
    return PartitionLeader(
        TopicPartition("t", partition),
        1,
        leader_epoch=0,
        partition_epoch=0,
        replicas=(1, 2, 3),
        isr=isr,
        log_end_offset=0,
        high_watermark=0,
        min_insync_replicas=min_insync_replicas,
        replica_lag_time_max_ms=30_000,
        now_ms=0,
    )


def broker(node_id: int) -> BrokerRegistration:
    return BrokerRegistration(
        node_id, "127.0.0.1", 9091 + node_id, (Endpoint("PLAINTEXT", "127.0.0.1", 9091 + node_id),)
    )


def image(live: tuple[int, ...], leaders: dict[tuple[str, int], int]) -> MetadataImage:
    metadata = MetadataImage()
    topic_ids = {topic: uuid.uuid4() for topic, _ in leaders}
    metadata.apply(
        UpdateMetadataCommand(
            broker_id=1,
            broker_epoch=1,
            controller_id=1,
            controller_epoch=1,
            partitions=tuple(
                PartitionInfo(topic, partition, topic_ids[topic], leader_id, 0, (1, 2, 3), 0, (1, 2, 3), 1)
                for (topic, partition), leader_id in leaders.items()
            ),
            live_brokers=tuple(broker(node_id) for node_id in live),
        )
    )
    return metadata


def test_a_broker_counts_the_partitions_it_leads_by_their_isr() -> None:
    leaders = [
        leader(0, (1, 2, 3), 2),  # whole
        leader(1, (1, 2), 2),  # under-replicated, at min ISR
        leader(2, (1,), 2),  # under-replicated, under min ISR
        leader(3, (1, 3), 1),  # under-replicated only
    ]
    gauges = cluster_replication_gauges(
        leaders,
        5,
        MetadataImage(),
        is_controller=False,
        isr_changes_total={"shrink": 4, "expand": 1},
        replica_max_lag=17,
        unclean_leader_elections=0,
    )
    assert gauges == ReplicationGauges(
        partitions=9,
        leaders=4,
        under_replicated=3,
        under_min_isr=1,
        at_min_isr=1,
        offline_partitions=0,
        active_controller=0,
        global_topics=0,
        global_partitions=0,
        preferred_replica_imbalance=0,
        isr_shrinks=4,
        isr_expands=1,
        replica_max_lag=17,
        unclean_leader_elections=0,
    )


def test_only_the_controller_reports_offline_partitions_and_the_cluster_totals() -> None:
    # Broker 3 is gone: the partition it led is offline until the controller elects another;
    # a partition without any leader is offline; one led by its second replica is imbalanced.
    metadata = image(
        (1, 2),
        {("a", 0): 1, ("a", 1): 3, ("a", 2): NO_LEADER, ("b", 0): 2, ("b", 1): 1},
    )
    controller = cluster_replication_gauges(
        [],
        0,
        metadata,
        is_controller=True,
        isr_changes_total={},
        replica_max_lag=0,
        unclean_leader_elections=2,
    )
    assert controller.active_controller == 1
    assert (controller.global_topics, controller.global_partitions) == (2, 5)
    assert controller.offline_partitions == 2
    assert controller.preferred_replica_imbalance == 1  # b-0: led by 2, preferred 1
    assert controller.unclean_leader_elections == 2
    other = cluster_replication_gauges(
        [],
        0,
        metadata,
        is_controller=False,
        isr_changes_total={},
        replica_max_lag=0,
        unclean_leader_elections=2,  # made while it was controller: a counter never goes back
    )
    assert (other.active_controller, other.offline_partitions, other.global_partitions) == (0, 0, 0)
    assert other.unclean_leader_elections == 2


def roles(clock: ManualClock) -> PartitionRoles:
    return PartitionRoles(
        1,
        ReplicationConfig(replica_lag_time_max_ms=1_000),
        clock,
        wake_readers=lambda topic, partition: None,
        wake_replicas=lambda topic, partition: None,
        alter_isr=lambda: None,
    )


def info(isr: tuple[int, ...], partition_epoch: int) -> PartitionInfo:
    return PartitionInfo("t", 0, TOPIC_ID, 1, 0, isr, partition_epoch, (1, 2, 3), 1)


def test_isr_shrinks_and_expands_count_changes_that_took_effect(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        partition_roles = roles(clock)
        log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig())
        log.track_high_watermark()
        partition_roles.become_leader(info((1, 2, 3), 0), log)
        # The controller removes a broker that went away: a shrink.
        partition_roles.isr_changed(info((1, 2), 1))
        assert partition_roles.isr_changes_total == {"shrink": 1, "expand": 0}
        # The same state again (a resent LeaderAndIsr) changes nothing.
        partition_roles.isr_changed(info((1, 2), 1))
        assert partition_roles.isr_changes_total == {"shrink": 1, "expand": 0}
        # Broker 3 returns and catches up: the leader proposes it; a retriable error, then agreement.
        partition_roles.follower_fetched(ReadAccess(log, None, 0), 2, 0)
        partition_roles.follower_fetched(ReadAccess(log, None, 0), 3, 0)
        ((_, proposal),) = partition_roles.alter_isr_proposals.values()
        assert proposal.new_isr == (1, 2, 3)
        tp = proposal.topic_partition
        partition_roles.alter_isr_answered(tp, proposal, ErrorCode.REQUEST_TIMED_OUT)
        assert partition_roles.isr_changes_total == {"shrink": 1, "expand": 0}  # proposed is not done
        partition_roles.alter_isr_answered(
            tp, proposal, ErrorCode.NONE, leader_epoch=0, isr=(1, 2, 3), partition_epoch=2
        )
        assert partition_roles.isr_changes_total == {"shrink": 1, "expand": 1}
        await partition_roles.close()
        log.close()

    asyncio.run(scenario())


def test_the_replica_fetcher_lag_is_the_leaders_high_watermark_less_our_log_end(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock()
        partition_roles = roles(clock)
        log = PartitionLog.open(tmp_path / "t-0", "t", 0, LogConfig())
        log.track_high_watermark()
        followed = FollowedPartition(
            TopicPartition("t", 0),
            TOPIC_ID,
            log,
            PartitionFollower(TopicPartition("t", 0), leader_id=2, leader_epoch=0, high_watermark=0),
        )
        partition_roles.followed[followed.topic_partition] = followed
        assert partition_roles.replica_max_lag() == 0
        fetcher = ReplicaFetcher(
            2, "127.0.0.1", 9, node_id=1, config=ReplicationConfig(), clock=clock, after_append=lambda _: None
        )
        data = make_batch([b"a", b"b", b"c"])
        answer = FetchResponse.PartitionData(
            partition_index=0, error_code=0, high_watermark=10, log_start_offset=0, records=data
        )
        fetcher._apply(followed, answer)  # the leader has 10 below its HW; we now have 3
        assert log.log_end_offset == 3
        assert partition_roles.replica_max_lag() == 7
        caught_up = FetchResponse.PartitionData(
            partition_index=0, error_code=0, high_watermark=3, log_start_offset=0, records=None
        )
        fetcher._apply(followed, caught_up)
        assert partition_roles.replica_max_lag() == 0
        await partition_roles.close()
        log.close()

    asyncio.run(scenario())


def test_the_page_shows_the_cluster_figures_under_kafkas_names(broker: InProcessBroker) -> None:
    gauges = ReplicationGauges(
        partitions=6,
        leaders=2,
        under_replicated=1,
        under_min_isr=0,
        at_min_isr=1,
        offline_partitions=0,
        active_controller=1,
        global_topics=2,
        global_partitions=6,
        preferred_replica_imbalance=1,
        isr_shrinks=3,
        isr_expands=2,
        replica_max_lag=42,
        unclean_leader_elections=0,
    )
    broker.server.metrics.replication = lambda state: gauges
    samples = scrape(broker)
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 1
    assert value(samples, "kafka_server_replicamanager_atminisrpartitioncount") == 1
    assert value(samples, "kafka_server_replicamanager_isrshrinks_total") == 3
    assert value(samples, "kafka_server_replicamanager_isrexpands_total") == 2
    assert value(samples, "kafka_server_replicamanager_leadercount") == 2
    assert value(samples, "kafka_controller_kafkacontroller_preferredreplicaimbalancecount") == 1
    assert value(samples, "kafka_server_replicafetchermanager_maxlag", clientId="Replica") == 42
    assert value(samples, "kafka_controller_controllerstats_uncleanleaderelections_total") == 0


def test_a_single_node_keeps_its_constants(broker: InProcessBroker) -> None:
    create_topic(broker, "solo", partitions=3)
    samples = scrape(broker)
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(samples, "kafka_server_replicamanager_leadercount") == 3
    assert value(samples, "kafka_server_replicamanager_partitioncount") == 3
    for name in (
        "kafka_server_replicamanager_underreplicatedpartitions",
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "kafka_server_replicamanager_isrshrinks_total",
        "kafka_server_replicafetchermanager_maxlag",
    ):
        assert value(samples, name) == 0, name
