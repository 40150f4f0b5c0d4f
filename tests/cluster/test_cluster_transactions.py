"""Transactions on three real brokers and a real ZooKeeper, with confluent-kafka producers and
consumers (kafka-python's admin client for DescribeTransactions, which confluent-kafka's Python
AdminClient does not have).

- ``__transaction_state`` is made on the first FindCoordinator for a transactional id, and only
  once transaction.state.log.replication.factor (3) brokers are up: with one broker stopped a
  producer's init_transactions times out and no such topic exists; once the broker is back it
  succeeds and every partition of the topic has three replicas, all in sync.
- A transaction over partitions led by three different brokers commits (the coordinator writes
  its own partition's marker and sends the others WriteTxnMarkers), an aborted one is never read
  with read_committed.
- The transaction coordinator's broker is killed with kill -9 while one transaction's commit is
  decided (EndTxn answered, DescribeTransactions says PrepareCommit) but its marker to one leader
  cannot get there (that link is held by the fault proxy), and another transaction of the same
  coordinator is open. The new coordinator (the broker taking over the ids' __transaction_state
  partition) writes the decided transaction's markers (CompleteCommit); the open one is committed
  by its producer after retrying, or aborted if the producer is told to abort. read_committed reads
  exactly what the producers were told was committed.

The brokers reach each other through the fault proxy (``ProxiedCluster``); clients reach them
directly.
"""

from __future__ import annotations

import itertools
import uuid
import warnings
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from strom.coordinator.partitioning import partition_for_group
from tests.compat.txn_support import (
    TRANSACTION_TIMEOUT_S,
    by_partition,
    commit_or_abort,
    commit_sentinels,
    kafka_error,
    read_until_sentinels,
    transactional_producer,
)
from tools.fault_proxy import Direction, Fault, broker_name

from .cluster_support import CLUSTER_SETTINGS, view, wait_until
from .fault_support import ProxiedCluster, create_assigned_topic, heal_everything

KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka.admin import KafkaAdminClient

pytestmark = pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning")

TRANSACTION_STATE_TOPIC = "__transaction_state"
TRANSACTION_STATE_PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster_settings() -> dict[str, str]:
    return {**CLUSTER_SETTINGS, "transaction.state.log.num.partitions": str(TRANSACTION_STATE_PARTITIONS)}


def transactional_id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def transaction_state_partitions(bootstrap: str) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]]]:
    """Replicas and ISR of each partition of __transaction_state, as Metadata tells them."""
    return {
        index: (state.replicas, state.isr)
        for (topic, index), state in view(bootstrap).partitions.items()
        if topic == TRANSACTION_STATE_TOPIC
    }


@pytest.fixture(scope="module")
def transaction_state(running_proxied_cluster: ProxiedCluster) -> None:
    """__transaction_state made by the first FindCoordinator, only with three brokers up (every
    test of the module depends on it, so this runs first, on a cluster that has no such topic)."""
    cluster = running_proxied_cluster
    heal_everything(cluster)
    bootstrap = cluster.bootstrap
    assert transaction_state_partitions(bootstrap) == {}
    cluster.brokers[3].stop()
    wait_until(lambda: view(cluster.live_bootstrap).brokers == (1, 2), "broker 3 gone from the metadata")
    producer = transactional_producer(cluster.live_bootstrap, transactional_id("first"))
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(3)  # FindCoordinator: COORDINATOR_NOT_AVAILABLE, again and again
    error = kafka_error(raised.value)
    assert error.code() == KafkaError._TIMED_OUT and error.retriable(), error
    assert transaction_state_partitions(cluster.live_bootstrap) == {}

    heal_everything(cluster)
    producer.init_transactions(TRANSACTION_TIMEOUT_S)
    partitions = transaction_state_partitions(bootstrap)
    assert sorted(partitions) == list(range(TRANSACTION_STATE_PARTITIONS))
    for replicas, isr in partitions.values():
        assert sorted(replicas) == [1, 2, 3]
        assert sorted(isr) == [1, 2, 3]


@pytest.fixture
def cluster(running_proxied_cluster: ProxiedCluster, transaction_state: None) -> Iterator[ProxiedCluster]:
    heal_everything(running_proxied_cluster)
    yield running_proxied_cluster
    running_proxied_cluster.proxy.heal()


def kafka_python_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)


def describe(bootstrap: str, transactional_id: str) -> Any:
    admin = kafka_python_admin(bootstrap)
    try:
        return admin.describe_transactions([transactional_id])[transactional_id]
    finally:
        admin.close()


def leaders(bootstrap: str, topic: str, partitions: int) -> list[int]:
    found = view(bootstrap, topic).partitions
    return [found[(topic, index)].leader for index in range(partitions)]


