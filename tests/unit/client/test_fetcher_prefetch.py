"""The fetcher fetches ahead while the application has not polled, within the buffer bound; paused
partitions are not fetched; a seek or a rebalance drops what was buffered. A fake transport answers
each Fetch with ten records at the offset asked for; no sockets, no sleeping."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from strom.base.clock import ManualClock
from strom.client.cluster import TopicPartition
from strom.client.config import ConsumerConfig
from strom.client.consumer.decode import decode_partition_records
from strom.client.consumer.fetcher import Fetcher
from strom.client.consumer.positions import SubscriptionState
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.records import Record, build_batch

TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
RECORDS_PER_FETCH = 10


def batch_at(offset: int) -> bytes:
    records = [Record(index, 0, None, b"value %d" % (offset + index)) for index in range(RECORDS_PER_FETCH)]
    return build_batch(records, base_offset=offset, base_timestamp=1_700_000_000_000)


FETCH_BYTES = len(batch_at(0))


@dataclass
class FakeMetadata:
    wanted_topics: set[str] = field(default_factory=set)

    def stale(self, now_ms: int) -> bool:
        return False

    def leader_for(self, topic_partition: TopicPartition) -> int | None:
        return 1

    def request_refresh(self) -> None:
        raise AssertionError("no metadata refresh expected")


@dataclass
class FakeTransport:
    """Answers a Fetch with RECORDS_PER_FETCH records at each partition's fetch offset, or an error
    code set per partition; records each request's offsets."""

    metadata: FakeMetadata = field(default_factory=FakeMetadata)
    clock: ManualClock = field(default_factory=ManualClock)
    fetched: list[dict[TopicPartition, int]] = field(default_factory=list)
    error_codes: dict[TopicPartition, int] = field(default_factory=dict)

    def ready_channel(self, node_id: int) -> None:
        """No connected channel: every fetch goes the awaited way, through ``send``."""
        return None

    async def send(self, broker_id: int, request: FetchRequest, timeout_ms: int) -> FetchResponse:
        asked = {
            TopicPartition(topic.topic, partition.partition): partition.fetch_offset
            for topic in request.topics
            for partition in topic.partitions
        }
        self.fetched.append(asked)
        return FetchResponse(
            responses=[
                FetchResponse.FetchableTopicResponse(
                    topic=tp.topic,
                    partitions=[
                        FetchResponse.PartitionData(
                            partition_index=tp.partition,
                            error_code=self.error_codes.get(tp, ErrorCode.NONE),
                            high_watermark=1_000,
                            records=b"" if tp in self.error_codes else batch_at(offset),
                        )
                    ],
                )
                for tp, offset in asked.items()
            ]
        )


def make_fetcher(
    partitions: list[TopicPartition], buffer_fetches: float = 2.5
) -> tuple[Fetcher, FakeTransport, SubscriptionState]:
    config = ConsumerConfig.from_settings(
        bootstrap_servers="fake:9092", max_partition_fetch_bytes=int(FETCH_BYTES * buffer_fetches)
    )
    transport = FakeTransport()
    subscriptions = SubscriptionState("earliest")
    subscriptions.assign(partitions)
    for tp in partitions:
        subscriptions.seek(tp, 0)
    fetcher = Fetcher(config, transport, subscriptions)  # type: ignore[arg-type]
    return fetcher, transport, subscriptions


async def fetch_rounds(fetcher: Fetcher, rounds: int) -> None:
    """Rounds of one Fetch per leader for what is fetchable (what the fetcher sends one after
    another, here in steps so that the tests can act between them)."""
    for _ in range(rounds):
        await asyncio.gather(
            *(
                fetcher._fetch(leader, positions)
                for leader, positions in fetcher._fetchable_by_leader().items()
            )
        )


def test_the_next_fetch_goes_out_as_soon_as_an_answer_is_buffered_up_to_the_bound() -> None:
    async def scenario() -> None:
        fetcher, transport, subscriptions = make_fetcher([TP0])
        await fetcher._fetch_round()
        await asyncio.gather(*fetcher._in_flight.values())
        # One round: each answer buffered, the next fetch sent at once, until the bound of 2.5.
        assert transport.fetched == [{TP0: 0}, {TP0: 10}, {TP0: 20}]
        assert not fetcher._in_flight
        assert subscriptions.held_back
        assert len(subscriptions.take(15)) == 15
        await fetcher._fetch_round()
        await asyncio.gather(*fetcher._in_flight.values())
        assert transport.fetched[3:] == [{TP0: 30}]

    asyncio.run(scenario())


