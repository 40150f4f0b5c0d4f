"""Replica fetchers: a follower copies its partitions from their leaders, batch by batch.

One ``ReplicaFetcher`` per leader broker serves every partition this broker follows from it, over
one connection: under a new leader epoch a partition first asks the leader where its own latest
epoch ends (OffsetForLeaderEpoch) and cuts its log there (``PartitionFollower``: KIP-279), then it
is fetched with the others in one long-polling Fetch (v12, replica id set). The fetched bytes are
appended as they came (``PartitionLog.append_as_follower``: header and CRC checked, no record
decoded); the leader's high watermark comes back with them. The offset each fetch asks for is
this broker's log end: that is how the leader learns its progress.

A partition the leader refuses (not the leader yet or any more, an epoch it does not know) waits a
moment and is asked again; the controller's next LeaderAndIsr moves it to another fetcher or makes
it a leader. A broken connection is opened again after a pause.

The fetches run in an incremental fetch session (KIP-227; the leader's side is
``strom.broker.fetch_sessions``): the first is full and asks for a session, the next ones name
only the partitions whose fetch position changed (or that were added) and list those no longer
fetched as forgotten, and the answers hold only the partitions with news. A session whose state is
in doubt (a request failed or was given up: did the leader take its epoch?) is closed by the next
full fetch, which opens a new one; one the leader no longer knows is started over.

A partition added while the fetch in flight long-polls (``replica.fetch.wait.max.ms``) must not wait
for it: the leader answers one request of a connection at a time, so the fetcher gives that
connection up (nothing was appended from it; the next fetch asks again from the same log end) and
asks on a new one at once. This is what makes a leadership change quick: the new leader's high
watermark needs its followers' fetches, and they used to wait up to the whole long poll to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from strom.base.clock import Clock
from strom.broker.cluster.peer import PLAINTEXT_DIALER, PeerConnection, PeerDialer, PeerError
from strom.cluster.config import ReplicationConfig
from strom.cluster.model import TopicPartition
from strom.cluster.replica import FollowerPhase, PartitionFollower
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.messages.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from strom.protocol.records.header import HEADER_BYTES, BatchHeader, compute_crc, parse_batch_header_lenient
from strom.storage import OffsetOutOfOrderError, PartitionLog, StorageError

log = logging.getLogger("strom.broker.cluster.fetcher")

FETCH_VERSION = 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
NO_SESSION_ID = 0
INITIAL_SESSION_EPOCH = 0  # a full fetch that asks for a session (and closes the one it names)
SESSION_EPOCH_MAX = 2**31 - 1
SESSION_LOST_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH})
# A partition the leader refused is asked again after this long; a broken connection is opened
# again after this long.
PARTITION_BACKOFF_MS = 200
CONNECTION_BACKOFF_MS = 200
# ... but a partition refused because the leader has not applied the controller's LeaderAndIsr yet
# (NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH: the controller tells leader and followers at the
# same time, over separate connections) is asked again soon: the leader's high watermark waits
# for this follower.
LEADER_NOT_READY_BACKOFF_MS = 20
LEADER_NOT_READY_ERRORS = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH})
# Beyond the long poll itself, how long an answer may take before the connection is given up.
REQUEST_TIMEOUT_SLACK_MS = 30_000


@dataclass
class FollowedPartition:
    """A partition this broker follows: its log, its follower state, and when to ask again."""

    topic_partition: TopicPartition
    topic_id: uuid.UUID
    log: PartitionLog
    follower: PartitionFollower
    delayed_until_ms: int = 0
    lag: int = 0  # the leader's high watermark minus our log end, at the last fetch (metrics)


# What a fetch asks of a partition: (fetch offset, current leader epoch, log start offset, last
# fetched epoch). The leader's session holds the last one sent; a partition is named again only
# when it changed.
FetchState = tuple[int, int, int, int]


def _fetch_state(partition: FollowedPartition) -> FetchState:
    partition_log = partition.log
    return (
        partition_log.log_end_offset,
        partition.follower.leader_epoch,
        partition_log.log_start_offset,
        partition_log.leader_epochs.latest_epoch,
    )


def whole_batches(data: bytes | bytearray | memoryview) -> tuple[list[BatchHeader], int]:
    """The headers of the whole, CRC-valid batches at the start of ``data`` and their length.

    A leader sends whole batches, but a partial tail is tolerated (dropped), as Kafka's fetchers do.
    Raises ValueError for a batch whose CRC does not match (corruption on the way)."""
    headers: list[BatchHeader] = []
    position = 0
    end = len(data)
    while end - position >= HEADER_BYTES:
        header = parse_batch_header_lenient(data, position)
        if header is None:
            break
        if compute_crc(data, position, header.size_bytes) != header.crc:
            raise ValueError(f"CRC mismatch in the replicated batch at offset {header.base_offset}")
        headers.append(header)
        position += header.size_bytes
    return headers, position


class ReplicaFetcher:
    """Every partition this broker follows from one leader broker."""

    def __init__(
        self,
        leader_id: int,
        host: str,
        port: int,
        *,
        node_id: int,
        config: ReplicationConfig,
        clock: Clock,
        after_append: Callable[[FollowedPartition], None],
        dialer: PeerDialer = PLAINTEXT_DIALER,
    ) -> None:
        self.leader_id = leader_id
        self.host = host
        self.port = port
        self._dialer = dialer
        self._node_id = node_id
        self._config = config
        self._clock = clock
        self._after_append = after_append
        self.partitions: dict[TopicPartition, FollowedPartition] = {}
        self._changed = asyncio.Event()
        self._peer: PeerConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        # The connection a long-polling Fetch is waiting on, and whether it was given up on purpose.
        self._long_poll: PeerConnection | None = None
        self._interrupted = False
        # The fetch session: its id (0: none), the epoch of the next request (0: a full fetch),
        # and what the leader's session holds of each partition (what our requests last said).
        self._session_id = NO_SESSION_ID
        self._session_epoch = INITIAL_SESSION_EPOCH
        self._session_sent: dict[TopicPartition, FetchState] = {}

    def add(self, partition: FollowedPartition) -> None:
        self.partitions[partition.topic_partition] = partition
        self._changed.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        elif self._long_poll is not None:
            # The new partition would wait for the long poll in flight: give it up (see the module docs).
            peer, self._long_poll = self._long_poll, None
            self._interrupted = True
            peer.close(PeerError(f"fetch from broker {self.leader_id} given up: a partition was added"))

    def remove(self, tp: TopicPartition) -> None:
        self.partitions.pop(tp, None)

    async def close(self) -> None:
        self._closing = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._peer is not None:
            self._peer.close()

    def _connection(self) -> PeerConnection:
        if self._peer is None or self._peer.closed:
            self._peer = self._dialer.connection(self.host, self.port, f"strom-replica-{self._node_id}")
        return self._peer

    def _current(self, partition: FollowedPartition) -> bool:
        return self.partitions.get(partition.topic_partition) is partition

    # ---- the loop -------------------------------------------------------------------------------

    async def _run(self) -> None:
        # The flag, not only the cancellation, ends the loop: a cancellation that arrives as an
        # answer does can be lost in the awaits below (Python 3.11's wait_for), and close() must
        # never wait forever.
        while not self._closing:
            try:
                worked = await self._step()
            except PeerError as error:
                if self._interrupted:
                    self._interrupted = False
                    continue
                log.debug("fetching from broker %d: %s", self.leader_id, error)
                await asyncio.sleep(CONNECTION_BACKOFF_MS / 1000)
                continue
            except Exception:
                log.exception("the fetcher from broker %d failed; starting again", self.leader_id)
                await asyncio.sleep(CONNECTION_BACKOFF_MS / 1000)
                continue
            if not worked:
                self._changed.clear()
                delays = [
                    p.delayed_until_ms - self._clock.monotonic_ms()
                    for p in self.partitions.values()
                    if p.delayed_until_ms
                ]
                timeout_s = max(min(delays), 1) / 1000 if delays else None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout_s):
                        await self._changed.wait()

    async def _step(self) -> bool:
        """One round: truncations first, then one fetch. False if there was nothing to do."""
        now_ms = self._clock.monotonic_ms()
        ready = [p for p in self.partitions.values() if p.delayed_until_ms <= now_ms]
        for partition in ready:
            partition.delayed_until_ms = 0
        truncating = [p for p in ready if p.follower.phase is FollowerPhase.TRUNCATING]
        if truncating:
            await self._truncate(truncating)
        fetching = [p for p in ready if p.follower.phase is FollowerPhase.FETCHING and self._current(p)]
        if not fetching:
            return bool(truncating)
        await self._fetch(fetching)
        return True

    def _delay(self, partition: FollowedPartition, error: ErrorCode | None = None) -> None:
        backoff_ms = LEADER_NOT_READY_BACKOFF_MS if error in LEADER_NOT_READY_ERRORS else PARTITION_BACKOFF_MS
        partition.delayed_until_ms = self._clock.monotonic_ms() + backoff_ms

    # ---- truncation ----------------------------------------------------------------------------

    async def _truncate(self, partitions: list[FollowedPartition]) -> None:
        asked: dict[TopicPartition, FollowedPartition] = {}
        by_topic: dict[str, list[OffsetForLeaderEpochRequest.OffsetForLeaderPartition]] = {}
        for partition in partitions:
            epoch = partition.follower.epoch_question(partition.log.leader_epochs)
            if epoch is None:
                self._truncate_to(partition, partition.follower.skip_truncation(partition.log.log_end_offset))
                continue
            asked[partition.topic_partition] = partition
            by_topic.setdefault(partition.topic_partition.topic, []).append(
                OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                    partition=partition.topic_partition.partition,
                    current_leader_epoch=partition.follower.leader_epoch,
                    leader_epoch=epoch,
                )
            )
        if not asked:
            return
        request = OffsetForLeaderEpochRequest(
            replica_id=self._node_id,
            topics=[
                OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=topic, partitions=items)
                for topic, items in by_topic.items()
            ],
        )
        response = await self._connection().request(
            request, OFFSET_FOR_LEADER_EPOCH_VERSION, OffsetForLeaderEpochResponse, REQUEST_TIMEOUT_SLACK_MS
        )
        answered: set[TopicPartition] = set()
        for topic in response.topics:
            for result in topic.partitions:
                tp = TopicPartition(topic.topic, result.partition)
                asked_partition = asked.get(tp)
                if asked_partition is None or not self._current(asked_partition):
                    continue
                partition = asked_partition
                answered.add(tp)
                error = ErrorCode(result.error_code)
                offset = partition.follower.on_epoch_answer(
                    error,
                    result.leader_epoch,
                    result.end_offset,
                    partition.log.leader_epochs,
                    partition.log.log_end_offset,
                )
                if offset is None:
                    self._delay(partition, error)
                else:
                    self._truncate_to(partition, offset)
        for tp, partition in asked.items():
            if tp not in answered:
                self._delay(partition)

    def _truncate_to(self, partition: FollowedPartition, offset: int) -> None:
        partition_log = partition.log
        if offset < partition_log.log_end_offset:
            log.info(
                "%s: truncating from %d to %d (leader %d, epoch %d)",
                partition.topic_partition,
                partition_log.log_end_offset,
                offset,
                self.leader_id,
                partition.follower.leader_epoch,
            )
            partition_log.truncate_to(offset)

    # ---- fetching -------------------------------------------------------------------------------

    async def _fetch(self, partitions: list[FollowedPartition]) -> None:
        config = self._config
        wanted = {partition.topic_partition: _fetch_state(partition) for partition in partitions}
        full = self._session_epoch == INITIAL_SESSION_EPOCH
        if full:
            named = wanted
            forgotten: dict[str, list[int]] = {}
        else:
            sent = self._session_sent
            named = {tp: state for tp, state in wanted.items() if sent.get(tp) != state}
            forgotten = {}
            for tp in sent:
                if tp not in wanted:
                    forgotten.setdefault(tp.topic, []).append(tp.partition)
        by_topic: dict[str, list[FetchRequest.FetchPartition]] = {}
        for tp, (fetch_offset, leader_epoch, log_start_offset, last_fetched_epoch) in named.items():
            by_topic.setdefault(tp.topic, []).append(
                FetchRequest.FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=leader_epoch,
                    fetch_offset=fetch_offset,
                    last_fetched_epoch=last_fetched_epoch,
                    log_start_offset=log_start_offset,
                    partition_max_bytes=config.replica_fetch_max_bytes,
                )
            )
        request = FetchRequest(
            replica_id=self._node_id,
            max_wait_ms=config.replica_fetch_wait_max_ms,
            min_bytes=config.replica_fetch_min_bytes,
            max_bytes=config.replica_fetch_response_max_bytes,
            isolation_level=0,
            session_id=self._session_id,
            session_epoch=self._session_epoch,
            topics=[
                FetchRequest.FetchTopic(topic=topic, partitions=items) for topic, items in by_topic.items()
            ],
            forgotten_topics_data=[
                FetchRequest.ForgottenTopic(topic=topic, partitions=indexes)
                for topic, indexes in forgotten.items()
            ],
            rack_id="",
        )
        sent_partitions = {partition.topic_partition: partition for partition in partitions}
        self._interrupted = False
        peer = self._long_poll = self._connection()
        # Until the answer is in, the session's state is in doubt: a failure or a give-up leaves
        # the next fetch full (it closes this session and opens another).
        self._session_epoch = INITIAL_SESSION_EPOCH
        try:
            response = await peer.request(
                request,
                FETCH_VERSION,
                FetchResponse,
                config.replica_fetch_wait_max_ms + REQUEST_TIMEOUT_SLACK_MS,
            )
        finally:
            if self._long_poll is peer:
                self._long_poll = None
        error = ErrorCode(response.error_code)
        if error != ErrorCode.NONE:
            self._session_id = NO_SESSION_ID
            self._session_sent = {}
            if error not in SESSION_LOST_ERRORS:  # a lost session is started over at once
                for partition in partitions:
                    self._delay(partition)
            return
        self._session_after(request, response, full, wanted, named)
        for topic in response.responses:
            for data in topic.partitions:
                fetched = sent_partitions.get(TopicPartition(topic.topic, data.partition_index))
                if fetched is None or not self._current(fetched):
                    continue
                self._apply(fetched, data)

    def _session_after(
        self,
        request: FetchRequest,
        response: FetchResponse,
        full: bool,
        wanted: dict[TopicPartition, FetchState],
        named: dict[TopicPartition, FetchState],
    ) -> None:
        """The leader answered: what its session now holds, and the next request's epoch."""
        if full:
            self._session_id = response.session_id
            self._session_sent = dict(wanted) if response.session_id != NO_SESSION_ID else {}
            self._session_epoch = 1 if response.session_id != NO_SESSION_ID else INITIAL_SESSION_EPOCH
            return
        sent = self._session_sent
        for tp in [tp for tp in sent if tp not in wanted]:
            del sent[tp]
        sent.update(named)
        epoch = request.session_epoch
        self._session_epoch = 1 if epoch >= SESSION_EPOCH_MAX else epoch + 1

    def _apply(self, partition: FollowedPartition, data: FetchResponse.PartitionData) -> None:
        partition_log = partition.log
        error = ErrorCode(data.error_code)
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            if data.log_start_offset > partition_log.log_end_offset:
                # Everything we have is older than the leader's log: start again from its start.
                log.info(
                    "%s: log end %d is below the leader's log start %d: starting over there",
                    partition.topic_partition,
                    partition_log.log_end_offset,
                    data.log_start_offset,
                )
                partition_log.restart_at(data.log_start_offset)
            else:
                partition.follower.phase = FollowerPhase.TRUNCATING
            return
        if error != ErrorCode.NONE:
            log.debug("%s: leader %d answered %s", partition.topic_partition, self.leader_id, error.name)
            self._delay(partition, error)
            return
        records = data.records
        if records:
            try:
                headers, length = whole_batches(records)
                if headers:
                    view = memoryview(records)[:length] if length < len(records) else records
                    partition_log.append_as_follower(view, headers, self._clock.wall_ms())
            except OffsetOutOfOrderError as failure:
                log.warning(
                    "%s: %s; asking the leader where our logs agree", partition.topic_partition, failure
                )
                partition.follower.phase = FollowerPhase.TRUNCATING
                return
            except (ValueError, StorageError) as failure:
                log.error(
                    "%s: cannot append what leader %d sent: %s",
                    partition.topic_partition,
                    self.leader_id,
                    failure,
                )
                self._delay(partition)
                return
        partition.lag = max(data.high_watermark - partition_log.log_end_offset, 0)
        high_watermark = partition.follower.on_fetch_response(
            data.high_watermark, partition_log.log_end_offset
        )
        partition_log.set_high_watermark(high_watermark)
        if (
            0 <= data.log_start_offset <= high_watermark
            and data.log_start_offset > partition_log.log_start_offset
        ):
            partition_log.delete_records_before(data.log_start_offset)
        self._after_append(partition)