def test_a_transaction_over_partitions_of_three_leaders(cluster: ProxiedCluster) -> None:
    topic = f"txn-leaders-{uuid.uuid4().hex[:8]}"
    create_assigned_topic(cluster, topic, [[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    assert leaders(cluster.bootstrap, topic, 3) == [1, 2, 3]
    producer = transactional_producer(cluster.bootstrap, transactional_id("leaders"))
    producer.init_transactions(TRANSACTION_TIMEOUT_S)
    committed: dict[int, list[bytes]] = defaultdict(list)
    everything: dict[int, list[bytes]] = defaultdict(list)
    for label, commit in (("first", True), ("aborted", False), ("second", True)):
        producer.begin_transaction()
        for sequence in range(30):
            value = b"%s-%d" % (label.encode(), sequence)
            producer.produce(topic, value=value, partition=sequence % 3)
            everything[sequence % 3].append(value)
            if commit:
                committed[sequence % 3].append(value)
        if commit:
            producer.commit_transaction(TRANSACTION_TIMEOUT_S)
        else:
            assert producer.flush(TRANSACTION_TIMEOUT_S) == 0
            producer.abort_transaction(TRANSACTION_TIMEOUT_S)
    commit_sentinels(producer, topic, 3, "end")
    assert by_partition(read_until_sentinels(cluster.bootstrap, topic, 3, "end")) == dict(committed)
    uncommitted = read_until_sentinels(cluster.bootstrap, topic, 3, "end", isolation_level="read_uncommitted")
    assert by_partition(uncommitted) == dict(everything)


def ids_of_one_coordinator(count: int) -> list[str]:
    """``count`` transactional ids owned by the same partition of __transaction_state (Kafka's
    rule: abs(hashCode) % partitions), so one coordinator holds them all."""
    first = transactional_id("kill")
    wanted = partition_for_group(first, TRANSACTION_STATE_PARTITIONS)
    found = [first]
    for number in itertools.count():
        if len(found) == count:
            return found
        candidate = f"{first}-{number}"
        if partition_for_group(candidate, TRANSACTION_STATE_PARTITIONS) == wanted:
            found.append(candidate)
    raise AssertionError("unreachable")


def test_the_coordinator_killed_with_a_commit_decided_and_a_transaction_open(cluster: ProxiedCluster) -> None:
    bootstrap = cluster.bootstrap
    decided_id, open_id = ids_of_one_coordinator(2)
    decided = transactional_producer(bootstrap, decided_id)
    decided.init_transactions(TRANSACTION_TIMEOUT_S)
    still_open = transactional_producer(bootstrap, open_id)
    still_open.init_transactions(TRANSACTION_TIMEOUT_S)
    coordinator = describe(bootstrap, decided_id).coordinator_id
    assert describe(bootstrap, open_id).coordinator_id == coordinator
    cut_off, other = (node for node in sorted(cluster.brokers) if node != coordinator)
    # Partition 0 led by the broker the coordinator will not reach, 1 by the third, 2 by the coordinator.
    topic = f"txn-kill-{uuid.uuid4().hex[:8]}"
    create_assigned_topic(
        cluster,
        topic,
        [[cut_off, other, coordinator], [other, coordinator, cut_off], [coordinator, cut_off, other]],
    )
    assert leaders(bootstrap, topic, 3) == [cut_off, other, coordinator]

    committed: dict[int, list[bytes]] = defaultdict(list)

    def produce(producer: Producer, label: str) -> list[tuple[int, bytes]]:
        written = [(sequence % 3, b"%s-%d" % (label.encode(), sequence)) for sequence in range(30)]
        for partition, value in written:
            producer.produce(topic, value=value, partition=partition)
        assert producer.flush(TRANSACTION_TIMEOUT_S) == 0
        return written

    decided.begin_transaction()
    decided_records = produce(decided, "decided")
    still_open.begin_transaction()
    open_records = produce(still_open, "open")

    # The coordinator's requests to the leader of partition 0 (its WriteTxnMarkers) are held.
    cluster.proxy.cut(broker_name(coordinator), broker_name(cut_off), Fault.BLACKHOLE, Direction.FORWARD)
    decided.commit_transaction(TRANSACTION_TIMEOUT_S)  # EndTxn answered: PrepareCommit is replicated
    for partition, value in decided_records:
        committed[partition].append(value)
    assert describe(bootstrap, decided_id).state == "PrepareCommit"  # a marker cannot get through

    cluster.brokers[coordinator].kill()
    cluster.proxy.heal()
    survivors = ",".join(cluster.brokers[node].address for node in (cut_off, other))

    if commit_or_abort(still_open):
        for partition, value in open_records:
            committed[partition].append(value)

    def decided_complete() -> bool:
        description = describe(survivors, decided_id)
        return description.coordinator_id != coordinator and description.state == "CompleteCommit"

    wait_until(decided_complete, "the new coordinator completing the decided commit", timeout_s=30)

    commit_sentinels(decided, topic, 3, "end")
    assert by_partition(read_until_sentinels(survivors, topic, 3, "end")) == dict(committed)
    uncommitted = read_until_sentinels(survivors, topic, 3, "end", isolation_level="read_uncommitted")
    assert sorted(value for values in by_partition(uncommitted).values() for value in values) == sorted(
        value for _, value in decided_records + open_records
    )
