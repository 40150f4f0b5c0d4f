"""Partition reassignment (AlterPartitionReassignments and ListPartitionReassignments, KIP-455) on
three real brokers and a real ZooKeeper, asked by kafka-python's admin client (which sends both
to the controller; confluent-kafka's Python AdminClient has neither).

- A replica moves: a partition on brokers [a, b] goes to [c, b]; the list shows the move (adding
  c, removing a) until it ends; Metadata then names replicas and ISR [c, b] on every broker, a's
  copy of the partition is deleted from its data directory, every acknowledged record is read
  back once, in order, and acks=all writes go on.
- A replication factor grows: a partition on [a] (a being the controller) goes to [a, b, c]; once
  all three are in the ISR, kill -9 of a: the new leader serves every record a acknowledged.
- A move outlives its controller: the controller a, leading [a, b], starts the move to [b, c]
  while c cannot fetch, and is kill -9'ed; the controller elected next lists the move and ends it
  once c catches up; a, restarted, learns it is no longer a replica and deletes its copy.
- Refusals: a broker never registered, a replica named twice (INVALID_REPLICA_ASSIGNMENT), a
  partition that does not exist (UNKNOWN_TOPIC_OR_PARTITION), a cancellation with nothing in
  progress (NO_REASSIGNMENT_IN_PROGRESS); none of them changes anything.
- Cancellations of a reassignment adding broker c that cannot end:
  - c registered, but its fetches to the leader held (the fault proxy): c makes the partition's
    log and waits; the cancellation puts the replicas back and c's log is deleted;
  - c paused (SIGSTOP) and its session expired: a target naming it is refused meanwhile, acks=all
    writes go on (c is not in the ISR), the cancellation puts the replicas back.

The brokers reach each other through the fault proxy (``ProxiedCluster``); clients reach them
directly. Judged from what the clients were told (the admin client's answers, Metadata, delivery
reports, what a consumer reads back) and from the replicas' directories on disk.
"""

from __future__ import annotations

import signal
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from strom.cli.dev_cluster import LocalCluster
from tools.fault_proxy import Direction, Fault, broker_name

from .cluster_support import SESSION_TIMEOUT_MS, admin, heal, restart, view, wait_until
from .fault_support import ProxiedCluster, heal_everything
from .workload import Deliveries, produce_all, read_log

# kafka-python 3 loads its protocol schemas with importlib.resources.read_text/open_text, deprecated
# in 3.11; the suite turns warnings into errors, so its import (and lazy loads) are let through.
KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka.admin import KafkaAdminClient
    from kafka.errors import (
        InvalidReplicationAssignmentError,
        NoReassignmentInProgressError,
        UnknownBrokerIdError,
        UnknownTopicOrPartitionError,
    )
    from kafka.structs import TopicPartition as KafkaTopicPartition

pytestmark = pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning")

ACKS_ALL: dict[str, Any] = {"acks": "all", "enable.idempotence": True}
RECORDS = 2_000
# Long enough for a copy of a few thousand records and the writes that end the move, on a
# loaded machine; a reassignment that has not ended by then is a failure.
REASSIGNMENT_WAIT_S = 60.0


