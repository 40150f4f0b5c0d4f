"""The replica fetcher against stand-in leaders on 127.0.0.1: one that never answers a Fetch (a
long poll that does not end) — a partition added meanwhile is fetched at once, on a new
connection, instead of waiting for that long poll; one that keeps a fetch session — the fetcher
names only what changed, forgets what it stopped fetching, and starts over when the session is
lost."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

from strom.base import limits
from strom.base.clock import ManualClock
from strom.broker.cluster.fetcher import FETCH_VERSION, FollowedPartition, ReplicaFetcher
from strom.cluster.config import ReplicationConfig
from strom.cluster.model import TopicPartition
from strom.cluster.replica import PartitionFollower
from strom.protocol.errors import ErrorCode
from strom.protocol.framing import FrameDecoder
from strom.protocol.headers import decode_request_body, encode_response, read_request_header
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
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


def fetcher_from(port: int) -> ReplicaFetcher:
    """Broker 1's fetcher from leader 2 at ``port`` (long polls longer than any test)."""
    return ReplicaFetcher(
        2,
        "127.0.0.1",
        port,
        node_id=1,
        config=ReplicationConfig(replica_fetch_wait_max_ms=LONG_POLL_MS),
        clock=ManualClock(),
        after_append=lambda partition: None,
    )


def test_a_partition_added_during_a_long_poll_is_fetched_at_once_on_a_new_connection(
    tmp_path: Path,
) -> None:
    async def scenario() -> tuple[tuple[int, set[int]], tuple[int, set[int]]]:
        leader = SilentLeader()
        server = await asyncio.start_server(leader.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        fetcher = fetcher_from(port)
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


class SessionLeader:
    """Answers every Fetch after a short pause: a session (id 7) for a full fetch, no records,
    and FETCH_SESSION_ID_NOT_FOUND once when told to. Records each request's session fields,
    the partitions it named and those it forgot."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, int, set[int], set[int]]] = []
        self.changed = asyncio.Event()
        self.lose_session = False
        self._writers: list[asyncio.StreamWriter] = []

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        decoder = FrameDecoder(limits.frame_bytes_max)
        while data := await reader.read(65536):
            for frame in decoder.feed(data):
                _api_key, version, correlation_id, _client_id, body = read_request_header(frame)
                request, _ = decode_request_body(FetchRequest, frame, body, version)
                named = {p.partition for topic in request.topics for p in topic.partitions}
                forgotten = {p for topic in request.forgotten_topics_data for p in topic.partitions}
                self.requests.append((request.session_id, request.session_epoch, named, forgotten))
                self.changed.set()
                await asyncio.sleep(0.02)
                if self.lose_session and request.session_epoch > 0:
                    self.lose_session = False
                    answer = FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, responses=[])
                else:
                    answer = FetchResponse(session_id=7 if request.session_epoch == 0 else request.session_id)
                    answer.responses = []
                writer.write(encode_response(correlation_id, 1, version, answer.encode(version)))

    def close(self) -> None:
        for writer in self._writers:
            writer.close()

    async def wait_for(self, condition: Callable[[tuple[int, int, set[int], set[int]]], bool]) -> int:
        """The index of the first request (from now on) that meets ``condition``."""
        start = len(self.requests)
        async with asyncio.timeout(WAIT_S):
            while True:
                for index in range(start, len(self.requests)):
                    if condition(self.requests[index]):
                        return index
                self.changed.clear()
                await self.changed.wait()


def test_the_fetcher_keeps_a_session_names_only_changes_and_starts_over_when_it_is_lost(
    tmp_path: Path,
) -> None:
    async def scenario() -> list[tuple[int, int, set[int], set[int]]]:
        leader = SessionLeader()
        server = await asyncio.start_server(leader.serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        fetcher = fetcher_from(port)
        try:
            fetcher.add(followed(tmp_path, 0))
            fetcher.add(followed(tmp_path, 1))
            # A full fetch asks for a session; the next ones are incremental and name nothing new.
            await leader.wait_for(lambda r: r[:2] == (7, 2))
            fetcher.remove(TopicPartition("t", 1))
            await leader.wait_for(lambda r: r[0] == 7 and r[3] == {1})
            leader.lose_session = True
            await leader.wait_for(lambda r: r[:2] == (0, 0))
            await leader.wait_for(lambda r: r[0] == 7 and r[1] > 0)
            return list(leader.requests)
        finally:
            await fetcher.close()
            leader.close()
            server.close()
            await server.wait_closed()

    requests = asyncio.run(scenario())
    first = requests[0]
    assert first[:3] == (0, 0, {0, 1}), "a full fetch that asks for a session"
    incremental = [r for r in requests if r[1] > 0]
    assert incremental and all(not r[2] for r in incremental), "nothing changed: nothing named"
    forgetting = next(r for r in requests if r[3])
    assert forgetting[3] == {1} and forgetting[0] == 7
    restart = requests.index(next(r for r in requests[1:] if r[:2] == (0, 0)))
    assert requests[restart][2] == {0}, "started over with a full fetch of what it follows"
