"""The I/O shell around ``GroupMembership``, on the client's loop thread.

It ticks the membership, sends the requests it asks for (fitted to the version each broker
negotiated) and feeds the answers back, refreshes metadata for it, and offers the two offset
operations the Consumer needs: ``commit`` and ``fetch_committed``. Every touch of the membership
holds ``lock``, which the application thread also takes for ``begin_poll``; neither holds it while
waiting for anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from strom.client.cluster import TopicPartition
from strom.client.consumer.consumer_membership import ConsumerGroupMembership, StaleMemberEpochError
from strom.client.consumer.membership import (
    Coordinator,
    GroupMembership,
    Output,
    RefreshMetadata,
    SendRequest,
)
from strom.client.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
    error_for_code,
)
from strom.client.transport import Transport
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.protocol.messages.heartbeat import HeartbeatRequest
from strom.protocol.messages.join_group import JoinGroupRequest
from strom.protocol.messages.leave_group import LeaveGroupRequest
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from strom.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from strom.protocol.messages.sync_group import SyncGroupRequest

__all__ = ["GroupCoordinator", "Membership", "coordinator_connection_id", "fit_request"]

log = logging.getLogger(__name__)
T = TypeVar("T")
# The classic protocol's membership or the consumer protocol's (group.protocol): one interface.
Membership = GroupMembership | ConsumerGroupMembership

# Connection ids for coordinators, below every bootstrap id (-1, -2, ...).
_COORDINATOR_CONNECTION_BASE = -1_000_000
# The longest the loop sleeps between ticks even when nothing is due (so a missed wakeup costs little).
_TICK_MAX_MS = 500


def coordinator_connection_id(coordinator: Coordinator) -> int:
    return _COORDINATOR_CONNECTION_BASE - coordinator.node_id


def fit_request(request: Any, version: int) -> Any:
    """``request`` as the membership builds it (newest form) rewritten for an older ``version``."""
    if isinstance(request, FindCoordinatorRequest) and version < 4:
        return FindCoordinatorRequest(key=request.coordinator_keys[0], key_type=request.key_type)
    if isinstance(request, LeaveGroupRequest) and version < 3:
        return LeaveGroupRequest(group_id=request.group_id, member_id=request.members[0].member_id)
    if isinstance(request, LeaveGroupRequest) and version < 5:
        for member in request.members:
            member.reason = None
    if isinstance(request, JoinGroupRequest):
        if version < 8:
            request.reason = None
        if version < 5 and request.group_instance_id is not None:
            raise UnsupportedVersionError("static membership needs JoinGroup v5+; the broker offers less")
        if version == 0:
            request.rebalance_timeout_ms = -1
    if isinstance(request, SyncGroupRequest) and version < 5:
        request.protocol_type = None
        request.protocol_name = None
    if isinstance(request, SyncGroupRequest | HeartbeatRequest) and version < 3:
        request.group_instance_id = None
    if isinstance(request, OffsetCommitRequest) and version < 7:
        request.group_instance_id = None
    return request


class GroupCoordinator:
    """Runs on the loop thread until cancelled."""

    def __init__(
        self,
        transport: Transport,
        membership: Membership,
        lock: threading.Lock,
        notify_application: Callable[[], None],
        *,
        retry_backoff_ms: int,
        request_timeout_ms: int,
        metadata_max_age_ms: int,
        require_stable: bool = False,
    ) -> None:
        self.transport = transport
        self.membership = membership
        self.lock = lock
        self._notify_application = notify_application
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        # read_committed (KIP-447): committed offsets are fetched only once no transaction still
        # holds offsets of the group pending (UNSTABLE_OFFSET_COMMIT is retried), so a member
        # never starts from offsets that a completing transaction is about to replace.
        self.require_stable = require_stable
        self.wakeup = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._next_metadata_ms = 0
        self._metadata_refresh: asyncio.Task[None] | None = None

    def _now_ms(self) -> int:
        return self.transport.clock.monotonic_ms()

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            self.wakeup.clear()
            now_ms = self._now_ms()
            with self.lock:
                self.membership.tick(now_ms)
                outputs = self.membership.take_outputs()
                deadline_ms = self.membership.next_deadline_ms(now_ms)
                subscribed = self.membership.subscribed
            self._dispatch(outputs)
            if subscribed and now_ms >= self._next_metadata_ms:
                self._refresh_metadata(None)
            wait_ms = min(deadline_ms - now_ms, _TICK_MAX_MS)
            if subscribed:
                wait_ms = min(wait_ms, self._next_metadata_ms - now_ms)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait_ms, 1) / 1000):
                    await self.wakeup.wait()

    def kick(self) -> None:
        """Something changed (called on the loop thread): tick now."""
        self.wakeup.set()

    def request_metadata_refresh(self) -> None:
        self._next_metadata_ms = 0
        self.wakeup.set()

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _spawn(self, coroutine: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _dispatch(self, outputs: list[Output]) -> None:
        for output in outputs:
            if isinstance(output, SendRequest):
                self._spawn(self._send(output))
            elif isinstance(output, RefreshMetadata):
                self._refresh_metadata(output.topics)

    def _feed(self, change: Callable[[int], T]) -> T:
        """Apply ``change(now_ms)`` to the membership under the lock, then act on its outputs."""
        with self.lock:
            result = change(self._now_ms())
            outputs = self.membership.take_outputs()
        self._dispatch(outputs)
        self.wakeup.set()
        self._notify_application()
        return result

    # -- requests ------------------------------------------------------------------------------

    def _node_for(self, coordinator: Coordinator | None) -> int:
        if coordinator is None:
            return self.transport.least_loaded_node()
        node_id = coordinator_connection_id(coordinator)
        self.transport.register_address(node_id, coordinator.host, coordinator.port)
        return node_id

    async def request(self, coordinator: Coordinator | None, request: Any, timeout_ms: int) -> Any:
        """Send ``request`` (fitted to the negotiated version) and wait for its answer."""
        node_id = self._node_for(coordinator)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                channel = await self.transport.channel(node_id)
                version = channel.connection.version_for(request.API_KEY)
                if isinstance(request, ConsumerGroupHeartbeatRequest):
                    # The membership fits it: the member id and a pattern depend on the version.
                    membership = self.membership
                    assert isinstance(membership, ConsumerGroupMembership)
                    with self.lock:
                        request = membership.fit_heartbeat(request, version)
                    return await channel.request(request)
                return await channel.request(fit_request(request, version))
        except TimeoutError:
            raise KafkaTimeoutError(f"{type(request).__name__} timed out after {timeout_ms} ms") from None

    async def _send(self, send: SendRequest) -> None:
        try:
            response = await self.request(send.coordinator, send.request, send.timeout_ms)
        except KafkaError as error:
            log.info("group %s: %s failed: %s", self.membership.settings.group_id, send.kind.value, error)
            failure = error
            self._feed(lambda now_ms: self.membership.on_request_failed(send.request_id, failure, now_ms))
            return
        self._feed(lambda now_ms: self.membership.on_response(send.request_id, response, now_ms))

    # -- metadata ------------------------------------------------------------------------------

    def _refresh_metadata(self, topics: frozenset[str] | None) -> None:
        self._next_metadata_ms = self._now_ms() + self.metadata_max_age_ms
        self._spawn(self._refresh(topics))

    async def _refresh(self, leader_topics: frozenset[str] | None) -> None:
        with self.lock:
            wanted = self.membership.metadata_topics()
        if wanted is not None and leader_topics is not None:
            wanted = wanted | leader_topics
        try:
            if wanted is None:
                await self.transport.refresh_metadata(None)
            elif wanted:
                await self.transport.refresh_metadata(sorted(wanted))
        except KafkaError as error:
            # The membership still hears back (a leader waiting to assign must not hang); the
            # counts it gets are what is known, and the next refresh corrects them.
            log.info("group metadata refresh failed: %s", error)
            self._next_metadata_ms = self._now_ms() + self.retry_backoff_ms
        topics = self.transport.metadata.topics
        counts = {
            name: len(info.partitions)
            for name, info in topics.items()
            if info.partitions and not info.is_internal
        }
        topic_ids = {
            name: uuid.UUID(info.topic_id) for name, info in topics.items() if info.topic_id is not None
        }
        self._feed(lambda now_ms: self.membership.metadata_updated(counts, now_ms, topic_ids))

    # -- offsets -------------------------------------------------------------------------------

    async def _coordinator(self, deadline_ms: int) -> Coordinator:
        while True:
            with self.lock:
                coordinator = self.membership.coordinator
                if coordinator is None:
                    self.membership.need_coordinator()
            if coordinator is not None:
                return coordinator
            self.wakeup.set()
            if self._now_ms() >= deadline_ms:
                raise KafkaTimeoutError(
                    f"no coordinator found for group {self.membership.settings.group_id!r} in time"
                )
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def commit(self, offsets: Mapping[TopicPartition, int], timeout_ms: int) -> None:
        """Commit ``offsets`` as this member; retries coordinator moves within ``timeout_ms``."""
        if not offsets:
            return
        deadline_ms = self._now_ms() + timeout_ms
        while True:
            coordinator = await self._coordinator(deadline_ms)
            with self.lock:
                request = self.membership.commit_request(offsets)
            try:
                response: OffsetCommitResponse = await self.request(
                    coordinator, request, max(deadline_ms - self._now_ms(), 1)
                )
            except KafkaError as error:
                self._feed(lambda now_ms: self.membership.coordinator_disconnected(now_ms))
                failure: KafkaError = error
            else:
                refused = self._feed(functools.partial(self.membership.commit_outcome, response, offsets))
                if refused is None:
                    return
                failure = refused
            if not failure.retriable or self._now_ms() >= deadline_ms:
                raise failure
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def fetch_committed(
        self, partitions: list[TopicPartition], timeout_ms: int
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets for ``partitions`` (None: nothing committed)."""
        group_id = self.membership.settings.group_id
        deadline_ms = self._now_ms() + timeout_ms
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        while True:
            coordinator = await self._coordinator(deadline_ms)
            node_id = self._node_for(coordinator)
            try:
                async with asyncio.timeout(max(deadline_ms - self._now_ms(), 1) / 1000):
                    channel = await self.transport.channel(node_id)
                    version = channel.connection.version_for(OffsetFetchRequest.API_KEY)
                    with self.lock:
                        member = self.membership.offset_fetch_member()
                    response: OffsetFetchResponse = await channel.request(
                        _offset_fetch_request(group_id, by_topic, version, self.require_stable, member)
                    )
                results, code = _read_offset_fetch(response, version)
                if code == ErrorCode.NONE:
                    return {tp: results.get(tp) for tp in partitions}
                error: KafkaError = error_for_code(code, context=f"OffsetFetch for group {group_id!r}")
                if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                    self._feed(lambda now_ms: self.membership.coordinator_disconnected(now_ms))
                elif code == ErrorCode.STALE_MEMBER_EPOCH:
                    # The epoch moved on while the request travelled: ask again with the new one.
                    error = StaleMemberEpochError(
                        f"OffsetFetch for group {group_id!r}: stale member epoch",
                        ErrorCode.STALE_MEMBER_EPOCH,
                    )
            except TimeoutError:
                error = KafkaTimeoutError(f"OffsetFetch for group {group_id!r} timed out")
            except KafkaConnectionError as connection_error:
                self._feed(lambda now_ms: self.membership.coordinator_disconnected(now_ms))
                error = connection_error
            if not error.retriable or self._now_ms() >= deadline_ms:
                raise error
            await asyncio.sleep(self.retry_backoff_ms / 1000)

    async def leave(self, reason: str, timeout_ms: int) -> None:
        """Leave the group and wait (briefly) for the LeaveGroup to be answered."""
        with self.lock:
            self.membership.leave_group(reason)
            outputs = self.membership.take_outputs()
        sends = [output for output in outputs if isinstance(output, SendRequest)]
        with contextlib.suppress(KafkaError, TimeoutError):
            async with asyncio.timeout(timeout_ms / 1000):
                for send in sends:
                    await self.request(send.coordinator, send.request, timeout_ms)