@dataclass(frozen=True)
class Ongoing:
    """One partition's reassignment as ListPartitionReassignments tells it."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


@pytest.fixture
def cluster(running_proxied_cluster: ProxiedCluster) -> ProxiedCluster:
    """The module's three brokers: every link healed, every broker running and in every ISR, and
    no reassignment in progress."""
    heal_everything(running_proxied_cluster)
    with reassigner(running_proxied_cluster.bootstrap) as client:
        assert ongoing(client) == {}
    return running_proxied_cluster


@contextmanager
def reassigner(bootstrap: str) -> Iterator[Any]:
    """A kafka-python admin client (``KafkaAdminClient``), closed at the end."""
    client = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=15_000)
    try:
        yield client
    finally:
        client.close()


def reassign(client: Any, topic: str, replicas: list[int] | None) -> Any:
    """Ask for partition 0 of ``topic`` to move to ``replicas`` (None: cancel its move); the
    error class the controller answered for it, None if it was accepted."""
    tp = KafkaTopicPartition(topic, 0)
    results = client.alter_partition_reassignments({tp: replicas})
    assert set(results) == {tp}, results
    return results[tp]


def ongoing(client: Any, topic: str | None = None) -> dict[tuple[str, int], Ongoing]:
    """The reassignments in progress: of partition 0 of ``topic``, or (None) of every partition."""
    asked = None if topic is None else [KafkaTopicPartition(topic, 0)]
    listed = client.list_partition_reassignments(asked)
    return {
        (tp.topic, tp.partition): Ongoing(
            tuple(found["replicas"]), tuple(found["adding_replicas"]), tuple(found["removing_replicas"])
        )
        for tp, found in listed.items()
    }


def wait_for_end(client: Any, topic: str, expected: Ongoing) -> int:
    """Poll the list until partition 0 of ``topic`` is gone from it; every listing seen before
    shows ``expected`` for it. How many listings showed it."""
    seen: list[dict[tuple[str, int], Ongoing]] = []

    def ended() -> bool:
        listing = {key: found for key, found in ongoing(client).items() if key[0] == topic}
        if listing:
            seen.append(listing)
        return not listing

    wait_until(ended, f"the reassignment of {topic}-0 to end", REASSIGNMENT_WAIT_S)
    wrong = [listing for listing in seen if listing != {(topic, 0): expected}]
    assert not wrong, f"listed while in progress: {wrong[:3]} (expected {expected})"
    return len(seen)


def create_assigned(cluster: LocalCluster, topic: str, replicas: list[int]) -> None:
    """A one-partition topic on ``replicas`` (the first leads), led and in sync on every broker."""
    client = admin(cluster.bootstrap)  # kept: the futures fail if the client is collected first
    client.create_topics([NewTopic(topic, num_partitions=1, replica_assignment=[replicas])])[topic].result(30)
    wait_until(
        lambda: placed(cluster, topic, tuple(replicas), list(cluster.brokers)),
        f"{topic} led and in sync on every broker",
    )


def placed(
    cluster: LocalCluster,
    topic: str,
    replicas: tuple[int, ...],
    asked: list[int],
    isr: tuple[int, ...] | None = None,
) -> bool:
    """Metadata from each broker of ``asked`` names ``replicas`` (in that order) for partition 0 of
    ``topic``, and ``isr`` (by default: every replica) with one of them leading."""
    wanted_isr = sorted(replicas if isr is None else isr)
    for node_id in asked:
        state = view(cluster.brokers[node_id].address, topic).partitions[(topic, 0)]
        if state.replicas != replicas or sorted(state.isr) != wanted_isr or state.leader not in wanted_isr:
            return False
    return True


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{index}".encode() for index in range(count)]


def acknowledged(deliveries: Deliveries, count: int) -> list[tuple[int, bytes]]:
    """Partition 0's acknowledged (offset, value), after checking that all ``count`` were."""
    assert not deliveries.errors, deliveries.errors[:3]
    records = deliveries.acknowledged.get(0, [])
    assert len(records) == count, f"{len(records)} of {count} acknowledged"
    return records


def produce_acks_all(
    bootstrap: str, topic: str, prefix: str, count: int = RECORDS
) -> list[tuple[int, bytes]]:
    return acknowledged(produce_all(bootstrap, topic, values(prefix, count), **ACKS_ALL), count)


def assert_log_is(bootstrap: str, topic: str, expected: list[tuple[int, bytes]]) -> None:
    """A consumer reading partition 0 from offset 0 gets exactly ``expected``: every acknowledged
    record once, in the order it was acknowledged (one idempotent producer at a time)."""
    found = read_log(bootstrap, topic, 0)
    if found != expected:
        at = dict(found)
        lost = [(offset, value) for offset, value in expected if at.get(offset) != value]
        raise AssertionError(
            f"read {len(found)} records, {len(expected)} acknowledged; {len(lost)} acknowledged lost "
            f"(first {lost[:3]}); first read {found[:3]}"
        )


