"""The replica fetcher against a stand-in leader on 127.0.0.1 that never answers a Fetch (a long
poll that does not end): a partition added meanwhile is fetched at once, on a new connection,
instead of waiting for that long poll."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from strom.base import limits
from strom.base.clock import ManualClock
from strom.broker.cluster.fetcher import FETCH_VERSION, FollowedPartition, ReplicaFetcher
from strom.cluster.config import ReplicationConfig
from strom.cluster.model import TopicPartition
from strom.cluster.replica import PartitionFollower
from strom.protocol.framing import FrameDecoder
from strom.protocol.headers import decode_request_body, read_request_header
from strom.protocol.messages.fetch import FetchRequest
from strom.storage.config import LogConfig
from strom.storage.partition_log import PartitionLog

FETCH_API_KEY = 1
WAIT_S = 10.0
# Longer than the test: without giving the long poll up, the second partition would never be asked.
LONG_POLL_MS = 600_000


class SilentLeader:
    """Accepts connections and records the partitions of every Fetch; answers none of them."""

    def __init__(self) -> None:
        self.fetches: list[tuple[int, set[int]]] = []  # (connection, partitions asked)
        self.connections = 0
        self.changed = asyncio.Event()
        self._writers: list[asyncio.StreamWriter] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = self.connections
        self._writers.append(writer)
        decoder = FrameDecoder(limits.frame_bytes_max)
        while data := await reader.read(65536):
            for frame in decoder.feed(data):
                api_key, version, _correlation_id, _client_id, body = read_request_header(frame)
                assert (api_key, version) == (FETCH_API_KEY, FETCH_VERSION)
                request, _ = decode_request_body(FetchRequest, frame, body, version)
                asked = {p.partition for topic in request.topics for p in topic.partitions}
                self.fetches.append((connection, asked))
                self.changed.set()

    def close(self) -> None:
        for writer in self._writers:
            writer.close()

    async def wait_for(self, partition: int) -> tuple[int, set[int]]:
        async with asyncio.timeout(WAIT_S):
            while True:
                for fetch in self.fetches:
                    if partition in fetch[1]:
                        return fetch
                self.changed.clear()
                await self.changed.wait()


def followed(tmp_path: Path, partition: int) -> FollowedPartition:
    tp = TopicPartition("t", partition)
    log = PartitionLog.open(tmp_path / f"t-{partition}", "t", partition, LogConfig())
    log.track_high_watermark()
    follower = PartitionFollower(tp, leader_id=2, leader_epoch=0, high_watermark=0)
    return FollowedPartition(tp, uuid.uuid4(), log, follower)


def test_a_partition_added_during_a_long_poll_is_fetched_at_once_on_a_new_connection(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[tuple[int, set[int]], tuple[int, set[int]]]:
        leader = SilentLeader()
        server = await asyncio.start_server(leader.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        fetcher = ReplicaFetcher(
            2,
            "127.0.0.1",
            port,
            node_id=1,
            config=ReplicationConfig(replica_fetch_wait_max_ms=LONG_POLL_MS),
            clock=ManualClock(),
            after_append=lambda partition: None,
        )
        try:
            fetcher.add(followed(tmp_path, 0))  # an empty log: no epoch to ask about, fetched at once
            first = await leader.wait_for(0)
            fetcher.add(followed(tmp_path, 1))
            second = await leader.wait_for(1)
            return first, second
        finally:
            await fetcher.close()
            leader.close()
            server.close()
            await server.wait_closed()

    first, second = asyncio.run(scenario())
    assert first[1] == {0}
    assert second[1] == {0, 1}
    assert second[0] != first[0], "the long poll's connection was given up"
