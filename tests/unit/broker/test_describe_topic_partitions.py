"""DescribeTopicPartitions 0: topics sorted by name, pages of at most response_partition_limit
partitions, a next cursor where the next page starts, as Kafka answers it."""

from __future__ import annotations

from strom.protocol.acl import TOPIC_OPERATIONS
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
)
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import create_topic

Cursor = DescribeTopicPartitionsRequest.Cursor


def _describe(
    broker: InProcessBroker, topics: list[str], limit: int = 2000, cursor: Cursor | None = None
) -> DescribeTopicPartitionsResponse:
    request = DescribeTopicPartitionsRequest(
        topics=[DescribeTopicPartitionsRequest.TopicRequest(name=name) for name in topics],
        response_partition_limit=limit,
        cursor=cursor,
    )
    response: DescribeTopicPartitionsResponse = broker.call(request, 0)
    return response


def _pages(broker: InProcessBroker, topics: list[str], limit: int) -> list[list[tuple[str, list[int]]]]:
    """Every page until the cursor runs out: per page, (topic, partition indexes)."""
    pages = []
    cursor = None
    while True:
        response = _describe(broker, topics, limit, cursor)
        pages.append([(t.name, [p.partition_index for p in t.partitions]) for t in response.topics])
        if response.next_cursor is None:
            return pages
        cursor = Cursor(
            topic_name=response.next_cursor.topic_name, partition_index=response.next_cursor.partition_index
        )


def test_named_topics_are_described_sorted_with_their_operations(broker: InProcessBroker) -> None:
    create_topic(broker, "beta", partitions=2)
    create_topic(broker, "alpha", partitions=1)
    response = _describe(broker, ["beta", "alpha", "absent", "bad name!"])
    by_name = {topic.name: topic for topic in response.topics}
    assert [t.name for t in response.topics if t.error_code == ErrorCode.NONE] == ["alpha", "beta"]
    assert by_name["absent"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert by_name["bad name!"].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    beta = by_name["beta"]
    assert beta.topic_id.int != 0 and beta.topic_authorized_operations == TOPIC_OPERATIONS
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) for p in beta.partitions] == [
        (0, 0, [0], [0]),
        (1, 0, [0], [0]),
    ]
    assert response.next_cursor is None


def test_an_empty_list_describes_every_existing_topic(broker: InProcessBroker) -> None:
    create_topic(broker, "one")
    create_topic(broker, "two", partitions=3)
    response = _describe(broker, [])
    assert [(t.name, len(t.partitions)) for t in response.topics] == [("one", 1), ("two", 3)]


def test_pages_cover_every_partition_once(broker: InProcessBroker) -> None:
    create_topic(broker, "a", partitions=3)
    create_topic(broker, "b", partitions=1)
    create_topic(broker, "c", partitions=4)
    assert _pages(broker, [], 3) == [
        [("a", [0, 1, 2])],
        [("b", [0]), ("c", [0, 1])],
        [("c", [2, 3])],
    ]
    assert _pages(broker, ["c", "a"], 2) == [
        [("a", [0, 1])],
        [("a", [2]), ("c", [0])],
        [("c", [1, 2])],
        [("c", [3])],
    ]
    # A limit of zero or less still makes progress (one partition a page).
    assert _pages(broker, ["b"], 0) == [[("b", [0])]]


def test_a_cursor_outside_the_topics_asked_for_is_an_invalid_request(broker: InProcessBroker) -> None:
    create_topic(broker, "a")
    response = _describe(broker, ["a"], cursor=Cursor(topic_name="zzz", partition_index=0))
    assert [(t.name, t.error_code) for t in response.topics] == [("a", ErrorCode.INVALID_REQUEST)]
    negative = _describe(broker, ["a"], cursor=Cursor(topic_name="a", partition_index=-1))
    assert [t.error_code for t in negative.topics] == [ErrorCode.INVALID_REQUEST]


def test_a_cursor_on_a_deleted_topic_moves_on_to_the_next(broker: InProcessBroker) -> None:
    create_topic(broker, "m", partitions=2)
    response = _describe(broker, [], cursor=Cursor(topic_name="gone", partition_index=5))
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in response.topics] == [("m", [0, 1])]
