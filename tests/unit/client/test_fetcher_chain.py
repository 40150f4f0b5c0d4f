"""On a connected channel the fetcher sends its fetches as a chain of callbacks (``send_nowait``):
each answer is buffered and the next Fetch written where the answer is read. The chain stops as
the awaited fetches do, falls back to them when the channel cannot take a request, backs off after
a failure or a fetch left unanswered too long, and drops an answer that comes after it gave up.
A fake channel answers when the test says so; no sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from strom.client.cluster import TopicPartition
from strom.client.config import ConsumerConfig
from strom.client.consumer.fetcher import Fetcher
from strom.client.consumer.positions import SubscriptionState
from strom.client.errors import KafkaConnectionError
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from tests.unit.client.test_fetcher_prefetch import FETCH_BYTES, TP0, FakeTransport, batch_at

Callback = Callable[[Any, Any], None]


def offsets_asked(request: FetchRequest) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic.topic, partition.partition): partition.fetch_offset
        for topic in request.topics
        for partition in topic.partitions
    }


def answer_for(request: FetchRequest, error_code: int = ErrorCode.NONE) -> FetchResponse:
    return FetchResponse(
        error_code=error_code,
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic=tp.topic,
                partitions=[
                    FetchResponse.PartitionData(
                        partition_index=tp.partition, high_watermark=1_000, records=batch_at(offset)
                    )
                ],
            )
            for tp, offset in offsets_asked(request).items()
        ],
    )


@dataclass
class FakeChannel:
    """Takes requests with their callbacks; ``refuse`` makes ``send_nowait`` say it cannot."""

    sent: list[tuple[FetchRequest, Callback]] = field(default_factory=list)
    refuse: bool = False

    def send_nowait(self, request: FetchRequest, callback: Callback) -> bool:
        if self.refuse:
            return False
        self.sent.append((request, callback))
        return True

    def answer_last(self, error_code: int = ErrorCode.NONE) -> None:
        request, callback = self.sent[-1]
        callback(answer_for(request, error_code), None)


@dataclass
class ChannelTransport(FakeTransport):
    """The prefetch tests' transport (its awaited ``send``) with a connected channel besides."""

    fake_channel: FakeChannel = field(default_factory=FakeChannel)

    def ready_channel(self, node_id: int) -> FakeChannel:  # type: ignore[override]
        return self.fake_channel


def make_fetcher(
    buffer_fetches: float = 2.5, **settings: Any
) -> tuple[Fetcher, ChannelTransport, SubscriptionState]:
    config = ConsumerConfig.from_settings(
        bootstrap_servers="fake:9092",
        max_partition_fetch_bytes=int(FETCH_BYTES * buffer_fetches),
        retry_backoff_ms=1,
        **settings,
    )
    transport = ChannelTransport()
    transport.metadata.request_refresh = lambda: None  # type: ignore[method-assign]
    subscriptions = SubscriptionState("earliest")
    subscriptions.assign([TP0])
    subscriptions.seek(TP0, 0)
    fetcher = Fetcher(config, transport, subscriptions)  # type: ignore[arg-type]
    return fetcher, transport, subscriptions


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_each_answer_sends_the_next_fetch_from_its_callback_up_to_the_buffer_bound() -> None:
    async def scenario() -> None:
        fetcher, transport, subscriptions = make_fetcher()
        channel = transport.fake_channel
        task = asyncio.ensure_future(fetcher._fetch_from(1, {TP0: 0}))
        await settle()
        assert [offsets_asked(request) for request, _ in channel.sent] == [{TP0: 0}]
        channel.answer_last()  # buffered, and the next fetch written at once, in the callback
        assert [offsets_asked(request) for request, _ in channel.sent] == [{TP0: 0}, {TP0: 10}]
        channel.answer_last()
        channel.answer_last()  # the third answer fills the bound of 2.5 fetches: the chain stops
        await asyncio.wait_for(task, 1)
        assert len(channel.sent) == 3
        assert transport.fetched == []  # nothing went the awaited way
        assert [record.offset for record in subscriptions.take(100)] == list(range(30))

    asyncio.run(scenario())


def test_a_channel_that_cannot_take_the_request_sends_it_the_awaited_way() -> None:
    async def scenario() -> None:
        fetcher, transport, _subscriptions = make_fetcher()
        transport.fake_channel.refuse = True
        await asyncio.wait_for(fetcher._fetch_from(1, {TP0: 0}), 1)
        # Each fetch tried on the channel first, then sent through the transport, up to the bound.
        assert transport.fetched == [{TP0: 0}, {TP0: 10}, {TP0: 20}]

    asyncio.run(scenario())


def test_a_lost_connection_ends_the_chain_with_a_refresh_and_the_backoff() -> None:
    async def scenario() -> None:
        fetcher, transport, subscriptions = make_fetcher()
        refreshes: list[None] = []
        transport.metadata.request_refresh = lambda: refreshes.append(None)  # type: ignore[method-assign]
        channel = transport.fake_channel
        task = asyncio.ensure_future(fetcher._fetch_from(1, {TP0: 0}))
        await settle()
        _request, callback = channel.sent[-1]
        callback(None, KafkaConnectionError("connection to broker 1 lost"))
        await asyncio.wait_for(task, 1)
        assert refreshes == [None]
        assert len(channel.sent) == 1
        assert subscriptions.take(100) == []

    asyncio.run(scenario())


def test_a_fetch_error_of_the_whole_answer_backs_off() -> None:
    async def scenario() -> None:
        fetcher, transport, _subscriptions = make_fetcher()
        channel = transport.fake_channel
        task = asyncio.ensure_future(fetcher._fetch_from(1, {TP0: 0}))
        await settle()
        channel.answer_last(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        await asyncio.wait_for(task, 1)
        assert len(channel.sent) == 1

    asyncio.run(scenario())


def test_an_unanswered_fetch_ends_the_chain_and_a_late_answer_is_dropped() -> None:
    async def scenario() -> None:
        fetcher, transport, subscriptions = make_fetcher(request_timeout_ms=30, fetch_max_wait_ms=20)
        channel = transport.fake_channel
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(fetcher._fetch_from(1, {TP0: 0}), 2)
        assert asyncio.get_running_loop().time() - started >= 0.05  # request timeout + max wait
        channel.answer_last()  # too late: the chain gave up
        assert len(channel.sent) == 1
        assert subscriptions.take(100) == []

    asyncio.run(scenario())


def test_stopping_the_fetcher_drops_the_answer_in_flight() -> None:
    async def scenario() -> None:
        fetcher, transport, subscriptions = make_fetcher()
        channel = transport.fake_channel
        await fetcher._fetch_round()
        await settle()
        assert len(channel.sent) == 1
        await fetcher.stop()
        channel.answer_last()
        assert len(channel.sent) == 1
        assert subscriptions.take(100) == []

    asyncio.run(scenario())


def test_a_failure_while_taking_an_answer_is_raised_by_the_chain() -> None:
    async def scenario() -> None:
        fetcher, transport, _subscriptions = make_fetcher()
        channel = transport.fake_channel

        def broken(*_arguments: Any) -> None:
            raise RuntimeError("broken partition handling")

        fetcher._handle_partition = broken  # type: ignore[method-assign,assignment]
        task = asyncio.ensure_future(fetcher._fetch_from(1, {TP0: 0}))
        await settle()
        channel.answer_last()
        with pytest.raises(RuntimeError, match="broken partition handling"):
            await asyncio.wait_for(task, 1)

    asyncio.run(scenario())
