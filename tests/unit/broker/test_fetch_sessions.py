"""Incremental fetch sessions (KIP-227) as a leader keeps them for its followers: through the
broker's dispatch (no sockets), and the session cache's budget."""

from __future__ import annotations

import uuid

from strom.broker.fetch_sessions import FetchSessionCache, SessionPartition
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import batch, create_topic, produce

FOLLOWER = 2


def session_fetch(
    broker: InProcessBroker,
    session_id: int,
    epoch: int,
    partitions: dict[int, int],
    *,
    forget: tuple[int, ...] = (),
    replica_id: int = FOLLOWER,
    version: int = 12,
) -> FetchResponse:
    """A fetch of topic "t" naming ``partitions`` (index -> fetch offset) in session
    (``session_id``, ``epoch``), forgetting ``forget``."""
    request = FetchRequest(
        replica_id=replica_id,
        max_wait_ms=0,
        min_bytes=1,
        session_id=session_id,
        session_epoch=epoch,
        topics=[
            FetchRequest.FetchTopic(
                topic="t",
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=index, fetch_offset=offset, partition_max_bytes=1 << 20
                    )
                    for index, offset in partitions.items()
                ],
            )
        ]
        if partitions
        else [],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic="t", partitions=list(forget))]
        if forget
        else [],
    )
    response: FetchResponse = broker.call(request, version)
    return response


def listed(response: FetchResponse) -> dict[int, FetchResponse.PartitionData]:
    return {data.partition_index: data for topic in response.responses for data in topic.partitions}


def test_a_follower_gets_a_session_and_then_hears_only_of_partitions_with_news(
    broker: InProcessBroker,
) -> None:
    create_topic(broker, "t", partitions=3)
    full = session_fetch(broker, 0, 0, {0: 0, 1: 0, 2: 0})
    assert full.error_code == ErrorCode.NONE and full.session_id != 0
    assert sorted(listed(full)) == [0, 1, 2], "the first answer is full"
    session = full.session_id

    quiet = session_fetch(broker, session, 1, {})
    assert (quiet.error_code, quiet.session_id, listed(quiet)) == (ErrorCode.NONE, session, {})

    produce(broker, "t", batch([b"a", b"b"]), partition=1)
    news = session_fetch(broker, session, 2, {})
    assert sorted(listed(news)) == [1], "only the partition that has records"
    assert listed(news)[1].records and listed(news)[1].high_watermark == 2

    # The follower appended and fetches from its new position: nothing new, the high watermark as told.
    caught_up = session_fetch(broker, session, 3, {1: 2})
    assert listed(caught_up) == {}


def test_a_forgotten_partition_is_no_longer_read_and_a_named_one_joins(broker: InProcessBroker) -> None:
    create_topic(broker, "t", partitions=3)
    session = session_fetch(broker, 0, 0, {0: 0, 1: 0}).session_id
    assert listed(session_fetch(broker, session, 1, {}, forget=(0,))) == {}
    produce(broker, "t", batch([b"a"]), partition=0)
    produce(broker, "t", batch([b"b"]), partition=2)
    assert listed(session_fetch(broker, session, 2, {})) == {}, "partition 0 was forgotten"
    joined = session_fetch(broker, session, 3, {2: 0})
    assert sorted(listed(joined)) == [2]


def test_a_wrong_epoch_or_an_unknown_session_is_refused_and_a_final_fetch_closes_it(
    broker: InProcessBroker,
) -> None:
    create_topic(broker, "t")
    session = session_fetch(broker, 0, 0, {0: 0}).session_id
    wrong = session_fetch(broker, session, 5, {})
    assert (wrong.error_code, wrong.responses) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, [])
    unknown = session_fetch(broker, session + 100, 1, {})
    assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    closing = session_fetch(broker, session, -1, {0: 0})
    assert (closing.error_code, closing.session_id, sorted(listed(closing))) == (ErrorCode.NONE, 0, [0])
    assert session_fetch(broker, session, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # Epoch 0 with an id closes that session and opens another.
    again = session_fetch(broker, 0, 0, {0: 0}).session_id
    renewed = session_fetch(broker, again, 0, {0: 0})
    assert renewed.session_id not in (0, again)
    assert session_fetch(broker, again, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_consumer_gets_no_session(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    full = session_fetch(broker, 0, 0, {0: 0}, replica_id=-1)
    assert (full.error_code, full.session_id) == (ErrorCode.NONE, 0)


def test_sessions_by_topic_id_from_version_13(broker: InProcessBroker) -> None:
    create_topic(broker, "t", partitions=2)
    topic = broker.server.state.replication.topic("t")
    assert topic is not None
    request = FetchRequest(
        replica_id=FOLLOWER,
        max_wait_ms=0,
        min_bytes=1,
        session_id=0,
        session_epoch=0,
        topics=[
            FetchRequest.FetchTopic(
                topic_id=topic.topic_id,
                partitions=[
                    FetchRequest.FetchPartition(partition=i, partition_max_bytes=1 << 20) for i in (0, 1)
                ],
            )
        ],
        forgotten_topics_data=[],
    )
    session = broker.call(request, 13).session_id
    assert session != 0
    produce(broker, "t", batch([b"a"]), partition=1)
    forget_0 = FetchRequest(
        replica_id=FOLLOWER,
        max_wait_ms=0,
        min_bytes=1,
        session_id=session,
        session_epoch=1,
        topics=[],
        forgotten_topics_data=[FetchRequest.ForgottenTopic(topic_id=topic.topic_id, partitions=[0])],
    )
    news = broker.call(forget_0, 13)
    assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in news.responses] == [
        (topic.topic_id, [1])
    ]


def partitions_of(count: int) -> dict[tuple[str, int], SessionPartition]:
    return {("t", index): SessionPartition(uuid.uuid4(), 0, 1 << 20, -1) for index in range(count)}


def test_the_cache_keeps_its_budget_and_drops_only_stale_sessions() -> None:
    cache = FetchSessionCache(slots=2, partitions_max=10, eviction_ms=1_000)
    first = cache.create(partitions_of(4), now_ms=0)
    second = cache.create(partitions_of(4), now_ms=500)
    assert first is not None and second is not None and first.session_id != second.session_id
    assert cache.create(partitions_of(1), now_ms=900) is None, "full, and nobody stale yet"
    third = cache.create(partitions_of(1), now_ms=1_200)
    assert third is not None and cache.get(first.session_id) is None, "the stale one made room"
    assert cache.create(partitions_of(11), now_ms=5_000) is None, "more than the budget alone"
    assert len(cache) == 2 and cache.partitions_total == 5
    before = len(third.partitions)
    third.partitions.update({("u", index): SessionPartition(uuid.uuid4(), 0, 1, -1) for index in range(9)})
    assert not cache.resized(third, before), "grown past the budget: dropped"
    assert cache.get(third.session_id) is None and cache.partitions_total == 4
