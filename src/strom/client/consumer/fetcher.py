"""Background fetching on the loop thread: one Fetch in flight per broker, records decoded there
and buffered in the ``SubscriptionState`` for ``poll()`` to take. Fetches continue while the
application has not yet taken what is buffered, up to a bound on the buffered bytes, so the broker
reads the next records while the application works through the last ones."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from strom.base import limits
from strom.client.cluster import TopicPartition
from strom.client.config import ConsumerConfig
from strom.client.consumer.decode import decode_partition_records
from strom.client.consumer.positions import SubscriptionState
from strom.client.errors import KafkaError, NoOffsetForPartitionError, error_for_code
from strom.client.fetch_codec import FastFetchRequest
from strom.client.offsets import EARLIEST_TIMESTAMP, ISOLATION_LEVELS, LATEST_TIMESTAMP, list_offsets
from strom.client.transport import BrokerChannel, Transport
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.records import CorruptBatchError

__all__ = ["Fetcher", "decode_partition_records"]

log = logging.getLogger(__name__)

# How a fetch (or a chain of them) ended.
_TAKEN = "taken"  # an answer was buffered: the next fetch may go
_STOPPED = "stopped"  # nothing more of the leader's to fetch now, or run() has something to do first
_BACK_OFF = "back off"  # the fetch failed: wait retry.backoff.ms before run() tries again
_AWAITED = "awaited"  # the channel could not take the request at once: it goes the awaited way


class Fetcher:
    """Runs on the loop thread until cancelled."""

    def __init__(
        self, config: ConsumerConfig, transport: Transport, subscriptions: SubscriptionState
    ) -> None:
        self.config = config
        self.transport = transport
        self.subscriptions = subscriptions
        self.wakeup = asyncio.Event()
        # read_committed: the records of aborted transactions are dropped (the broker lists them).
        self._read_committed = config.isolation_level == "read_committed"
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        # An error poll() must raise (e.g. no offset and auto.offset.reset=none), set by the loop.
        self.pending_error: KafkaError | None = None

    async def run(self) -> None:
        while True:
            self.wakeup.clear()
            try:
                await self._reset_positions()
                await self._fetch_round()
            except asyncio.CancelledError:
                raise
            except KafkaError as error:
                log.info("fetcher: %s", error)
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            except Exception:
                log.exception("fetcher failed; retrying")
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.retry_backoff_ms / 1000):
                    await self.wakeup.wait()

    async def stop(self) -> None:
        """Cancel the fetches in flight (run() itself is cancelled by its owner)."""
        tasks = list(self._in_flight.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _reset_positions(self) -> None:
        needing = self.subscriptions.needing_reset()
        if not needing:
            return
        none_policy = [tp for tp, reset_to in needing.items() if reset_to == "none"]
        if none_policy:
            self.pending_error = NoOffsetForPartitionError(
                f"no position for {', '.join(map(str, sorted(none_policy)))} and auto.offset.reset is none"
            )
            with self.subscriptions.lock:
                self.subscriptions.lock.notify_all()
        specs = {
            tp: EARLIEST_TIMESTAMP if reset_to == "earliest" else LATEST_TIMESTAMP
            for tp, reset_to in needing.items()
            if reset_to != "none"
        }
        if not specs:
            return
        found = await list_offsets(
            self.transport, specs, isolation_level=ISOLATION_LEVELS[self.config.isolation_level]
        )
        for tp, answer in found.items():
            if answer is not None:
                self.subscriptions.reset_done(tp, answer.offset, needing[tp])

    async def _fetch_round(self) -> None:
        transport = self.transport
        if transport.metadata.stale(transport.clock.monotonic_ms()):
            await transport.refresh_wanted()
        for leader, positions in self._fetchable_by_leader().items():
            if leader in self._in_flight:
                continue
            task = asyncio.ensure_future(self._fetch_from(leader, positions))
            self._in_flight[leader] = task
            task.add_done_callback(lambda _task, leader=leader: self._done(leader))  # type: ignore[misc]

    def _fetchable_by_leader(self) -> dict[int, dict[TopicPartition, int]]:
        """The partitions to fetch now with their fetch positions, grouped by leader."""
        transport = self.transport
        # Fetch ahead while the application takes what is buffered: a fetch is sent for a partition
        # as long as less than one fetch's worth of its records waits in the buffer.
        fetchable = self.subscriptions.fetchable(
            partition_buffer_bytes_max=self.config.max_partition_fetch_bytes,
            total_buffer_bytes_max=min(self.config.fetch_max_bytes, limits.consumer_buffered_bytes_max),
        )
        by_leader: dict[int, dict[TopicPartition, int]] = {}
        for tp, position in fetchable.items():
            transport.metadata.wanted_topics.add(tp.topic)
            leader = transport.metadata.leader_for(tp)
            if leader is None:
                transport.metadata.request_refresh()
                continue
            by_leader.setdefault(leader, {})[tp] = position
        return by_leader

    async def _fetch_from(self, leader: int, positions: dict[TopicPartition, int]) -> None:
        """Fetch from ``leader`` and, as soon as an answer is buffered, send the next Fetch from
        here: the next request leaves without a round through ``run()`` (several event-loop turns,
        each a chance for the application thread to take the GIL first), so records appended
        meanwhile wait no longer than they must. Stops when nothing of this leader's is fetchable,
        a fetch failed, or ``run()`` has something to do first (a reset, stale metadata).

        On a connected channel the fetches go as a chain of callbacks (``_chain``); the awaited
        way (``_fetch``) is taken for the first fetch of a connection still to be made and when the
        channel cannot take a request at once."""
        while True:
            channel = self.transport.ready_channel(leader)
            if channel is not None:
                outcome, positions = await self._chain(leader, positions, channel)
                if outcome is _BACK_OFF:
                    await asyncio.sleep(self.config.retry_backoff_ms / 1000)
                    return
                if outcome is not _AWAITED:
                    return
            if not await self._fetch(leader, positions):
                return
            if self._chain_ends():
                return
            next_positions = self._fetchable_by_leader().get(leader)
            if not next_positions:
                return
            positions = next_positions

    def _chain_ends(self) -> bool:
        """``run()`` has something to do before the next fetch: a reset, or stale metadata."""
        transport = self.transport
        return bool(self.subscriptions.needing_reset()) or transport.metadata.stale(
            transport.clock.monotonic_ms()
        )

    async def _chain(
        self, leader: int, positions: dict[TopicPartition, int], channel: BrokerChannel
    ) -> tuple[str, dict[TopicPartition, int]]:
        """Fetches from ``leader`` as callbacks: each answer is taken where the channel reads it
        and the next Fetch written from there (``BrokerChannel.send_nowait``), without a task's
        turn, a future or a timer per fetch; here only one wait on the whole chain, woken to check
        that the fetch in flight is not older than ``request.timeout.ms`` + ``fetch.max.wait.ms``.
        Returns how the chain ended (``_STOPPED``; ``_BACK_OFF`` after a failed fetch; ``_AWAITED``
        when the channel could not take the next request at once: it is to be sent the awaited
        way) and the positions of the fetch it ended on."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[str] = loop.create_future()
        timeout_s = (self.config.request_timeout_ms + self.config.fetch_max_wait_ms) / 1000
        current = positions
        sent_at = 0.0
        alive = True

        def finish(outcome: str) -> None:
            if not done.done():
                done.set_result(outcome)

        def send(wanted: dict[TopicPartition, int]) -> None:
            nonlocal current, sent_at
            current = wanted
            sent_at = loop.time()
            if not channel.send_nowait(self._request(wanted), answered):
                finish(_AWAITED)

        def answered(response: FetchResponse | None, error: KafkaError | None) -> None:
            if not alive:
                return  # the chain was given up (a timeout, the fetcher stopping): dropped
            if error is not None or response is None:
                self._fetch_failed(leader, error)
                finish(_BACK_OFF)
                return
            try:
                outcome = self._take_answer(leader, current, response)
                if outcome is not _TAKEN:
                    finish(outcome)
                    return
                next_positions = None if self._chain_ends() else self._fetchable_by_leader().get(leader)
                if not next_positions:
                    finish(_STOPPED)
                    return
                send(next_positions)
            except Exception as failure:  # raised where the awaited way would have raised it
                if not done.done():
                    done.set_exception(failure)

        try:
            send(positions)
            while not done.done():
                remaining_s = sent_at + timeout_s - loop.time()
                if remaining_s <= 0:
                    self._fetch_failed(leader, f"no answer within {timeout_s * 1000:.0f} ms")
                    return _BACK_OFF, current
                await asyncio.wait((done,), timeout=remaining_s)
            return done.result(), current
        finally:
            alive = False

    def _request(self, positions: dict[TopicPartition, int]) -> FastFetchRequest:
        config = self.config
        topics: dict[str, FetchRequest.FetchTopic] = {}
        for tp, position in positions.items():
            topics.setdefault(tp.topic, FetchRequest.FetchTopic(topic=tp.topic)).partitions.append(
                FetchRequest.FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=-1,
                    fetch_offset=position,
                    log_start_offset=-1,
                    partition_max_bytes=config.max_partition_fetch_bytes,
                )
            )
        return FastFetchRequest(
            replica_id=-1,
            max_wait_ms=config.fetch_max_wait_ms,
            min_bytes=config.fetch_min_bytes,
            max_bytes=config.fetch_max_bytes,
            isolation_level=ISOLATION_LEVELS[config.isolation_level],
            session_id=0,
            session_epoch=-1,
            topics=list(topics.values()),
            rack_id=config.client_rack,
        )

    def _fetch_failed(self, leader: int, reason: object) -> None:
        """A fetch failed as a whole (the chain's or the awaited one): said, and the leader may
        have moved, so the metadata is refreshed; the caller backs off."""
        log.info("fetch from broker %d failed: %s", leader, reason)
        self.transport.metadata.request_refresh()

    def _done(self, leader: int) -> None:
        self._in_flight.pop(leader, None)
        self.wakeup.set()

    async def _fetch(self, leader: int, positions: dict[TopicPartition, int]) -> bool:
        """One Fetch, awaited; False when it failed as a whole (after the retry backoff)."""
        config = self.config
        try:
            response: FetchResponse = await self.transport.send(
                leader,
                self._request(positions),
                timeout_ms=config.request_timeout_ms + config.fetch_max_wait_ms,
            )
        except KafkaError as error:
            self._fetch_failed(leader, error)
            await asyncio.sleep(config.retry_backoff_ms / 1000)
            return False
        outcome = self._take_answer(leader, positions, response)
        if outcome is _BACK_OFF:
            await asyncio.sleep(config.retry_backoff_ms / 1000)
        return outcome is _TAKEN

    def _take_answer(self, leader: int, positions: dict[TopicPartition, int], response: FetchResponse) -> str:
        """Buffer what an answer brought: ``_TAKEN``; ``_BACK_OFF`` when the fetch failed as a
        whole; ``_STOPPED`` when a partition's error is for ``poll()`` to raise."""
        if response.error_code != ErrorCode.NONE:
            log.info("fetch from broker %d: %s", leader, ErrorCode(response.error_code).name)
            return _BACK_OFF
        for topic_response in response.responses:
            for partition in topic_response.partitions:
                tp = TopicPartition(topic_response.topic, partition.partition_index)
                fetch_offset = positions.get(tp)
                if fetch_offset is None:
                    continue
                self._handle_partition(tp, fetch_offset, partition)
        return _TAKEN if self.pending_error is None else _STOPPED

    def _handle_partition(
        self, tp: TopicPartition, fetch_offset: int, partition: FetchResponse.PartitionData
    ) -> None:
        code = partition.error_code
        if code == ErrorCode.NONE:
            try:
                fetched = decode_partition_records(
                    tp,
                    fetch_offset,
                    partition.records,
                    aborted_transactions=partition.aborted_transactions if self._read_committed else None,
                )
            except CorruptBatchError as error:
                self.pending_error = KafkaError(f"corrupt records in {tp} at offset {fetch_offset}: {error}")
                return
            self.subscriptions.add_fetched(tp, fetched, partition.high_watermark)
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            log.info("offset %d out of range for %s; resetting", fetch_offset, tp)
            self.subscriptions.out_of_range(tp, fetch_offset)
        elif ErrorCode(code).invalid_metadata or ErrorCode(code).retriable:
            self.transport.metadata.request_refresh()
        else:
            self.pending_error = error_for_code(code, context=f"fetch {tp}")