def bootstrap_of(cluster: LocalCluster, node_ids: list[int]) -> str:
    return ",".join(cluster.brokers[node_id].address for node_id in node_ids)


def has_log(cluster: LocalCluster, node_id: int, topic: str) -> bool:
    """Whether broker ``node_id``'s data directory holds partition 0 of ``topic``."""
    return (cluster.brokers[node_id].data_dir / f"{topic}-0").is_dir()


@contextmanager
def controller_reassigner(bootstrap: str) -> Iterator[Any]:
    """A kafka-python admin client that reached the controller (ListPartitionReassignments answered).
    It asks a broker picked at random which one the controller is, and a broker cut off from a newly
    elected controller still names the dead one before it (UnknownBrokerIdError): clients are made
    afresh until one asks a broker that knows; that one keeps the answer."""
    reached: list[Any] = []

    def attempt() -> bool:
        client = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=15_000)
        try:
            ongoing(client)
        except UnknownBrokerIdError:
            client.close()
            return False
        reached.append(client)
        return True

    wait_until(attempt, "an admin client to find the controller")
    try:
        yield reached[0]
    finally:
        reached[0].close()


def test_a_replica_moves_to_another_broker(cluster: ProxiedCluster) -> None:
    topic = "moved"
    a, b, c = 1, 2, 3
    create_assigned(cluster, topic, [a, b])
    before = produce_acks_all(cluster.bootstrap, topic, "before")
    assert has_log(cluster, a, topic) and not has_log(cluster, c, topic)

    with reassigner(cluster.bootstrap) as client:
        assert reassign(client, topic, [c, b]) is None
        wait_for_end(client, topic, Ongoing(replicas=(c, b, a), adding=(c,), removing=(a,)))
        wait_until(
            lambda: placed(cluster, topic, (c, b), list(cluster.brokers)),
            "Metadata from every broker to name replicas and ISR [c, b]",
            REASSIGNMENT_WAIT_S,
        )
        assert ongoing(client, topic) == {}
    wait_until(lambda: not has_log(cluster, a, topic), f"the removed replica's log deleted from broker {a}")
    assert has_log(cluster, c, topic)

    assert_log_is(cluster.bootstrap, topic, before)
    after = produce_acks_all(cluster.bootstrap, topic, "after")
    assert [offset for offset, _ in after] == list(range(len(before), len(before) + len(after)))
    assert_log_is(cluster.bootstrap, topic, before + after)


def test_a_grown_replication_factor_survives_the_loss_of_the_first_replica(cluster: ProxiedCluster) -> None:
    """The partition starts on the controller alone, so its kill also has the controller taking
    over read the assignment the reassignment wrote."""
    topic = "grown"
    a = view(cluster.bootstrap).controller
    b, c = (node_id for node_id in cluster.brokers if node_id != a)
    create_assigned(cluster, topic, [a])
    before = produce_acks_all(cluster.bootstrap, topic, "before")

    with reassigner(cluster.bootstrap) as client:
        assert reassign(client, topic, [a, b, c]) is None
        wait_for_end(client, topic, Ongoing(replicas=(a, b, c), adding=(b, c), removing=()))
        wait_until(
            lambda: placed(cluster, topic, (a, b, c), list(cluster.brokers)),
            "Metadata from every broker to name replicas and ISR [a, b, c]",
            REASSIGNMENT_WAIT_S,
        )
    assert view(cluster.bootstrap, topic).partitions[(topic, 0)].leader == a

    cluster.brokers[a].kill()
    survivors = bootstrap_of(cluster, [b, c])
    wait_until(
        lambda: view(survivors, topic).partitions[(topic, 0)].leader in (b, c),
        "a new leader among the replicas added",
    )
    assert_log_is(survivors, topic, before)
    after = produce_acks_all(survivors, topic, "after")
    assert_log_is(survivors, topic, before + after)


