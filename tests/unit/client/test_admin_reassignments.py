"""Admin partition reassignments without a broker: the requests as the broker reads them, each
partition's outcome read from the answer (errors returned, not raised; the request's own error
raised), the moves in progress, and the way to the controller: asked again once on NOT_CONTROLLER."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from strom.client.admin import (
    PartitionReassignment,
    alter_partition_reassignments_request,
    list_partition_reassignments_request,
    reassignment_errors_from,
    reassignments_from,
    send_to_controller,
)
from strom.client.cluster import TopicPartition
from strom.client.errors import (
    BrokerResponseError,
    KafkaConnectionError,
    ProtocolError,
    UnknownTopicOrPartitionError,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsResponse,
)
from strom.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)

A0 = TopicPartition("a", 0)
A2 = TopicPartition("a", 2)
B1 = TopicPartition("b", 1)


def wire(message: Any) -> Any:
    """``message`` as the other side reads it (both APIs have version 0 only)."""
    return type(message).decode(memoryview(message.encode(0)), 0)


def alter_response(
    *partitions: tuple[TopicPartition, ErrorCode, str | None], error: ErrorCode = ErrorCode.NONE
) -> AlterPartitionReassignmentsResponse:
    by_topic: dict[str, list[AlterPartitionReassignmentsResponse.ReassignablePartitionResponse]] = {}
    for tp, code, message in partitions:
        by_topic.setdefault(tp.topic, []).append(
            AlterPartitionReassignmentsResponse.ReassignablePartitionResponse(
                partition_index=tp.partition, error_code=code, error_message=message
            )
        )
    response = AlterPartitionReassignmentsResponse(
        error_code=error,
        error_message=None if error == ErrorCode.NONE else error.name,
        responses=[
            AlterPartitionReassignmentsResponse.ReassignableTopicResponse(name=name, partitions=items)
            for name, items in by_topic.items()
        ],
    )
    return wire(response)


# -- AlterPartitionReassignments ---------------------------------------------------------------------


def test_the_request_names_each_partition_once_sorted_and_a_cancellation_as_null() -> None:
    sent = wire(alter_partition_reassignments_request({B1: [3, 1], A2: None, A0: (2, 3)}, 15_000))
    assert sent.timeout_ms == 15_000
    assert [
        (topic.name, [(partition.partition_index, partition.replicas) for partition in topic.partitions])
        for topic in sent.topics
    ] == [("a", [(0, [2, 3]), (2, None)]), ("b", [(1, [3, 1])])]


def test_each_partition_outcome_is_returned_not_raised() -> None:
    response = alter_response(
        (A0, ErrorCode.NONE, None),
        (A2, ErrorCode.INVALID_REPLICA_ASSIGNMENT, "brokers [9] are not registered (not alive)"),
        (B1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None),
    )
    outcomes = reassignment_errors_from(response, {A0: [1], A2: [9], B1: [1]})
    assert outcomes[A0] is None
    refused = outcomes[A2]
    assert isinstance(refused, BrokerResponseError)
    assert refused.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert str(refused) == (
        "reassign a-2: brokers [9] are not registered (not alive) (INVALID_REPLICA_ASSIGNMENT)"
    )
    assert isinstance(outcomes[B1], UnknownTopicOrPartitionError)
    assert str(outcomes[B1]) == "reassign b-1: no such topic or partition (UNKNOWN_TOPIC_OR_PARTITION)"


def test_a_refused_cancellation_says_it_was_one() -> None:
    response = alter_response(
        (A0, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "no reassignment of a-0 is in progress")
    )
    refused = reassignment_errors_from(response, {A0: None})[A0]
    assert refused is not None and refused.code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert str(refused).startswith("cancel the reassignment of a-0: no reassignment of a-0 is in progress")


def test_the_request_own_error_is_raised() -> None:
    response = alter_response(error=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    with pytest.raises(
        BrokerResponseError, match=r"reassign partitions: .*CLUSTER_AUTHORIZATION_FAILED"
    ) as raised:
        reassignment_errors_from(response, {A0: [1]})
    assert raised.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def test_an_answer_that_leaves_a_partition_out_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="does not name a-2, b-1"):
        reassignment_errors_from(alter_response((A0, ErrorCode.NONE, None)), {A0: [1], A2: [1], B1: None})


# -- ListPartitionReassignments ----------------------------------------------------------------------


def test_the_list_request_asks_for_every_partition_or_the_ones_named() -> None:
    assert wire(list_partition_reassignments_request(None)).topics is None
    sent = wire(list_partition_reassignments_request([B1, A2, A0, A2]))
    assert [(topic.name, topic.partition_indexes) for topic in sent.topics] == [("a", [0, 2]), ("b", [1])]


def test_the_moves_in_progress_sorted_by_partition() -> None:
    def ongoing(
        index: int, replicas: list[int], adding: list[int], removing: list[int]
    ) -> ListPartitionReassignmentsResponse.OngoingPartitionReassignment:
        return ListPartitionReassignmentsResponse.OngoingPartitionReassignment(
            partition_index=index, replicas=replicas, adding_replicas=adding, removing_replicas=removing
        )

    response = ListPartitionReassignmentsResponse(
        topics=[
            ListPartitionReassignmentsResponse.OngoingTopicReassignment(
                name="b", partitions=[ongoing(1, [2, 3, 1], [3], [1])]
            ),
            ListPartitionReassignmentsResponse.OngoingTopicReassignment(
                name="a", partitions=[ongoing(2, [1, 2, 3], [], [3]), ongoing(0, [3, 1], [3], [])]
            ),
        ]
    )
    found = reassignments_from(wire(response))
    assert list(found) == [A0, A2, B1]
    assert found[B1] == PartitionReassignment((2, 3, 1), (3,), (1,))
    assert found[A2] == PartitionReassignment((1, 2, 3), (), (3,))
    with pytest.raises(BrokerResponseError, match=r"list partition reassignments: .*NOT_CONTROLLER"):
        reassignments_from(wire(ListPartitionReassignmentsResponse(error_code=ErrorCode.NOT_CONTROLLER)))


# -- the way to the controller -----------------------------------------------------------------------


@dataclass
class FakeMetadata:
    controller_id: int
    brokers: dict[int, object]


@dataclass
class FakeTransport:
    """Metadata names ``controller``; each refresh names the next of ``learned``. A broker answers
    NOT_CONTROLLER unless it is in ``controllers``."""

    controller: int
    learned: list[int]
    controllers: set[int]
    gone: set[int] = field(default_factory=set)  # brokers that cannot be reached
    metadata: FakeMetadata = field(init=False)
    sent_to: list[int] = field(default_factory=list)
    refreshes: int = 0

    def __post_init__(self) -> None:
        self.metadata = FakeMetadata(self.controller, {1: object(), 2: object(), 3: object()})

    async def refresh_metadata(self, topics: list[str] | None = None) -> None:
        assert topics == []
        self.refreshes += 1
        self.metadata.controller_id = self.learned.pop(0)

    async def send(self, node_id: int, request: Any) -> ListPartitionReassignmentsResponse:
        self.sent_to.append(node_id)
        if node_id in self.gone:
            raise KafkaConnectionError(f"cannot connect to broker {node_id}")
        error = ErrorCode.NONE if node_id in self.controllers else ErrorCode.NOT_CONTROLLER
        return ListPartitionReassignmentsResponse(error_code=error)

    async def send_any(self, request: Any) -> ListPartitionReassignmentsResponse:
        return await self.send(-1, request)


def ask(transport: FakeTransport, *, retry: bool = True) -> int:
    """The top-level error code of the answer ``send_to_controller`` ends with."""

    def error_of(answer: Any) -> int:
        return int(answer.error_code)

    response = asyncio.run(
        send_to_controller(
            transport,  # type: ignore[arg-type]
            ListPartitionReassignmentsRequest(),
            error_of if retry else None,
        )
    )
    return int(response.error_code)


def test_the_controller_metadata_names_is_asked() -> None:
    transport = FakeTransport(controller=2, learned=[], controllers={2})
    assert ask(transport) == ErrorCode.NONE
    assert (transport.sent_to, transport.refreshes) == ([2], 0)


def test_not_controller_looks_the_controller_up_again_and_asks_it_once() -> None:
    transport = FakeTransport(controller=1, learned=[3], controllers={3})
    assert ask(transport) == ErrorCode.NONE
    assert (transport.sent_to, transport.refreshes) == ([1, 3], 1)


def test_a_controller_that_cannot_be_reached_is_looked_up_again() -> None:
    """Found by a chaos campaign: the controller killed, the admin client kept asking it (its
    Metadata named it) until something else refreshed the metadata."""
    transport = FakeTransport(controller=1, learned=[3], controllers={3}, gone={1})
    assert ask(transport) == ErrorCode.NONE
    assert (transport.sent_to, transport.refreshes) == ([1, 3], 1)
    still_gone = FakeTransport(controller=1, learned=[1], controllers={3}, gone={1})
    with pytest.raises(KafkaConnectionError):
        ask(still_gone)


def test_a_second_not_controller_is_the_answer() -> None:
    transport = FakeTransport(controller=1, learned=[2, 3], controllers={3})
    assert ask(transport) == ErrorCode.NOT_CONTROLLER
    assert (transport.sent_to, transport.refreshes) == ([1, 2], 1)


def test_without_a_way_to_read_the_error_nothing_is_sent_again() -> None:
    transport = FakeTransport(controller=1, learned=[3], controllers={3})
    assert ask(transport, retry=False) == ErrorCode.NOT_CONTROLLER
    assert (transport.sent_to, transport.refreshes) == ([1], 0)


def test_an_unknown_controller_is_looked_up_and_without_one_any_broker_is_asked() -> None:
    transport = FakeTransport(controller=-1, learned=[2], controllers={2})
    assert ask(transport) == ErrorCode.NONE
    assert (transport.sent_to, transport.refreshes) == ([2], 1)
    nobody = FakeTransport(controller=-1, learned=[-1], controllers={-1})
    assert ask(nobody) == ErrorCode.NONE
    assert nobody.sent_to == [-1]
