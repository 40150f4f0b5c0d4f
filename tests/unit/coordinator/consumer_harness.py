"""A coordinator speaking the consumer group protocol (KIP-848) over a manual clock, manual timers,
an in-memory __consumer_offsets and a fake set of topics; and simulated members."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from strom.assignors.server import GroupSpec, ServerAssignor, TargetAssignment, TopicSpec
from strom.coordinator import CoordinatorConfig, GroupCoordinator
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from strom.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from tests.unit.coordinator.harness import Harness, encoded

Partitions = dict[uuid.UUID, frozenset[int]]


class FakeTopics:
    """The cluster's topics as the coordinator sees them."""

    def __init__(self) -> None:
        self.specs: dict[str, TopicSpec] = {}

    def create(self, name: str, partitions: int) -> uuid.UUID:
        topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, name)
        self.specs[name] = TopicSpec(topic_id=topic_id, name=name, partition_count=partitions)
        return topic_id

    def delete(self, name: str) -> None:
        del self.specs[name]

    def topic(self, name: str) -> TopicSpec | None:
        return self.specs.get(name)

    def topic_names(self) -> Iterable[str]:
        return list(self.specs)


class StickyRoundRobin(ServerAssignor):
    """A test assignor: members keep what they had while that stays balanced, the rest is dealt
    round-robin in member order. (The real ones are tested in tests/assignors/server.)"""

    name = "uniform"

    def assign(self, group: GroupSpec) -> dict[str, TargetAssignment]:
        result: dict[str, dict[uuid.UUID, set[int]]] = {member_id: {} for member_id in group.members}
        for topic_id, topic in sorted(group.topics.items()):
            subscribers = sorted(
                member_id
                for member_id, member in group.members.items()
                if topic_id in member.subscribed_topic_ids
            )
            if not subscribers:
                continue
            quota, extras = divmod(topic.partition_count, len(subscribers))
            taken: set[int] = set()
            counts = dict.fromkeys(subscribers, 0)
            for member_id in subscribers:
                for partition in sorted(group.members[member_id].assigned.get(topic_id, ())):
                    if partition >= topic.partition_count or partition in taken:
                        continue
                    if counts[member_id] < quota or (counts[member_id] == quota and extras > 0):
                        if counts[member_id] == quota:
                            extras -= 1
                        result[member_id].setdefault(topic_id, set()).add(partition)
                        counts[member_id] += 1
                        taken.add(partition)
            for partition in range(topic.partition_count):
                if partition in taken:
                    continue
                member_id = min(subscribers, key=lambda m: (counts[m], m))
                result[member_id].setdefault(topic_id, set()).add(partition)
                counts[member_id] += 1
        return {
            member_id: {topic_id: frozenset(parts) for topic_id, parts in topics.items()}
            for member_id, topics in result.items()
        }


class RangeForTests(StickyRoundRobin):
    name = "range"


def test_assignors() -> dict[str, ServerAssignor]:
    return {"uniform": StickyRoundRobin(), "range": RangeForTests()}


test_assignors.__test__ = False  # type: ignore[attr-defined]