def test_fetches_continue_before_any_poll_up_to_the_buffer_bound() -> None:
    async def scenario() -> None:
        fetcher, transport, subscriptions = make_fetcher([TP0])
        await fetch_rounds(fetcher, 5)
        # Bound 2.5 fetches: a third fetch goes while two are buffered, then none.
        assert transport.fetched == [{TP0: 0}, {TP0: 10}, {TP0: 20}]
        taken = subscriptions.take(25)
        assert [record.offset for record in taken] == list(range(25))
        assert subscriptions.position(TP0) == 25
        await fetch_rounds(fetcher, 1)  # two fetches taken: room again
        assert transport.fetched[-1] == {TP0: 30}
        assert [record.offset for record in subscriptions.take(100)] == list(range(25, 40))

    asyncio.run(scenario())


def test_paused_partitions_are_not_fetched() -> None:
    async def scenario() -> None:
        fetcher, transport, subscriptions = make_fetcher([TP0, TP1])
        subscriptions.pause([TP1])
        await fetch_rounds(fetcher, 2)
        assert transport.fetched == [{TP0: 0}, {TP0: 10}]
        subscriptions.resume([TP1])
        await fetch_rounds(fetcher, 1)
        assert transport.fetched[-1] == {TP0: 20, TP1: 0}

    asyncio.run(scenario())


def test_a_seek_discards_the_buffered_records_of_that_partition_only() -> None:
    async def scenario() -> None:
        fetcher, transport, subscriptions = make_fetcher([TP0, TP1])
        await fetch_rounds(fetcher, 2)
        subscriptions.seek(TP0, 5)
        await fetch_rounds(fetcher, 1)
        assert transport.fetched[-1] == {TP0: 5, TP1: 20}
        taken = subscriptions.take(1_000)
        assert [record.offset for record in taken if record.partition == 0] == list(range(5, 15))
        assert [record.offset for record in taken if record.partition == 1] == list(range(30))

    asyncio.run(scenario())


def test_an_answer_for_a_fetch_position_left_by_a_seek_is_dropped() -> None:
    fetcher, _transport, subscriptions = make_fetcher([TP0])
    asyncio.run(fetch_rounds(fetcher, 1))
    stale = subscriptions.fetchable(
        partition_buffer_bytes_max=FETCH_BYTES * 3, total_buffer_bytes_max=FETCH_BYTES * 3
    )
    assert stale == {TP0: 10}
    subscriptions.seek(TP0, 3)
    subscriptions.add_fetched(TP0, decode_partition_records(TP0, 10, batch_at(10)), 1_000)
    assert subscriptions.take(100) == []
    assert subscriptions.fetchable() == {TP0: 3}


def test_revoked_partitions_lose_their_buffered_records() -> None:
    async def scenario() -> None:
        fetcher, _transport, subscriptions = make_fetcher([TP0, TP1])
        await fetch_rounds(fetcher, 2)
        subscriptions.remove_partitions([TP1])
        assert {record.partition for record in subscriptions.take(1_000)} == {0}

    asyncio.run(scenario())


def test_out_of_range_ahead_of_buffered_records_resets_only_once_they_are_taken() -> None:
    async def scenario() -> None:
        fetcher, transport, subscriptions = make_fetcher([TP0])
        await fetch_rounds(fetcher, 1)
        transport.error_codes[TP0] = ErrorCode.OFFSET_OUT_OF_RANGE
        await fetch_rounds(fetcher, 2)
        # Asked once at 10; nothing more while the records before it are buffered.
        assert transport.fetched == [{TP0: 0}, {TP0: 10}]
        assert subscriptions.needing_reset() == {}
        assert [record.offset for record in subscriptions.take(100)] == list(range(10))
        await fetch_rounds(fetcher, 1)  # asked again at the position: now it resets
        assert transport.fetched[-1] == {TP0: 10}
        assert subscriptions.position(TP0) is None
        assert subscriptions.needing_reset() == {TP0: "earliest"}

    asyncio.run(scenario())


def test_partitions_take_turns_so_one_refilled_partition_cannot_starve_another() -> None:
    async def scenario() -> None:
        fetcher, _transport, subscriptions = make_fetcher([TP0, TP1])
        await fetch_rounds(fetcher, 2)
        partitions = []
        for _ in range(4):
            taken = subscriptions.take(5)
            assert len(taken) == 5
            partitions.append({record.partition for record in taken})
            await fetch_rounds(fetcher, 1)  # TP0 and TP1 refilled as soon as there is room
        assert partitions == [{0}, {1}, {0}, {1}]

    asyncio.run(scenario())