def _offset_fetch_request(
    group_id: str,
    by_topic: dict[str, list[int]],
    version: int,
    require_stable: bool = False,
    member: tuple[str, int] | None = None,
) -> OffsetFetchRequest:
    # require_stable exists from v7; an older broker cannot be asked (as Kafka's consumer, it
    # then fetches without it).
    require_stable = require_stable and version >= 7
    if version >= 8:
        # v9: a consumer-protocol member names itself and its epoch (the coordinator checks them).
        member_id, member_epoch = member if member is not None and version >= 9 else (None, -1)
        return OffsetFetchRequest(
            require_stable=require_stable,
            groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group_id,
                    member_id=member_id,
                    member_epoch=member_epoch,
                    topics=[
                        OffsetFetchRequest.OffsetFetchRequestTopics(name=topic, partition_indexes=indexes)
                        for topic, indexes in by_topic.items()
                    ],
                )
            ],
        )
    return OffsetFetchRequest(
        group_id=group_id,
        require_stable=require_stable,
        topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=indexes)
            for topic, indexes in by_topic.items()
        ],
    )


def _read_offset_fetch(
    response: OffsetFetchResponse, version: int
) -> tuple[dict[TopicPartition, int | None], int]:
    """Offsets by partition and the first error (group level, then partition level)."""
    results: dict[TopicPartition, int | None] = {}
    first_error = ErrorCode.NONE
    if version >= 8:
        if not response.groups:
            return results, ErrorCode.UNKNOWN_SERVER_ERROR
        group = response.groups[0]
        if group.error_code != ErrorCode.NONE:
            return results, group.error_code
        entries = [
            (topic.name, partition.partition_index, partition.committed_offset, partition.error_code)
            for topic in group.topics
            for partition in topic.partitions
        ]
    else:
        if response.error_code != ErrorCode.NONE:
            return results, response.error_code
        entries = [
            (topic.name, partition.partition_index, partition.committed_offset, partition.error_code)
            for topic in response.topics
            for partition in topic.partitions
        ]
    for topic, partition, offset, code in entries:
        if code != ErrorCode.NONE and first_error == ErrorCode.NONE:
            first_error = ErrorCode(code)
        results[TopicPartition(topic, partition)] = offset if offset >= 0 else None
    return results, first_error
