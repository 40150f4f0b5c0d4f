"""A replicated cluster under faults, end to end: three ``strom broker --zookeeper`` processes on a
real ZooKeeper, driven by confluent-kafka (librdkafka). Every check works from what the clients
were told: acknowledged offsets, delivery errors, what a consumer reads back."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from confluent_kafka import Consumer, ElectionType, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from strom.cli.dev_cluster import BrokerProcess, LocalCluster
from strom.cli.local_zookeeper import free_port

from .cluster_support import (
    SESSION_TIMEOUT_MS,
    admin,
    create_topic,
    heal,
    leader_of,
    live_bootstrap,
    restart,
    view,
    wait_until,
)
from .workload import BackgroundProducer, assert_every_acknowledged_record_once_in_order, read_partitions

PARTITIONS = 3


def test_a_leader_killed_under_idempotent_acks_all_loses_nothing(cluster: LocalCluster) -> None:
    """The leader of every partition is kill -9'ed once while records flow; every record a client
    was told is written is read back, once, in the order it was sent."""
    topic = "kill-every-leader"
    create_topic(cluster, topic, PARTITIONS)
    with BackgroundProducer(cluster.bootstrap, topic) as producer:
        wait_until(lambda: producer.deliveries.count > 2000, "records acknowledged before the first kill")
        for partition in range(PARTITIONS):
            victim = leader_of(cluster, topic, partition)
            before = producer.deliveries.count
            cluster.brokers[victim].kill()
            wait_until(
                lambda partition=partition, victim=victim: (
                    leader_of(cluster, topic, partition) not in (victim, -1)
                ),
                f"a new leader for partition {partition}",
            )
            wait_until(
                lambda before=before: producer.deliveries.count > before + 1000,
                "records acknowledged by the new leaders",
            )
            heal(cluster)
    deliveries = producer.deliveries
    assert not deliveries.errors, deliveries.errors[:3]
    found = read_partitions(cluster.bootstrap, topic, PARTITIONS, deliveries.count)
    assert deliveries.count > 5000
    assert_every_acknowledged_record_once_in_order(deliveries, found)


def test_min_insync_replicas_refuses_acks_all_with_two_brokers_down(cluster: LocalCluster) -> None:
    topic = "min-insync"
    create_topic(cluster, topic, 1, **{"min.insync.replicas": "2"})
    leader = leader_of(cluster, topic, 0)
    others = [node_id for node_id in cluster.brokers if node_id != leader]
    for node_id in others:
        cluster.brokers[node_id].kill()
    leader_address = cluster.brokers[leader].address
    wait_until(
        lambda: view(leader_address, topic).partitions[(topic, 0)].isr == (leader,),
        "the ISR to shrink to the leader",
    )

    def produce_once(acks: str) -> KafkaError | None:
        outcome: list[KafkaError | None] = []
        producer = Producer(
            {
                "bootstrap.servers": leader_address,
                "acks": acks,
                "retries": 0,
                "enable.idempotence": False,
                "message.timeout.ms": 10_000,
            }
        )
        producer.produce(topic, b"v", on_delivery=lambda error, _message: outcome.append(error))
        assert producer.flush(30) == 0
        return outcome[0]

    refused = produce_once("all")
    assert refused is not None and refused.code() == KafkaError.NOT_ENOUGH_REPLICAS, refused
    assert produce_once("1") is None
    for node_id in others:
        restart(cluster.brokers[node_id])
    wait_until(
        lambda: sorted(view(leader_address, topic).partitions[(topic, 0)].isr) == sorted(cluster.brokers),
        "the ISR to expand again",
    )
    assert produce_once("all") is None


def test_a_killed_controller_is_replaced_and_topics_can_be_created(cluster: LocalCluster) -> None:
    controller = view(cluster.bootstrap).controller
    assert controller in cluster.brokers
    cluster.brokers[controller].kill()
    survivors = [broker.address for node_id, broker in cluster.brokers.items() if node_id != controller]

    def replaced() -> bool:
        return all(view(address).controller not in (controller, -1) for address in survivors)

    wait_until(replaced, "a new controller", timeout_s=SESSION_TIMEOUT_MS / 1000 + 20)
    assert len({view(address).controller for address in survivors}) == 1
    topic = "after-controller-kill"
    client = admin(live_bootstrap(cluster))
    futures = client.create_topics([NewTopic(topic, num_partitions=2, replication_factor=2)])
    futures[topic].result(30)
    wait_until(
        lambda: all(
            view(address, topic).partitions[(topic, index)].leader >= 0
            for address in survivors
            for index in range(2)
        ),
        "leaders of the new topic on every live broker",
    )


def test_sigterm_of_a_leader_during_acks_all_fails_no_delivery(cluster: LocalCluster) -> None:
    """A broker stopped with SIGTERM first moves its leaderships away: the producer sees leaders
    move, never a failed delivery."""
    topic = "sigterm-leader"
    create_topic(cluster, topic, PARTITIONS)
    victim = leader_of(cluster, topic, 0)
    with BackgroundProducer(cluster.bootstrap, topic) as producer:
        wait_until(lambda: producer.deliveries.count > 2000, "records acknowledged before the stop")
        before = producer.deliveries.count
        assert cluster.brokers[victim].stop() == 0
        wait_until(lambda: producer.deliveries.count > before + 2000, "records acknowledged after the stop")
    deliveries = producer.deliveries
    assert not deliveries.errors, deliveries.errors[:3]
    found = read_partitions(live_bootstrap(cluster), topic, PARTITIONS, deliveries.count)
    assert_every_acknowledged_record_once_in_order(deliveries, found)


def test_a_consumer_group_keeps_consuming_across_a_coordinator_kill(cluster: LocalCluster) -> None:
    """The broker coordinating the group (and leading partitions) is kill -9'ed mid-way; the member
    finds the new coordinator and keeps consuming, records produced before and after included."""
    topic = "group-across-kill"
    create_topic(cluster, topic, PARTITIONS)
    half = 3000

    def produce(first: int) -> None:
        producer = Producer(
            {"bootstrap.servers": live_bootstrap(cluster), "acks": "all", "enable.idempotence": True}
        )
        for index in range(first, first + half):
            producer.produce(topic, key=str(index).encode(), value=str(index).encode())
            if index % 500 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0

    produce(0)
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "survivors",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
            "session.timeout.ms": 10_000,
        }
    )
    consumer.subscribe([topic])
    seen: set[bytes] = set()
    killed: int | None = None
    deadline = time.monotonic() + 120
    try:
        while len(seen) < 2 * half and time.monotonic() < deadline:
            for message in consumer.consume(200, 0.5):
                if message.error() is None:
                    seen.add(message.value())
            if killed is None and len(seen) > half // 3:
                client = admin(cluster.bootstrap)
                group = client.describe_consumer_groups(["survivors"])["survivors"].result(30)
                killed = group.coordinator.id
                cluster.brokers[killed].kill()
                produce(half)
    finally:
        consumer.close()
    assert killed is not None
    assert len(seen) == 2 * half, f"consumed {len(seen)} of {2 * half}"


def test_metadata_and_admin_requests_work_through_any_broker(cluster: LocalCluster) -> None:
    brokers = {node_id: broker.address for node_id, broker in cluster.brokers.items()}
    # One client per broker, kept for the whole test (a client collected early fails its futures).
    clients = {node_id: admin(address) for node_id, address in brokers.items()}
    client = clients[2]
    futures = client.create_topics(
        [
            NewTopic("admin-ops", num_partitions=2, replication_factor=2),
            NewTopic("assigned", num_partitions=2, replica_assignment=[[1, 2], [2, 3]]),
        ]
    )
    for future in futures.values():
        future.result(30)
    wait_until(lambda: all_led_everywhere(cluster, "admin-ops", 2), "admin-ops led on every broker")
    seen = [view(address) for address in brokers.values()]
    assert {tuple(found.brokers) for found in seen} == {(1, 2, 3)}
    assert len({found.controller for found in seen}) == 1
    assigned = view(brokers[3], "assigned").partitions
    assert assigned[("assigned", 0)].replicas == (1, 2) and assigned[("assigned", 1)].replicas == (2, 3)
    described = clients[1].describe_cluster().result(30)
    assert described.controller.id == seen[0].controller
    assert sorted(node.id for node in described.nodes) == [1, 2, 3]

    client.create_partitions([NewPartitions("admin-ops", 4)])["admin-ops"].result(30)
    wait_until(lambda: all_led_everywhere(cluster, "admin-ops", 4), "the new partitions led on every broker")

    resource = ConfigResource(ConfigResource.Type.TOPIC, "admin-ops")
    resource.add_incremental_config(
        ConfigEntry("retention.ms", "123456", incremental_operation=AlterConfigOpType.SET)
    )
    clients[3].incremental_alter_configs([resource])[resource].result(30)

    def retention_seen() -> bool:
        configs = clients[1].describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "admin-ops")])
        entries = next(iter(configs.values())).result(30)
        return bool(entries["retention.ms"].value == "123456")

    wait_until(retention_seen, "the new retention.ms described by another broker")

    # Leadership moves away from the preferred replica, then ElectLeaders brings it back.
    cluster.brokers[1].kill()
    wait_until(lambda: leader_of(cluster, "assigned", 0) == 2, "broker 2 to lead assigned-0")
    heal(cluster)
    electing = admin(cluster.bootstrap)
    results = electing.elect_leaders(ElectionType.PREFERRED, [TopicPartition("assigned", 0)]).result(30)
    assert all(error is None for error in results.values()), results
    wait_until(lambda: leader_of(cluster, "assigned", 0) == 1, "the preferred replica to lead again")

    listing = subprocess.run(
        ["kcat", "-b", brokers[3], "-L", "-t", "admin-ops"], capture_output=True, text=True, timeout=30
    )
    assert "3 brokers:" in listing.stdout and "partition 3, leader" in listing.stdout, listing.stdout

    client.delete_topics(["admin-ops", "assigned"])["admin-ops"].result(30)
    wait_until(
        lambda: all(
            "admin-ops" not in {name for name, _ in view(address).partitions} for address in brokers.values()
        ),
        "the deleted topic gone from every broker's metadata",
    )
    wait_until(
        lambda: not any((broker.data_dir / "admin-ops-0").exists() for broker in cluster.brokers.values()),
        "the deleted topic's logs removed",
    )


def all_led_everywhere(cluster: LocalCluster, topic: str, partitions: int) -> bool:
    for broker in cluster.brokers.values():
        found = view(broker.address, topic).partitions
        if not all(
            (topic, index) in found and found[(topic, index)].leader >= 0 for index in range(partitions)
        ):
            return False
    return True


def test_a_second_broker_with_the_same_node_id_refuses_to_start(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    work = tmp_path
    twin = BrokerProcess(
        1,
        free_port(),
        work / "data",
        work / "twin.log",
        cluster.zookeeper_connect,
        {"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)},
    )
    twin.start()
    try:
        assert twin.process is not None
        assert twin.process.wait(60) == 1
    finally:
        twin.kill()
    log = twin.log_path.read_text()
    assert "node id 1 is already registered" in log and "--node-id" in log, log
    assert cluster.brokers[1].running


def test_an_unreachable_zookeeper_is_a_clear_error_and_a_failed_start(tmp_path: Path) -> None:
    work = tmp_path
    nobody = f"127.0.0.1:{free_port()}"
    broker = BrokerProcess(
        1,
        free_port(),
        work / "data",
        work / "broker.log",
        nobody,
        {"zookeeper.connection.timeout.ms": "1500"},
    )
    started = time.monotonic()
    broker.start()
    try:
        assert broker.process is not None
        assert broker.process.wait(60) == 1
    finally:
        broker.kill()
    assert time.monotonic() - started < 55
    log = broker.log_path.read_text()
    assert f"no ZooKeeper server answered at {nobody} within 1500 ms" in log, log
