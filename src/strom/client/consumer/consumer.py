"""The Consumer: manual assignment and polling. Group membership (subscribe, commit) arrives with
the group coordinator and plugs in beside the fetcher, without changing what is here."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine, Iterable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

from strom.client.cluster import TopicPartition
from strom.client.config import ConsumerConfig
from strom.client.consumer.fetcher import Fetcher
from strom.client.consumer.positions import ConsumerRecord, SubscriptionState
from strom.client.errors import ClientClosedError, KafkaError
from strom.client.offsets import EARLIEST_TIMESTAMP, ISOLATION_LEVELS, OffsetAndTimestamp, list_offsets
from strom.client.transport import LoopThread, Transport

__all__ = ["Consumer", "ConsumerRecord", "GroupsNotAvailableError"]

T = TypeVar("T")


class GroupsNotAvailableError(KafkaError, NotImplementedError):
    """Consumer-group operations are not available yet."""


_GROUPS_MESSAGE = "consumer groups arrive with the group coordinator; use assign() for now"


class Consumer:
    """Reads records from partitions assigned by hand. ``poll()`` never blocks past its timeout."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **settings: Any) -> None:
        self.config = ConsumerConfig.from_settings(config, **settings)
        self._subscriptions = SubscriptionState(self.config.auto_offset_reset)
        self._closed = False
        self._loop_thread = LoopThread(f"strom-consumer-{self.config.client_id}")
        self._loop_thread.run(self._start())

    async def _start(self) -> None:
        self._transport = Transport(self.config)
        self._fetcher = Fetcher(self.config, self._transport, self._subscriptions)
        self._fetch_task = asyncio.ensure_future(self._fetcher.run())

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coroutine.close()
            raise ClientClosedError("consumer is closed")
        return self._loop_thread.run(coroutine, timeout_s=self.config.request_timeout_ms / 1000 * 2 + 5)

    def _wake_fetcher(self) -> None:
        self._loop_thread.call_soon(self._fetcher.wakeup.set)

    # -- assignment ----------------------------------------------------------------------------

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        topic_partitions = [TopicPartition(*tp) for tp in partitions]
        self._subscriptions.assign(topic_partitions)
        self._wake_fetcher()

    def assignment(self) -> set[TopicPartition]:
        return self._subscriptions.assignment()

    def subscribe(self, topics: Iterable[str] | str, **listener: Any) -> None:
        raise GroupsNotAvailableError(_GROUPS_MESSAGE)

    def unsubscribe(self) -> None:
        raise GroupsNotAvailableError(_GROUPS_MESSAGE)

    def commit(self, offsets: Any = None, asynchronous: bool = False) -> None:
        raise GroupsNotAvailableError(_GROUPS_MESSAGE)

    def committed(self, partitions: Iterable[tuple[str, int]]) -> None:
        raise GroupsNotAvailableError(_GROUPS_MESSAGE)

    # -- polling -------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records after each partition's position, at most ``max.poll.records``; waits up to
        ``timeout_ms`` for some to arrive and returns an empty list if none did."""
        if self._closed:
            raise ClientClosedError("consumer is closed")
        limit = max_records or self.config.max_poll_records
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000
        subscriptions = self._subscriptions
        while True:
            error = self._fetcher.pending_error
            if error is not None:
                self._fetcher.pending_error = None
                raise error
            records = subscriptions.take(limit)
            if records:
                self._wake_fetcher()  # buffers freed: fetch the next round now
                return records
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                return []
            with subscriptions.lock:
                if not subscriptions.has_buffered() and self._fetcher.pending_error is None:
                    subscriptions.lock.wait(remaining_s)

    # -- positions -----------------------------------------------------------------------------

    def position(self, partition: tuple[str, int], timeout_ms: int | None = None) -> int:
        """The offset of the next record ``poll()`` returns for ``partition`` (finding it first by
        ``auto.offset.reset`` if needed)."""
        topic_partition = TopicPartition(*partition)
        timeout_s = (self.config.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        deadline = time.monotonic() + timeout_s
        self._wake_fetcher()
        subscriptions = self._subscriptions
        with subscriptions.lock:
            while True:
                position = subscriptions.position(topic_partition)
                if position is not None:
                    return position
                error = self._fetcher.pending_error
                if error is not None:
                    self._fetcher.pending_error = None
                    raise error
                remaining_s = deadline - time.monotonic()
                if remaining_s <= 0:
                    from strom.client.errors import KafkaTimeoutError

                    raise KafkaTimeoutError(f"no position for {topic_partition} within {timeout_s} s")
                subscriptions.lock.wait(min(remaining_s, 0.1))

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        if offset < 0:
            raise ValueError(f"offset must not be negative, not {offset}")
        self._subscriptions.seek(TopicPartition(*partition), offset)
        self._wake_fetcher()

    def seek_to_beginning(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        self._subscriptions.request_reset(self._partitions_or_all(partitions), "earliest")
        self._wake_fetcher()

    def seek_to_end(self, partitions: Iterable[tuple[str, int]] | None = None) -> None:
        self._subscriptions.request_reset(self._partitions_or_all(partitions), "latest")
        self._wake_fetcher()

    def _partitions_or_all(self, partitions: Iterable[tuple[str, int]] | None) -> list[TopicPartition]:
        if partitions is None:
            return sorted(self._subscriptions.assignment())
        return [TopicPartition(*tp) for tp in partitions]

    def offsets_for_times(
        self, timestamps: Mapping[tuple[str, int], int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The earliest offset whose timestamp is at or after each given timestamp (ms)."""
        specs = {TopicPartition(*tp): timestamp for tp, timestamp in timestamps.items()}
        for timestamp in specs.values():
            if timestamp < 0:
                raise ValueError(f"timestamps must not be negative, not {timestamp}")
        return self._run(self._list(specs))

    def beginning_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        found = self._run(self._list({TopicPartition(*tp): EARLIEST_TIMESTAMP for tp in partitions}))
        return {tp: answer.offset if answer else 0 for tp, answer in found.items()}

    def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        found = self._run(self._list({TopicPartition(*tp): -1 for tp in partitions}))
        return {tp: answer.offset if answer else 0 for tp, answer in found.items()}

    async def _list(
        self, specs: dict[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return await list_offsets(
            self._transport, specs, isolation_level=ISOLATION_LEVELS[self.config.isolation_level]
        )

    # -- pause ---------------------------------------------------------------------------------

    def pause(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._subscriptions.pause(TopicPartition(*tp) for tp in partitions)

    def resume(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._subscriptions.resume(TopicPartition(*tp) for tp in partitions)
        self._wake_fetcher()

    def paused(self) -> set[TopicPartition]:
        return self._subscriptions.paused()

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        async def shutdown() -> None:
            self._fetch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._fetch_task
            await self._fetcher.stop()
            await self._transport.close()

        with contextlib.suppress(Exception):
            self._loop_thread.run(shutdown(), timeout_s=5)
        self._loop_thread.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()