class ReplicaFetchers:
    """The fetchers of this broker, one per leader broker."""

    def __init__(
        self,
        node_id: int,
        config: ReplicationConfig,
        clock: Clock,
        after_append: Callable[[FollowedPartition], None],
        dialer: PeerDialer = PLAINTEXT_DIALER,
    ) -> None:
        self._node_id = node_id
        self._dialer = dialer
        self.config = config
        self._clock = clock
        self._after_append = after_append
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._leader_of: dict[TopicPartition, int] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def follow(self, partition: FollowedPartition, leader_id: int, host: str, port: int) -> None:
        """Fetch ``partition`` from ``leader_id`` (instead of wherever it was fetched from)."""
        self.stop(partition.topic_partition)
        fetcher = self._fetchers.get(leader_id)
        moved: list[FollowedPartition] = []
        if fetcher is not None and (fetcher.host, fetcher.port) != (host, port):
            moved = list(fetcher.partitions.values())  # the leader restarted elsewhere
            self._retire(leader_id)
            fetcher = None
        if fetcher is None:
            fetcher = self._fetchers[leader_id] = ReplicaFetcher(
                leader_id,
                host,
                port,
                node_id=self._node_id,
                config=self.config,
                clock=self._clock,
                after_append=self._after_append,
                dialer=self._dialer,
            )
        for followed in [*moved, partition]:
            fetcher.add(followed)
            self._leader_of[followed.topic_partition] = leader_id

    def stop(self, tp: TopicPartition) -> None:
        leader_id = self._leader_of.pop(tp, None)
        if leader_id is None:
            return
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            return
        fetcher.remove(tp)
        if not fetcher.partitions:
            self._retire(leader_id)

    def _retire(self, leader_id: int) -> None:
        fetcher = self._fetchers.pop(leader_id)
        for tp in list(fetcher.partitions):
            self._leader_of.pop(tp, None)
        closing = asyncio.get_running_loop().create_task(fetcher.close())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)

    def followed(self) -> Iterable[FollowedPartition]:
        for fetcher in self._fetchers.values():
            yield from fetcher.partitions.values()

    async def close(self) -> None:
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        self._leader_of.clear()
        for fetcher in fetchers:
            await fetcher.close()
        await asyncio.gather(*self._closing, return_exceptions=True)