def test_a_new_controller_ends_a_reassignment_the_killed_one_started(cluster: ProxiedCluster) -> None:
    """The controller a leads the partition [a, b] and starts its move to [b, c]; c's requests to a
    and b are held by the proxy, so c cannot catch up (from a, then from b) and the move cannot
    end before a is kill -9'ed. The controller elected next reads the move from ZooKeeper, lists
    it, and ends it once c's requests go through. Either b or c is elected; if c, its commands to b
    are held until then too (they take the same link as its fetches)."""
    topic = "moved-across-controllers"
    a = view(cluster.bootstrap).controller
    b, c = (node_id for node_id in cluster.brokers if node_id != a)
    survivors = [b, c]
    create_assigned(cluster, topic, [a, b])
    before = produce_acks_all(cluster.bootstrap, topic, "before")
    in_progress = {(topic, 0): Ongoing(replicas=(b, c, a), adding=(c,), removing=(a,))}
    try:
        for leader in (a, b):
            cluster.proxy.cut(broker_name(c), broker_name(leader), Fault.BLACKHOLE, Direction.FORWARD)
        with reassigner(cluster.bootstrap) as client:
            assert reassign(client, topic, [b, c]) is None
            assert ongoing(client, topic) == in_progress
        wait_until(
            lambda: placed(cluster, topic, (b, c, a), list(cluster.brokers), isr=(a, b)),
            "Metadata from every broker to name the joining replica, outside the ISR",
        )

        cluster.brokers[a].kill()
        # c hears of the new controller whichever it is (b's requests to c are not held); b does
        # not if c is elected (c's commands to b are held with its fetches), and names a meanwhile.
        joining = cluster.brokers[c].address
        wait_until(
            lambda: view(joining).controller not in (a, -1),
            f"a controller other than the killed {a}",
            SESSION_TIMEOUT_MS / 1000 + 20,
        )
        with controller_reassigner(joining) as client:
            assert ongoing(client) == in_progress
            cluster.proxy.heal()  # what c sent meanwhile gets through: it catches up from b
            wait_for_end(client, topic, in_progress[(topic, 0)])
        wait_until(
            lambda: placed(cluster, topic, (b, c), survivors),
            "Metadata from every live broker to name replicas and ISR [b, c]",
            REASSIGNMENT_WAIT_S,
        )
        assert has_log(cluster, c, topic) and has_log(cluster, a, topic)

        restart(cluster.brokers[a])
        wait_until(lambda: not has_log(cluster, a, topic), f"the restarted broker {a} to delete its copy")
        wait_until(
            lambda: placed(cluster, topic, (b, c), list(cluster.brokers)),
            "Metadata from every broker, the restarted one too, to name replicas and ISR [b, c]",
        )
        assert_log_is(cluster.bootstrap, topic, before)
        after = produce_acks_all(cluster.bootstrap, topic, "after")
        assert [offset for offset, _ in after] == list(range(len(before), len(before) + len(after)))
        assert_log_is(cluster.bootstrap, topic, before + after)
    finally:
        cluster.proxy.heal()
        cluster.restart_stopped()


def test_refused_reassignments_change_nothing(cluster: ProxiedCluster) -> None:
    topic = "refused"
    create_assigned(cluster, topic, [1, 2])
    with reassigner(cluster.bootstrap) as client:
        assert reassign(client, topic, [1, 99]) is InvalidReplicationAssignmentError
        assert reassign(client, topic, [1, 1]) is InvalidReplicationAssignmentError
        assert reassign(client, topic, None) is NoReassignmentInProgressError
        assert NoReassignmentInProgressError.errno == 85
        assert reassign(client, "no-such-topic", [1, 2]) is UnknownTopicOrPartitionError
        assert ongoing(client) == {}
    assert placed(cluster, topic, (1, 2), list(cluster.brokers))


