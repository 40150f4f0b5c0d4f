"""range and roundrobin agree with kafka-python's independent implementations on random groups.

Only dynamic members: kafka-python groups static and dynamic members with itertools.groupby over an
unsorted list, which drops members of mixed groups, so static membership is checked by hand instead
(test_range_round_robin.py). And kafka-python 3.0's roundrobin fails with KeyError as soon as it has to
skip a member (it takes the next (instance id, member id) pair as a member id), so roundrobin is
compared on equal subscriptions only; uneven ones are checked by hand.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.assignors import Assignor, GroupMember, RangeAssignor, RoundRobinAssignor, Subscription
from tests.unit.assignors import kafka_python

pytestmark = pytest.mark.filterwarnings(kafka_python.IGNORE_KAFKA_PYTHON_WARNING)


class FakeCluster:
    def __init__(self, partitions_per_topic: dict[str, int]) -> None:
        self.partitions_per_topic = partitions_per_topic

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        if topic not in self.partitions_per_topic:
            return None
        return set(range(self.partitions_per_topic[topic]))


@st.composite
def random_groups(draw: st.DrawFn, equal_subscriptions: bool) -> tuple[dict[str, int], dict[str, list[str]]]:
    partitions_per_topic = {
        f"topic-{index}": draw(st.integers(1, 9)) for index in range(draw(st.integers(1, 4)))
    }
    member_ids = draw(
        st.lists(st.text("abc-12", min_size=1, max_size=5), min_size=1, max_size=7, unique=True)
    )
    topics = st.lists(st.sampled_from(sorted(partitions_per_topic)), min_size=1, unique=True)
    if equal_subscriptions:
        shared = draw(topics)
        topics_of = {member_id: shared for member_id in member_ids}
    else:
        topics_of = {member_id: draw(topics) for member_id in member_ids}
    return partitions_per_topic, topics_of


@settings(max_examples=60, deadline=None)
@given(group=random_groups(equal_subscriptions=False))
def test_range_same_result_as_kafka_python(group: tuple[dict[str, int], dict[str, list[str]]]) -> None:
    check_same_result(RangeAssignor(), kafka_python.RangePartitionAssignor, *group)


@settings(max_examples=60, deadline=None)
@given(group=random_groups(equal_subscriptions=True))
def test_round_robin_same_result_as_kafka_python(group: tuple[dict[str, int], dict[str, list[str]]]) -> None:
    check_same_result(RoundRobinAssignor(), kafka_python.RoundRobinPartitionAssignor, *group)


def check_same_result(
    ours: Assignor, theirs: Any, partitions_per_topic: dict[str, int], topics_of: dict[str, list[str]]
) -> None:
    members = [
        GroupMember(member_id=member_id, group_instance_id=None, subscription=Subscription(topics=topics))
        for member_id, topics in topics_of.items()
    ]
    their_members = [
        SimpleNamespace(member_id=member_id, group_instance_id=None, metadata=SimpleNamespace(topics=topics))
        for member_id, topics in topics_of.items()
    ]
    our_result = ours.assign(partitions_per_topic, members)
    their_result = theirs.assign(FakeCluster(partitions_per_topic), their_members)
    assert {member_id: sorted(assignment.partitions) for member_id, assignment in our_result.items()} == {
        member_id: sorted((tp.topic, tp.partition) for tp in assignment.partitions())
        for member_id, assignment in their_result.items()
    }
