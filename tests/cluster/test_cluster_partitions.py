"""Network partitions inside a cluster: three real brokers whose links to each other and to ZooKeeper
go through a fault-injecting proxy (``tools/fault_proxy.py``), while clients reach every broker
directly.

Judged from what clients were told (delivery reports, what a consumer reads back) and from the
replicas' files on disk, compared byte for byte once the partition heals.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from strom.broker.cluster.peer import PeerConnection
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.records.batch import Record, build_batch
from tools.fault_proxy import Direction, Fault, broker_name

from .cluster_support import SESSION_TIMEOUT_MS, heal, view, wait_until
from .fault_support import ProxiedCluster, create_assigned_topic, wait_for_identical_replicas
from .workload import Deliveries, produce_all, read_log

ACKS_ALL = {"acks": "all", "enable.idempotence": True}
ACKS_1 = {"acks": "1", "enable.idempotence": False}
PRODUCE_TIMEOUT_MS = 10_000


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{index}".encode() for index in range(count)]


def acknowledged(deliveries: Deliveries) -> list[tuple[int, bytes]]:
    return deliveries.acknowledged.get(0, [])


def assert_all_acknowledged(deliveries: Deliveries, count: int) -> None:
    assert not deliveries.errors, deliveries.errors[:3]
    assert len(acknowledged(deliveries)) == count


def assert_in_log(log: dict[int, bytes], deliveries: Deliveries, what: str) -> None:
    lost = [(offset, value) for offset, value in acknowledged(deliveries) if log.get(offset) != value]
    assert not lost, f"{len(lost)} acknowledged {what} records lost, first {lost[:3]}"


def produce_at(address: str, topic: str, values: list[bytes]) -> Deliveries:
    """One acks=1 Produce of ``values`` (one batch, partition 0) sent to the broker at ``address``
    and to no other: a Kafka client asks any broker it knows for metadata and follows whoever
    names a new leader, so under load its "writes to the isolated leader" could land on the new
    one. What that broker answered, as a producer would be told."""
    batch = build_batch(
        [
            Record(offset_delta=index, timestamp_delta=0, key=None, value=value)
            for index, value in enumerate(values)
        ]
    )
    request = ProduceRequest(
        acks=1,
        timeout_ms=PRODUCE_TIMEOUT_MS,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=bytearray(batch))],
            )
        ],
    )

    async def exchange() -> ProduceResponse:
        host, port = address.rsplit(":", 1)
        peer = PeerConnection(host, int(port), "partition-test")
        try:
            response: ProduceResponse = await peer.request(request, 9, ProduceResponse, PRODUCE_TIMEOUT_MS)
            return response
        finally:
            peer.close()

    answer = asyncio.run(exchange()).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.NONE, (
        f"the isolated broker refused the write: {ErrorCode(answer.error_code).name}"
    )
    deliveries = Deliveries()
    deliveries.acknowledged[0] = [(answer.base_offset + index, value) for index, value in enumerate(values)]
    return deliveries


def report(figures: dict[str, object]) -> None:
    print(" ".join(f"{name}={value}" for name, value in figures.items()))


@pytest.mark.parametrize("leader_is_controller", [False, True], ids=["leader", "leader-and-controller"])
def test_an_isolated_leader_takes_acks_1_writes_alone_and_loses_them_when_it_rejoins(
    proxied_cluster: ProxiedCluster, leader_is_controller: bool
) -> None:
    """The leader is cut off from the other brokers and from ZooKeeper; clients still reach it.
    It keeps acknowledging acks=1 writes under its old epoch while the others elect a new leader
    that acknowledges other records at the same offsets. Once the links heal, the old leader
    follows, truncates its divergent tail, and every replica is byte-identical; no record
    acknowledged by acks=all, and no record the new leader acknowledged, is lost."""
    cluster = proxied_cluster
    controller = view(cluster.bootstrap).controller
    old_leader = controller if leader_is_controller else min(n for n in cluster.brokers if n != controller)
    followers = sorted(node_id for node_id in cluster.brokers if node_id != old_leader)
    topic = f"isolated-{'controller' if leader_is_controller else 'leader'}"
    create_assigned_topic(cluster, topic, [[old_leader, *followers]])
    isolated = cluster.brokers[old_leader].address
    survivors = ",".join(cluster.brokers[node_id].address for node_id in followers)

    before = produce_all(cluster.bootstrap, topic, values("before", 300), **ACKS_ALL)
    assert_all_acknowledged(before, 300)

    cut_at = time.monotonic()
    cluster.isolate(old_leader, from_zookeeper=True)
    zombie = produce_at(isolated, topic, values("zombie", 100))

    wait_until(
        lambda: view(survivors, topic).partitions[(topic, 0)].leader == followers[0],
        "the first follower to lead",
        timeout_s=SESSION_TIMEOUT_MS / 1000 + 30,
    )
    elected_s = time.monotonic() - cut_at
    if leader_is_controller:
        assert view(survivors).controller in followers
    new_all = produce_all(survivors, topic, values("new-all", 200), **ACKS_ALL)
    assert_all_acknowledged(new_all, 200)
    first_acks_all_s = time.monotonic() - cut_at  # at most: the first answer came before the last
    new_1 = produce_all(survivors, topic, values("new-1", 100), **ACKS_1)
    assert_all_acknowledged(new_1, 100)
    # The old leader still takes writes: it has heard of no other leader.
    zombie_later = produce_at(isolated, topic, values("zombie-later", 100))
    zombie_offsets = {offset for offset, _ in acknowledged(zombie) + acknowledged(zombie_later)}
    new_offsets = {offset for offset, _ in acknowledged(new_all) + acknowledged(new_1)}
    assert zombie_offsets & new_offsets, "the two leaders never acknowledged the same offsets"

    cluster.proxy.heal()
    healed_at = time.monotonic()
    heal(cluster)
    rejoined_s = time.monotonic() - healed_at

    log = read_log(cluster.bootstrap, topic, 0)
    offsets = [offset for offset, _ in log]
    assert offsets == list(range(len(log))), "offsets missing or repeated"
    at = dict(log)
    for deliveries, what in ((before, "acks=all"), (new_all, "acks=all"), (new_1, "new leader's acks=1")):
        assert_in_log(at, deliveries, what)
    survived = {value for _, value in acknowledged(zombie) + acknowledged(zombie_later)} & set(at.values())
    assert not survived, f"{len(survived)} records of the deposed leader's divergent tail survived"
    files = wait_for_identical_replicas(cluster, topic, 0, replicas=3)
    compared = sum(len(content) for found in files.values() for content in found.values())
    report(
        {
            "elected_s": round(elected_s, 2),
            "first_acks_all_by_s": round(first_acks_all_s, 2),
            "rejoined_s": round(rejoined_s, 2),
            "records": len(log),
            "bytes_compared": compared,
        }
    )


def test_a_leader_cut_off_from_the_brokers_but_not_from_zookeeper_stays_leader_and_loses_nothing(
    proxied_cluster: ProxiedCluster,
) -> None:
    """Cut from the other brokers only, the leader keeps its ZooKeeper session: nobody elects
    another leader. It acknowledges acks=1 writes; acks=all cannot be acknowledged (the followers
    cannot fetch, and the ISR cannot shrink without the controller). Once healed the followers
    catch up; every acknowledged record is kept and the replicas are byte-identical."""
    cluster = proxied_cluster
    controller = view(cluster.bootstrap).controller
    leader = min(node_id for node_id in cluster.brokers if node_id != controller)
    followers = sorted(node_id for node_id in cluster.brokers if node_id != leader)
    topic = "cut-from-brokers"
    create_assigned_topic(cluster, topic, [[leader, *followers]])

    before = produce_all(cluster.bootstrap, topic, values("before", 200), **ACKS_ALL)
    assert_all_acknowledged(before, 200)
    cluster.isolate(leader, from_zookeeper=False)
    during_1 = produce_all(cluster.bootstrap, topic, values("during-1", 100), **ACKS_1)
    assert_all_acknowledged(during_1, 100)
    during_all = produce_all(
        cluster.bootstrap,
        topic,
        values("during-all", 20),
        acks="all",
        **{"enable.idempotence": False, "message.timeout.ms": 3000},
    )
    assert not acknowledged(during_all), "acks=all acknowledged without the followers"
    assert len(during_all.errors) == 20
    for broker in cluster.brokers.values():
        assert view(broker.address, topic).partitions[(topic, 0)].leader == leader

    cluster.proxy.heal()
    heal(cluster)
    after = produce_all(cluster.bootstrap, topic, values("after", 200), **ACKS_ALL)
    assert_all_acknowledged(after, 200)
    at = dict(read_log(cluster.bootstrap, topic, 0))
    for deliveries, what in ((before, "acks=all"), (during_1, "acks=1"), (after, "acks=all")):
        assert_in_log(at, deliveries, what)
    wait_for_identical_replicas(cluster, topic, 0, replicas=3)


def test_a_restarted_broker_answers_metadata_once_the_controller_told_it_the_topics(
    proxied_cluster: ProxiedCluster,
) -> None:
    """A broker that has just restarted knows no topic until the controller's first
    UpdateMetadata. Answered from that empty image, a client was told its topics did not exist
    (a chaos campaign: librdkafka then dropped its assignment, "desired partition is no longer
    available"). Here the controller's commands to the restarted broker are held for 2 s: its
    answer to a client's Metadata waits for them and names the topic with its leader."""
    cluster = proxied_cluster
    controller = view(cluster.bootstrap).controller
    target = min(node_id for node_id in cluster.brokers if node_id != controller)
    topic = "metadata-after-restart"
    create_assigned_topic(cluster, topic, [[controller, target]])
    broker = cluster.brokers[target]
    broker.kill()
    cluster.proxy.cut(broker_name(controller), broker_name(target), Fault.BLACKHOLE, Direction.FORWARD)
    broker.start()
    broker.wait_listening()
    healing = threading.Timer(2.0, lambda: cluster.proxy.heal(broker_name(controller), broker_name(target)))
    healing.start()
    try:
        asked = time.monotonic()
        told = view(broker.address, topic)
        waited_s = time.monotonic() - asked
    finally:
        healing.cancel()
        cluster.proxy.heal()
    assert told.partitions.get((topic, 0)) is not None, f"told {told} after {waited_s:.1f} s"
    assert told.partitions[(topic, 0)].leader == controller
    report({"metadata_answered_after_s": round(waited_s, 2)})