class ConsumerHarness(Harness):
    def __init__(
        self, config: CoordinatorConfig | None = None, *, real_assignors: bool = False, **overrides: Any
    ) -> None:
        self.topics = FakeTopics()
        self.real_assignors = real_assignors
        base = dict(
            group_initial_rebalance_delay_ms=0,
            offsets_topic_num_partitions=1,
            consumer_group_session_timeout_ms=10_000,
            consumer_group_heartbeat_interval_ms=1000,
        )
        base.update(overrides)
        super().__init__(config or CoordinatorConfig(**base))  # type: ignore[arg-type]

    def _build(self) -> GroupCoordinator:
        if self.real_assignors:
            return GroupCoordinator(self.config, self.clock, self.timer, self.log, self.topics)
        return GroupCoordinator(
            self.config, self.clock, self.timer, self.log, self.topics, assignors=test_assignors()
        )

    def heartbeat_raw(self, request: ConsumerGroupHeartbeatRequest, version: int = 1) -> list[Any]:
        request = encoded(request, version)
        box: list[ConsumerGroupHeartbeatResponse] = []
        self.coordinator.consumer_group_heartbeat(
            request, version, "client", "/127.0.0.1", lambda response: box.append(encoded(response, version))
        )
        return box

    def heartbeat(
        self,
        group_id: str = "g",
        member_id: str = "",
        epoch: int = 0,
        *,
        names: list[str] | None = None,
        regex: str | None = None,
        owned: Partitions | None = None,
        instance_id: str | None = None,
        rebalance_timeout_ms: int = -1,
        assignor: str | None = None,
        rack: str | None = None,
        version: int = 1,
    ) -> ConsumerGroupHeartbeatResponse:
        if epoch == 0 and rebalance_timeout_ms == -1:
            rebalance_timeout_ms = 5000
        request = ConsumerGroupHeartbeatRequest(
            group_id=group_id,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=instance_id,
            rack_id=rack,
            rebalance_timeout_ms=rebalance_timeout_ms,
            subscribed_topic_names=names,
            subscribed_topic_regex=regex,
            server_assignor=assignor,
            topic_partitions=None
            if owned is None
            else [
                ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=topic_id, partitions=sorted(parts))
                for topic_id, parts in sorted(owned.items())
            ],
        )
        box = self.heartbeat_raw(request, version)
        assert len(box) == 1, box
        response: ConsumerGroupHeartbeatResponse = box[0]
        return response

    def describe(self, *group_ids: str) -> list[ConsumerGroupDescribeResponse.DescribedGroup]:
        request = encoded(ConsumerGroupDescribeRequest(group_ids=list(group_ids)), 0)
        response = encoded(self.coordinator.consumer_group_describe(request, 0), 0)
        groups: list[ConsumerGroupDescribeResponse.DescribedGroup] = response.groups
        return groups


def assignment_of(response: ConsumerGroupHeartbeatResponse) -> Partitions | None:
    if response.assignment is None:
        return None
    return {
        entry.topic_id: frozenset(entry.partitions)
        for entry in response.assignment.topic_partitions
        if entry.partitions
    }


class SimulatedMember:
    """A member as a client runs it: it owns what the last assignment gave it (revoking at once)."""

    def __init__(
        self,
        harness: ConsumerHarness,
        names: list[str] | None = None,
        *,
        group_id: str = "g",
        regex: str | None = None,
        instance_id: str | None = None,
        member_id: str | None = None,
    ) -> None:
        self.harness = harness
        self.group_id = group_id
        self.names = names
        self.regex = regex
        self.instance_id = instance_id
        self.member_id = member_id if member_id is not None else str(uuid.uuid4())
        self.epoch = 0
        self.owned: Partitions = {}
        self.last: ConsumerGroupHeartbeatResponse | None = None

    def beat(self) -> ConsumerGroupHeartbeatResponse:
        joining = self.epoch == 0
        response = self.harness.heartbeat(
            self.group_id,
            self.member_id,
            self.epoch,
            names=self.names if joining else None,
            regex=self.regex if joining else None,
            owned=None if joining else self.owned,
            instance_id=self.instance_id,
        )
        self.last = response
        if response.error_code == ErrorCode.NONE:
            assert response.member_id == self.member_id
            self.epoch = response.member_epoch
            new = assignment_of(response)
            if new is not None:
                self.owned = new
        return response

    def leave(self, static: bool = False) -> ConsumerGroupHeartbeatResponse:
        response = self.harness.heartbeat(
            self.group_id, self.member_id, -2 if static else -1, instance_id=self.instance_id
        )
        self.owned = {}
        self.epoch = 0
        return response

    def partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(topic_id, p) for topic_id, parts in self.owned.items() for p in parts}


def assert_exclusive(members: Iterable[SimulatedMember]) -> None:
    """No partition is owned by two members."""
    seen: dict[tuple[uuid.UUID, int], str] = {}
    for member in members:
        for partition in member.partitions():
            assert partition not in seen, f"{partition} owned by {seen[partition]} and {member.member_id}"
            seen[partition] = member.member_id