def test_a_cancelled_reassignment_deletes_the_joining_replica(cluster: ProxiedCluster) -> None:
    """Broker c's requests to the leader a are held by the proxy: c hears of the reassignment
    (from the controller b) and makes the partition's log, but cannot fetch, so it never joins
    the ISR. Cancelled, the replicas are [a, b] again and c's log is deleted."""
    b = view(cluster.bootstrap).controller
    a, c = (node_id for node_id in cluster.brokers if node_id != b)
    topic = "cancelled-joining"
    create_assigned(cluster, topic, [a, b])
    before = produce_acks_all(cluster.bootstrap, topic, "before")
    cluster.proxy.cut(broker_name(c), broker_name(a), Fault.BLACKHOLE, Direction.FORWARD)

    with reassigner(cluster.bootstrap) as client:
        assert reassign(client, topic, [a, b, c]) is None
        in_progress = {(topic, 0): Ongoing(replicas=(a, b, c), adding=(c,), removing=())}
        assert ongoing(client, topic) == in_progress
        wait_until(lambda: has_log(cluster, c, topic), f"broker {c} to make the joining replica's log")
        wait_until(
            lambda: placed(cluster, topic, (a, b, c), list(cluster.brokers), isr=(a, b)),
            "Metadata from every broker to name the joining replica, outside the ISR",
        )
        assert ongoing(client) == in_progress

        assert reassign(client, topic, None) is None
        assert ongoing(client) == {}
        wait_until(
            lambda: placed(cluster, topic, (a, b), list(cluster.brokers)),
            "Metadata from every broker to name the original replicas again",
        )
        wait_until(
            lambda: not has_log(cluster, c, topic), f"the joining replica's log deleted from broker {c}"
        )
        cluster.proxy.heal()  # what c sent a meanwhile gets there now
        assert reassign(client, topic, None) is NoReassignmentInProgressError
    after = produce_acks_all(cluster.bootstrap, topic, "after")
    assert_log_is(cluster.bootstrap, topic, before + after)
    assert not has_log(cluster, c, topic)
    assert placed(cluster, topic, (a, b), list(cluster.brokers))


def test_a_reassignment_to_a_paused_broker_is_cancelled(cluster: ProxiedCluster) -> None:
    """Broker c (not the controller) is paused before the reassignment adding it is asked, and stays
    paused until its session expires: it never catches up, so the move stays in progress."""
    topic = "cancelled-paused"
    controller = view(cluster.bootstrap).controller
    c = max(node_id for node_id in cluster.brokers if node_id != controller)
    a, b = (node_id for node_id in cluster.brokers if node_id != c)
    create_assigned(cluster, topic, [a, b])
    before = produce_acks_all(cluster.bootstrap, topic, "before")
    others = bootstrap_of(cluster, [a, b])
    paused = cluster.brokers[c]

    with reassigner(others) as client:
        assert ongoing(client) == {}  # connected to the controller before c stops answering
        paused.signal(signal.SIGSTOP)
        try:
            assert reassign(client, topic, [a, b, c]) is None
            in_progress = {(topic, 0): Ongoing(replicas=(a, b, c), adding=(c,), removing=())}
            assert ongoing(client, topic) == in_progress
            wait_until(lambda: c not in view(others).brokers, f"broker {c}'s session to expire")
            wait_until(
                lambda: placed(cluster, topic, (a, b, c), [a, b], isr=(a, b)),
                "Metadata to name the joining replica, outside the ISR",
            )
            during = produce_acks_all(others, topic, "during")
            assert ongoing(client) == in_progress
            assert reassign(client, topic, [a, c]) is InvalidReplicationAssignmentError
            assert ongoing(client) == in_progress

            assert reassign(client, topic, None) is None
            assert ongoing(client) == {}
            wait_until(
                lambda: placed(cluster, topic, (a, b), [a, b]),
                "Metadata to name the original replicas again",
            )
            assert reassign(client, topic, None) is NoReassignmentInProgressError
            after = produce_acks_all(others, topic, "after")
            assert_log_is(others, topic, before + during + after)
        finally:
            paused.signal(signal.SIGCONT)
    heal(cluster)
    assert placed(cluster, topic, (a, b), list(cluster.brokers))
