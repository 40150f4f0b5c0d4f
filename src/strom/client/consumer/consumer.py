"""The Consumer: manual assignment or group subscription, and polling.

Group membership is the pure ``GroupMembership`` driven by ``GroupCoordinator`` on the loop thread
(heartbeats keep going while the application works between polls); rebalance events it produces are
run here, inside ``poll()``, on the application thread, as the Java client does."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

from strom.assignors import get_assignor
from strom.client.cluster import TopicPartition
from strom.client.config import ConsumerConfig
from strom.client.consumer.consumer_membership import ConsumerGroupMembership, ConsumerMembershipSettings
from strom.client.consumer.coordinator import GroupCoordinator, Membership
from strom.client.consumer.fetcher import Fetcher
from strom.client.consumer.membership import (
    GroupMembership,
    MembershipSettings,
    PartitionsAssigned,
    PartitionsLost,
    PartitionsRevoked,
    RebalanceEvent,
)
from strom.client.consumer.positions import ConsumerRecord, SubscriptionState
from strom.client.errors import ClientClosedError, ConfigError, KafkaError
from strom.client.group_metadata import ConsumerGroupMetadata
from strom.client.offsets import EARLIEST_TIMESTAMP, ISOLATION_LEVELS, OffsetAndTimestamp, list_offsets
from strom.client.transport import LoopThread, Transport

__all__ = [
    "CommitCallback",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "GroupsNotAvailableError",
]

T = TypeVar("T")
log = logging.getLogger(__name__)

CommitCallback = Callable[[dict[TopicPartition, int], KafkaError | None], object]


class GroupsNotAvailableError(KafkaError, NotImplementedError):
    """A group operation on a consumer without ``group.id``."""


class ConsumerRebalanceListener:
    """Told about partitions this consumer gains and gives up; called inside ``poll()`` (and
    ``close()``/``unsubscribe()``) on the application thread. Every method is a no-op by default.

    ``on_partitions_revoked`` runs before the partitions go (after the auto-commit, if on): the place
    to commit or flush what was processed. ``on_partitions_lost`` means they are already gone (the
    member fell out of the group): another member may be reading them, so do not commit.
    """

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """Called with the partitions this consumer gives up in a rebalance."""

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        """Called with the partitions a rebalance added (cooperative: possibly none)."""

    def on_partitions_lost(self, lost: list[TopicPartition]) -> None:
        """Called with partitions this consumer no longer owns because it lost its membership."""


# How often a waiting poll() looks at the group even when nothing woke it.
_GROUP_CHECK_S = 0.1


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Consumer:
    """Reads records from partitions assigned by hand (``assign``) or by a group (``subscribe``).
    ``poll()`` never blocks past its timeout (apart from the callbacks and commit-on-revoke it runs)."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **settings: Any) -> None:
        self.config = ConsumerConfig.from_settings(config, **settings)
        self._subscriptions = SubscriptionState(self.config.auto_offset_reset)
        self._closed = False
        self._listener = ConsumerRebalanceListener()
        self._manually_assigned = False
        # Async commit outcomes, run as callbacks on the application thread by the next poll/commit.
        self._commit_outcomes: collections.deque[
            tuple[CommitCallback, dict[TopicPartition, int], KafkaError | None]
        ] = collections.deque()
        self._next_auto_commit_ms = 0
        self._group_lock = threading.Lock()
        self._membership: Membership | None = None
        if self.config.group_id and self.config.group_protocol == "consumer":
            self._membership = ConsumerGroupMembership(
                ConsumerMembershipSettings(
                    group_id=self.config.group_id,
                    group_instance_id=self.config.group_instance_id,
                    max_poll_interval_ms=self.config.max_poll_interval_ms,
                    retry_backoff_ms=self.config.retry_backoff_ms,
                    request_timeout_ms=self.config.request_timeout_ms,
                    client_rack=self.config.client_rack or None,
                    server_assignor=self.config.group_remote_assignor,
                ),
                _monotonic_ms(),
            )
        elif self.config.group_id:
            names = [
                name.strip() for name in self.config.partition_assignment_strategy.split(",") if name.strip()
            ]
            try:
                assignors = [get_assignor(name) for name in names]
            except KeyError as error:
                raise ConfigError(f"config 'partition.assignment.strategy': {error.args[0]}") from None
            if not assignors:
                raise ConfigError("config 'partition.assignment.strategy' names no assignor")
            self._membership = GroupMembership(
                MembershipSettings(
                    group_id=self.config.group_id,
                    group_instance_id=self.config.group_instance_id,
                    session_timeout_ms=self.config.session_timeout_ms,
                    heartbeat_interval_ms=self.config.heartbeat_interval_ms,
                    max_poll_interval_ms=self.config.max_poll_interval_ms,
                    retry_backoff_ms=self.config.retry_backoff_ms,
                    request_timeout_ms=self.config.request_timeout_ms,
                    client_rack=self.config.client_rack or None,
                ),
                assignors,
                _monotonic_ms(),
            )
        self._loop_thread = LoopThread(f"strom-consumer-{self.config.client_id}")
        self._loop_thread.run_or_stop(self._start())

    async def _start(self) -> None:
        self._transport = Transport(self.config)
        self._fetcher = Fetcher(self.config, self._transport, self._subscriptions)
        self._fetch_task = asyncio.ensure_future(self._fetcher.run())
        self._group: GroupCoordinator | None = None
        self._group_task: asyncio.Task[None] | None = None
        if self._membership is not None:
            self._group = GroupCoordinator(
                self._transport,
                self._membership,
                self._group_lock,
                self._notify_application,
                retry_backoff_ms=self.config.retry_backoff_ms,
                request_timeout_ms=self.config.request_timeout_ms,
                metadata_max_age_ms=self.config.metadata_max_age_ms,
                require_stable=self.config.isolation_level == "read_committed",
            )
            self._group_task = asyncio.ensure_future(self._group.run())

    def _notify_application(self) -> None:
        with self._subscriptions.lock:
            self._subscriptions.lock.notify_all()

    def _kick_group(self) -> None:
        if self._group is not None:
            self._loop_thread.call_soon(self._group.kick)

    def _require_group(self) -> tuple[Membership, GroupCoordinator]:
        if self._membership is None or self._group is None:
            raise GroupsNotAvailableError(
                "this consumer has no group.id, so no group coordinator: set group.id to subscribe or commit"
            )
        return self._membership, self._group

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coroutine.close()
            raise ClientClosedError("consumer is closed")
        return self._loop_thread.run(coroutine, timeout_s=self.config.request_timeout_ms / 1000 * 2 + 5)

    def _wake_fetcher(self) -> None:
        self._loop_thread.call_soon(self._fetcher.wakeup.set)

    # -- assignment ----------------------------------------------------------------------------

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        if self._membership is not None and self._membership.subscribed:
            raise KafkaError("assign() after subscribe(): call unsubscribe() first")
        topic_partitions = [TopicPartition(*tp) for tp in partitions]
        self._manually_assigned = bool(topic_partitions)
        self._subscriptions.assign(topic_partitions)
        self._wake_fetcher()

    def assignment(self) -> set[TopicPartition]:
        return self._subscriptions.assignment()

    def subscribe(
        self,
        topics: Iterable[str] | str | re.Pattern[str],
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join the group for ``topics``: a list of names, or a pattern (a compiled regex, or a string
        starting with ``^``, alone or as the only entry of the list) matched against every topic,
        including topics created later. Partitions
        arrive through rebalances inside ``poll()``; ``listener`` hears about them there."""
        membership, group = self._require_group()
        if self._closed:
            raise ClientClosedError("consumer is closed")
        if self._manually_assigned:
            raise KafkaError("subscribe() after assign(): call unsubscribe() first")
        self._listener = listener or ConsumerRebalanceListener()
        with self._group_lock:
            if isinstance(topics, re.Pattern):
                membership.subscribe_pattern(topics)
            elif isinstance(topics, str) and topics.startswith("^"):
                membership.subscribe_pattern(re.compile(topics))
            else:
                names = [topics] if isinstance(topics, str) else list(topics)
                if not names or not all(isinstance(name, str) and name for name in names):
                    raise ValueError(f"subscribe() needs topic names or a pattern, not {topics!r}")
                if any(name.startswith("^") for name in names):
                    # librdkafka's convention: a list entry starting with ^ is a pattern.
                    if len(names) > 1:
                        raise ValueError(
                            f"subscribe() takes topic names or one pattern, not both: {topics!r}"
                        )
                    membership.subscribe_pattern(re.compile(names[0]))
                else:
                    membership.subscribe(names)
        self._loop_thread.call_soon(group.request_metadata_refresh)

    def subscription(self) -> set[str]:
        """The topics this consumer subscribes to now (a pattern's current matches)."""
        if self._membership is None:
            return set()
        with self._group_lock:
            return set(self._membership.subscribed_topics)

    def unsubscribe(self) -> None:
        """Give up every partition (listener told, auto-commit first) and leave the group."""
        if self._membership is None or not self._membership.subscribed:
            self._manually_assigned = False
            self._subscriptions.assign([])
            return
        membership, group = self._require_group()
        self._give_up_owned()
        with self._group_lock:
            membership.subscribed = False
        self._run(group.leave("the consumer unsubscribed", self.config.request_timeout_ms))
        with self._group_lock:
            membership.unsubscribe()
        self._subscriptions.assign([])

    def _give_up_owned(self) -> None:
        """Before leaving (close, unsubscribe): commit if auto-commit is on, tell the listener."""
        membership = self._membership
        if membership is None:
            return
        with self._group_lock:
            owned = sorted(membership.owned)
            in_generation = membership.generation_id >= 0 and membership.fatal_error is None
        if not owned:
            return
        if in_generation and self.config.enable_auto_commit:
            self._commit_quietly(owned)
        self._listener.on_partitions_revoked(owned)

    def _commit_quietly(self, partitions: list[TopicPartition]) -> None:
        positions = self._subscriptions.positions()
        offsets = {tp: positions[tp] for tp in partitions if tp in positions}
        try:
            self._commit_sync(offsets)
        except KafkaError as error:
            log.warning("auto-commit of %s failed: %s", sorted(offsets), error)

    def commit(
        self,
        offsets: Mapping[tuple[str, int], int] | None = None,
        asynchronous: bool = False,
        callback: CommitCallback | None = None,
    ) -> None:
        """Commit ``offsets`` (the offset of the NEXT record to read, per partition), or by default
        the positions of every assigned partition (what ``poll()`` has returned so far).

        Synchronous by default: returns once the coordinator stored them, raises ``CommitFailedError``
        if the group rebalanced meanwhile. With ``asynchronous=True`` it returns at once and
        ``callback(offsets, error_or_None)`` runs inside a later ``poll()`` or ``commit()``."""
        self._require_group()
        self._run_commit_callbacks()
        if offsets is None:
            to_commit = self._subscriptions.positions()
        else:
            to_commit = {TopicPartition(*tp): offset for tp, offset in offsets.items()}
        if not asynchronous:
            self._commit_sync(to_commit)
            return
        self._commit_async(to_commit, callback)

    def _commit_sync(self, offsets: dict[TopicPartition, int]) -> None:
        _, group = self._require_group()
        self._run(group.commit(offsets, self.config.request_timeout_ms))

    def _commit_async(self, offsets: dict[TopicPartition, int], callback: CommitCallback | None) -> None:
        _, group = self._require_group()
        if self._closed:
            raise ClientClosedError("consumer is closed")
        future = self._loop_thread.submit(group.commit(offsets, self.config.request_timeout_ms))

        def done(finished: concurrent.futures.Future[None]) -> None:
            error: KafkaError | None = None
            if finished.cancelled():
                error = ClientClosedError("consumer closed before the commit completed")
            elif (raised := finished.exception()) is not None:
                error = raised if isinstance(raised, KafkaError) else KafkaError(f"commit failed: {raised!r}")
            if error is not None and callback is None:
                log.info("asynchronous commit failed: %s", error)
            if callback is not None:
                self._commit_outcomes.append((callback, offsets, error))
                self._notify_application()

        future.add_done_callback(done)

    def _run_commit_callbacks(self) -> None:
        while self._commit_outcomes:
            callback, offsets, error = self._commit_outcomes.popleft()
            callback(offsets, error)

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group id, current generation, member id and group instance id, for ``Producer.send_offsets_to_transaction()`` (KIP-447): the coordinator takes
        the offsets only while the member is still in that generation. Needs ``group.id``."""
        membership, _ = self._require_group()
        with self._group_lock:
            return ConsumerGroupMetadata(
                group_id=membership.settings.group_id,
                generation_id=membership.generation_id,
                member_id=membership.member_id,
                group_instance_id=membership.settings.group_instance_id,
            )

    def committed(
        self, partitions: Iterable[tuple[str, int]], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (None where nothing is committed)."""
        _, group = self._require_group()
        wanted = [TopicPartition(*tp) for tp in partitions]
        timeout_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        return self._run(group.fetch_committed(wanted, timeout_ms))

    # -- rebalances (application thread, inside poll) -------------------------------------------

    def _group_step(self) -> None:
        """Run what the membership needs from the application thread: rebalance callbacks, the
        auto-commit, async commit callbacks. Raises what poll must raise (fenced, poll timeout)."""
        membership = self._membership
        if membership is None:
            return
        self._run_commit_callbacks()
        now_ms = _monotonic_ms()
        with self._group_lock:
            events = membership.begin_poll(now_ms)
        try:
            for event in events:
                self._run_rebalance_event(event)
        finally:
            with self._group_lock:
                membership.callbacks_done(_monotonic_ms())
            self._kick_group()
        if (
            self.config.enable_auto_commit
            and membership.generation_id >= 0
            and now_ms >= self._next_auto_commit_ms
        ):
            self._next_auto_commit_ms = now_ms + self.config.auto_commit_interval_ms
            positions = self._subscriptions.positions()
            if positions:
                self._commit_async(positions, None)

    def _run_rebalance_event(self, event: RebalanceEvent) -> None:
        partitions = event.partitions
        if isinstance(event, PartitionsRevoked):
            if self.config.enable_auto_commit:
                self._commit_quietly(partitions)
            try:
                self._listener.on_partitions_revoked(partitions)
            finally:
                self._subscriptions.remove_partitions(partitions)
        elif isinstance(event, PartitionsLost):
            try:
                self._listener.on_partitions_lost(partitions)
            finally:
                self._subscriptions.remove_partitions(partitions)
        elif isinstance(event, PartitionsAssigned):
            self._subscriptions.add_partitions(partitions)
            if partitions:
                self._loop_thread.submit(self._load_committed(partitions))
            self._listener.on_partitions_assigned(partitions)

    async def _load_committed(self, partitions: list[TopicPartition]) -> None:
        """Start newly assigned partitions at the group's committed offsets (loop thread)."""
        group = self._group
        assert group is not None
        while not self._closed:
            waiting = self._subscriptions.awaiting_committed(partitions)
            if not waiting:
                return
            try:
                found = await group.fetch_committed(waiting, self.config.request_timeout_ms)
            except KafkaError as error:
                log.info("fetching committed offsets of %s failed: %s", waiting, error)
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)
                continue
            self._subscriptions.committed_loaded(found)
            self._fetcher.wakeup.set()
            return

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
            self._group_step()
            error = self._fetcher.pending_error
            if error is not None:
                self._fetcher.pending_error = None
                raise error
            if self._transport.authentication_error is not None:
                # Raised once; the fetcher's next attempt sets it again if the login still fails.
                error, self._transport.authentication_error = self._transport.authentication_error, None
                raise error
            records = subscriptions.take(limit)
            if records:
                if subscriptions.held_back:
                    # Buffers freed of a partition the fetcher left out: fetch it now. Otherwise
                    # the fetcher is busy anyway and waking it (a self-pipe write) is wasted work.
                    self._wake_fetcher()
                return records
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                return []
            with subscriptions.lock:
                if not subscriptions.has_buffered() and self._fetcher.pending_error is None:
                    # Woken by fetched records and by group events (an assignment to apply).
                    subscriptions.lock.wait(min(remaining_s, _GROUP_CHECK_S))

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
        """Leave the group (a static member stays, so a restart within the session timeout keeps
        its partitions), committing first when auto-commit is on, then stop."""
        if self._closed:
            return
        if self._membership is not None and self._group is not None and self._membership.subscribed:
            with contextlib.suppress(KafkaError):
                self._give_up_owned()
            with contextlib.suppress(KafkaError):
                self._run(self._group.leave("the consumer is being closed", 5_000))
        with contextlib.suppress(KafkaError):
            self._run_commit_callbacks()
        self._closed = True

        async def shutdown() -> None:
            if self._group_task is not None and self._group is not None:
                self._group_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._group_task
                await self._group.stop()
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
