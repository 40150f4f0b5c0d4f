"""BrokerChannel.send_nowait, the producer's per-request path: the answer or the error reaches the
callback; it writes nothing while the socket's buffer is full or requests wait to be written (so
requests keep their order), and a lost connection fails what it wrote."""

from __future__ import annotations

import asyncio
from typing import Any

from strom.client.config import ClientConfig
from strom.client.errors import KafkaConnectionError, KafkaError
from strom.client.produce_codec import FastProduceRequest
from strom.client.transport import BrokerChannel
from strom.protocol.headers import decode_request_header
from strom.protocol.messages.api_versions import ApiVersionsResponse
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from tests.unit.client.test_connection import answer, broker_versions


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        pass


def produce(partition: int) -> FastProduceRequest:
    return FastProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name="t", partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=b"r")]
            )
        ],
    )


def produced(partition: int) -> ProduceResponse:
    return ProduceResponse(
        responses=[
            ProduceResponse.TopicProduceResponse(
                name="t",
                partition_responses=[
                    ProduceResponse.PartitionProduceResponse(index=partition, base_offset=7)
                ],
            )
        ]
    )


def partition_of(frame: bytes) -> int:
    header, body_offset = decode_request_header(frame[4:])
    request = ProduceRequest.decode(frame[4 + body_offset :], header.request_api_version)
    return request.topic_data[0].partition_data[0].index


async def ready_channel() -> tuple[BrokerChannel, FakeTransport]:
    channel = BrokerChannel(1, "h", 1, ClientConfig(bootstrap_servers="h:1"))
    transport = FakeTransport()
    channel.connection_made(transport)
    (handshake,) = transport.written
    transport.written.clear()
    channel.data_received(answer(handshake, ApiVersionsResponse(api_keys=broker_versions())))
    await channel.wait_ready()
    return channel, transport


def test_the_answer_reaches_the_callback() -> None:
    async def run() -> None:
        channel, transport = await ready_channel()
        answers: list[tuple[Any, KafkaError | None]] = []
        assert channel.send_nowait(produce(3), lambda response, error: answers.append((response, error)))
        (frame,) = transport.written
        channel.data_received(answer(frame, produced(3)))
        ((response, error),) = answers
        assert error is None
        assert response.responses[0].partition_responses[0].base_offset == 7

    asyncio.run(run())


def test_nothing_is_written_while_the_buffer_is_full_or_requests_wait_to_be_written() -> None:
    async def run() -> None:
        channel, transport = await ready_channel()
        channel.pause_writing()
        assert not channel.send_nowait(produce(0), lambda response, error: None)
        waiting = asyncio.ensure_future(channel.request(produce(1)))
        await asyncio.sleep(0)
        channel.resume_writing()
        # The request that waited goes first.
        assert not channel.send_nowait(produce(2), lambda response, error: None)
        await asyncio.sleep(0)
        assert channel.send_nowait(produce(2), lambda response, error: None)
        assert [partition_of(frame) for frame in transport.written] == [1, 2]
        first = transport.written[0]
        channel.data_received(answer(first, produced(1)))
        assert (await waiting).responses[0].partition_responses[0].index == 1
        assert channel.in_flight == 1

    asyncio.run(run())


def test_a_lost_connection_fails_what_was_written() -> None:
    async def run() -> None:
        channel, _ = await ready_channel()
        errors: list[KafkaError | None] = []
        assert channel.send_nowait(produce(0), lambda response, error: errors.append(error))
        channel.connection_lost(ConnectionResetError("reset"))
        assert len(errors) == 1 and isinstance(errors[0], KafkaConnectionError)
        assert not channel.send_nowait(produce(0), lambda response, error: None)

    asyncio.run(run())
