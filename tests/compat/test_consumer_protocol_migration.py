"""Moving a live group between the classic protocol and the consumer protocol (KIP-848), member by
member, as a rolling restart does — with librdkafka members and with kafka-python's classic one.

- a classic group (cooperative-sticky, and eager range) of three confluent-kafka members is
  restarted one member at a time with ``group.protocol=consumer`` and then one at a time back to
  classic, while a producer writes: the coordinator converts the group online each way; every
  record acknowledged to the producer is consumed; no partition is ever assigned to a member while
  another still owns it (the callbacks of all nine members replayed in order); the group's
  committed offsets are never lost nor moved back by a conversion; no member reports an error;
- a kafka-python member (classic protocol only) joins a group of a consumer-protocol member,
  shares the partitions, and leaves them back.
"""

from __future__ import annotations

import itertools
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.compat.conftest import BrokerProcess
from tests.compat.consumer_protocol_support import (
    CONSUMER_PROTOCOL_BROKER_SETTINGS,
    ContinuousProducer,
    Ledger,
    ProtocolMember,
    named_partitions,
)
from tests.compat.support import create_topic, unique_topic
from tests.compat.test_groups_helpers import (
    ConfluentMember,
    all_partitions,
    committed_offsets,
    stop_all,
    wait_until,
    wait_until_stable,
)

_KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=_KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka import KafkaConsumer

pytestmark = [
    pytest.mark.compat,
    pytest.mark.filterwarnings(f"ignore:{_KAFKA_PYTHON_WARNING}:DeprecationWarning"),
]

PARTITIONS = 6
MEMBERS = 3
CONSUMED_TIMEOUT_S = 40.0


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return dict(CONSUMER_PROTOCOL_BROKER_SETTINGS)


class ClassicMember(ConfluentMember):
    """A classic-protocol confluent-kafka member that commits what it gives up (so the next owner,
    of either protocol, resumes there) and tells the ledger of every callback."""

    def __init__(
        self, name: str, bootstrap: str, group: str, topics: Sequence[str], ledger: Ledger, strategy: str
    ) -> None:
        super().__init__(name, bootstrap, group, topics, partition_assignment_strategy=strategy)
        self.ledger = ledger

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.ledger.add(self.name, "assign", named_partitions(partitions))
        super()._on_assign(consumer, partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        positions = [position for position in consumer.position(partitions) if position.offset >= 0]
        if positions:
            consumer.commit(offsets=positions, asynchronous=False)
        self.ledger.add(self.name, "revoke", named_partitions(partitions))
        super()._on_revoke(consumer, partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.ledger.add(self.name, "lost", named_partitions(partitions))
        super()._on_lost(consumer, partitions)


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_a_rolling_restart_moves_a_classic_group_to_the_consumer_protocol_and_back(
    shared_broker: BrokerProcess, strategy: str
) -> None:
    bootstrap = shared_broker.bootstrap
    topic, group = unique_topic("migrate"), unique_topic("migrate-group")
    create_topic(bootstrap, topic, PARTITIONS)
    everything = all_partitions(topic, PARTITIONS)
    ledger = Ledger()
    members: list[Any] = [
        ClassicMember(f"classic-{index}", bootstrap, group, [topic], ledger, strategy).start()
        for index in range(MEMBERS)
    ]
    everyone: list[Any] = list(members)
    producer = ContinuousProducer(bootstrap, topic).start()
    committed_history: list[dict[int, int]] = []
    try:
        wait_until_stable(members, everything)
        # Each member restarted speaking the consumer protocol, then each back to classic.
        makers: list[Callable[[int], Any]] = [
            lambda index: ProtocolMember(f"consumer-{index}", bootstrap, group, [topic], ledger),
            lambda index: ClassicMember(f"back-{index}", bootstrap, group, [topic], ledger, strategy),
        ]
        for make in makers:
            for index in range(MEMBERS):
                members[index].stop()  # its revocation commits what it consumed
                committed_history.append(committed_offsets(bootstrap, group, topic, PARTITIONS))
                members[index] = make(index).start()
                everyone.append(members[index])
                wait_until_stable(members, everything)
            committed_history.append(committed_offsets(bootstrap, group, topic, PARTITIONS))
    finally:
        sent = producer.stop()
    try:
        expected = Counter(sent)

        def received() -> Counter[tuple[int, int]]:
            return Counter((r.partition, r.offset) for member in everyone for r in member.snapshot().records)

        wait_until(
            lambda: not (expected - received()),
            CONSUMED_TIMEOUT_S,
            lambda: (
                f"{sum((expected - received()).values())} of {len(sent)} acknowledged records never consumed"
            ),
        )
    finally:
        stop_all(member for member in members if not member.closed.is_set())
    assert not received() - expected, "records received that were never acknowledged"
    assert not ledger.double_ownership(), ledger.double_ownership()[:5]
    for member in everyone:
        assert not member.snapshot().errors, (member.name, member.snapshot().errors[:5])
    # Offsets survive every conversion: each partition's committed offset, once there, stays and
    # never moves back.
    for before, after in itertools.pairwise(committed_history):
        for partition, offset in before.items():
            if offset >= 0:
                assert after[partition] >= offset, (partition, committed_history)
    assert all(offset >= 0 for offset in committed_history[-1].values()), committed_history[-1]


def test_a_kafka_python_member_shares_a_consumer_protocol_group(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    topic, group = unique_topic("mixed"), unique_topic("mixed-group")
    create_topic(bootstrap, topic, 4)
    ledger = Ledger()
    member = ProtocolMember("consumer-0", bootstrap, group, [topic], ledger).start()
    try:
        wait_until(lambda: len(member.current_assignment()) == 4, 30, lambda: "the first member never got 4")
        classic = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            session_timeout_ms=6000,
            heartbeat_interval_ms=300,
            enable_auto_commit=False,
        )
        try:

            def shared() -> bool:
                classic.poll(timeout_ms=200)
                return len(classic.assignment()) == 2 and len(member.current_assignment()) == 2

            wait_until(
                shared,
                30,
                lambda: (
                    f"kafka-python {sorted(classic.assignment())}, consumer {sorted(member.current_assignment())}"
                ),
            )
            assert not {(p.topic, p.partition) for p in classic.assignment()} & member.current_assignment()
        finally:
            classic.close()
        wait_until(
            lambda: len(member.current_assignment()) == 4, 30, lambda: "the partitions never came back"
        )
    finally:
        stop_all([member])
    assert not ledger.double_ownership(), ledger.double_ownership()[:5]
