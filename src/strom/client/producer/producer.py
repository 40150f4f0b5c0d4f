"""The Producer: synchronous, thread-safe ``send()`` in front of a sender task on the loop thread;
with ``transactional.id``, its transactions (the pure ``transactions.TransactionManager``, whose
requests the sender task sends to the coordinators)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Self

from strom.base.clock import SystemClock
from strom.client.cluster import TopicPartition
from strom.client.config import ProducerConfig
from strom.client.errors import (
    ClientClosedError,
    ConfigError,
    KafkaError,
    KafkaTimeoutError,
    TransactionStateError,
    error_for_code,
)
from strom.client.group_metadata import ConsumerGroupMetadata, OffsetAndMetadata
from strom.client.producer.accumulator import DeliveryCallback, RecordAccumulator, RecordMetadata
from strom.client.producer.partitioner import StickyPartitioner, partition_for_key
from strom.client.producer.sender import ProduceJob, SenderCore
from strom.client.producer.transactions import (
    TransactionManager,
    TransactionRequest,
    TransactionResult,
    TransactionState,
    fit_transaction_request,
)
from strom.client.transport import BrokerChannel, LoopThread, Transport
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.init_producer_id import InitProducerIdRequest

__all__ = ["Producer", "RecordMetadata"]

log = logging.getLogger(__name__)

HeadersArgument = Iterable[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None

# When batches wait for something the sender is not told about (a connection, a partition's
# requests in flight), it looks again this often.
_IDLE_RECHECK_MS = 50

# Connection ids for coordinators (transaction and group), below every bootstrap id (-1, -2, ...):
# transactional requests get their own connection and never queue behind produce requests.
_COORDINATOR_CONNECTION_BASE = -1_000_000


def _to_bytes(what: str, data: object) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"{what} must be bytes, str or None, not {type(data).__name__}")


def _headers(headers: HeadersArgument) -> list[tuple[str, bytes | None]]:
    if not headers:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(name, _to_bytes("header value", value)) for name, value in items]


class Producer:
    """Sends records to Kafka topics; ``send()`` returns a future of the record's metadata.

    ``Producer({"bootstrap.servers": "127.0.0.1:9092"}, linger_ms=5)``. Delivery callbacks are
    called as ``callback(error, metadata)`` on the producer's background thread.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, /, **settings: Any) -> None:
        self.config = ProducerConfig.from_settings(config, **settings)
        self._clock = SystemClock()
        self._accumulator = RecordAccumulator(
            batch_size=self.config.batch_size,
            linger_ms=self.config.linger_ms,
            compression=self.config.compression_type,
            clock=self._clock,
        )
        self._ignore_keys = self.config.partitioner_ignore_keys
        self._partitioner = StickyPartitioner()
        # Partition counts readable from application threads without touching the loop.
        self._partition_counts: dict[str, int] = {}
        self._closed = False
        self._closing = False
        self._wake_pending = False
        self._transactions: TransactionManager | None = None
        if self.config.transactional_id is not None:
            self._transactions = TransactionManager(
                self.config.transactional_id, self.config.transaction_timeout_ms, self.config.retry_backoff_ms
            )
            # A transactional send() checks the transaction's state first. Bound here, per
            # instance, so that every other producer's send() pays nothing for it.
            self.send = self._send_in_transaction  # type: ignore[method-assign]
        self._loop_thread = LoopThread(f"strom-producer-{self.config.client_id}")
        self._loop_thread.run_or_stop(self._start())

    async def _start(self) -> None:
        self._transport = Transport(self.config, clock=self._clock, allow_auto_topic_creation=True)
        self._core = SenderCore(
            self.config, self._accumulator, self._transport.metadata, transactions=self._transactions
        )
        self._wakeup = asyncio.Event()
        # Produce requests written with a callback and not answered yet, oldest first, and the one
        # timer that checks the oldest against request.timeout.ms (not a timer per request).
        self._awaiting: dict[ProduceJob, BrokerChannel] = {}
        self._timeout_timer: asyncio.TimerHandle | None = None
        self._refresh_task: asyncio.Task[None] | None = None
        # Strong references to background tasks (the loop keeps only weak ones).
        self._tasks: set[asyncio.Task[None]] = set()
        self._sender_task = asyncio.ensure_future(self._run_sender())

    # -- public API ----------------------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        headers: HeadersArgument = None,
        partition: int | None = None,
        timestamp: int | None = None,
        callback: DeliveryCallback | None = None,
    ) -> Future[RecordMetadata]:
        """Queue one record; the future resolves to where it landed once the broker acknowledges.

        The per-record cost is kept to argument checks and one append under a lock: encoding,
        sequencing and resolving happen once per batch on the producer's thread.
        """
        if self._closing:
            raise ClientClosedError("producer is closed")
        if value is not None and type(value) is not bytes:
            value = _to_bytes("value", value)
        partition_count = self._partition_counts.get(topic)
        if partition_count is None:
            partition_count = self._wait_for_topic(topic)
        if timestamp is None:
            # SystemClock.wall_ms() inlined: a method call per record shows in the profile.
            timestamp = time.time_ns() // 1_000_000
        accumulator = self._accumulator
        if partition is None and (key is None or self._ignore_keys):
            future = accumulator.append_keyless(
                topic,
                partition_count,
                self._partitioner,
                timestamp,
                value,
                _headers(headers) if headers else (),
                callback,
            )
        else:
            if key is not None and type(key) is not bytes:
                key = _to_bytes("key", key)
            if partition is None:
                assert key is not None
                partition = partition_for_key(key, partition_count)
            elif not 0 <= partition < partition_count:
                raise ConfigError(f"topic {topic!r} has partitions 0-{partition_count - 1}, not {partition}")
            future = accumulator.append(
                TopicPartition(topic, partition),
                timestamp,
                key,
                value,
                _headers(headers) if headers else (),
                callback,
            )
        if accumulator.wake_needed:
            accumulator.wake_needed = False
            self._wake()
        return future

    def _send_in_transaction(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        headers: HeadersArgument = None,
        partition: int | None = None,
        timestamp: int | None = None,
        callback: DeliveryCallback | None = None,
    ) -> Future[RecordMetadata]:
        """``send()`` of a transactional producer: only inside a transaction."""
        assert self._transactions is not None
        self._transactions.check_send()
        return Producer.send(self, topic, value, key, headers, partition, timestamp, callback)

    # -- transactions --------------------------------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register ``transactional.id`` with its coordinator and get the producer id and epoch:
        an earlier producer with the same id is fenced, and its open transaction aborted. Called
        once, before the first ``begin_transaction()``. ``timeout`` in seconds (default
        ``max.block.ms``); after a ``KafkaTimeoutError`` call it again to go on waiting."""
        self._wait(
            self._transactional_call("init_transactions", TransactionManager.init_transactions), timeout
        )

    def begin_transaction(self) -> None:
        """Start a transaction (no request: the coordinator hears of it with its first partition)."""
        self._transactional_call("begin_transaction", TransactionManager.begin_transaction)

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[tuple[str, int], int | OffsetAndMetadata],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        """Commit a consumer group's ``offsets`` (``(topic, partition)`` -> the offset of the NEXT
        record to read, or an ``OffsetAndMetadata`` to commit text with it) as part of the
        transaction: they count if and only if it commits. ``group_metadata`` is the consumer's
        ``consumer_group_metadata()`` (a bare group id commits without the generation check that
        fences a zombie, KIP-447)."""
        converted: dict[TopicPartition, OffsetAndMetadata] = {}
        for topic_partition, given in offsets.items():
            committed = given if isinstance(given, OffsetAndMetadata) else OffsetAndMetadata(given)
            offset = committed.offset
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
                raise ValueError(f"offset of {tuple(topic_partition)} must be an int >= 0, not {offset!r}")
            if committed.metadata is not None and not isinstance(committed.metadata, str):
                raise ValueError(
                    f"metadata of {tuple(topic_partition)} must be a str, not {committed.metadata!r}"
                )
            converted[TopicPartition(*topic_partition)] = committed
        group = ConsumerGroupMetadata(group_metadata) if isinstance(group_metadata, str) else group_metadata
        if not isinstance(group, ConsumerGroupMetadata) or not group.group_id:
            raise ValueError(f"group_metadata must name a group, not {group_metadata!r}")
        self._wait(
            self._transactional_call(
                "send_offsets_to_transaction", lambda manager: manager.send_offsets(converted, group)
            ),
            timeout,
        )

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send everything queued (ignoring ``linger.ms``), then commit. Raises
        ``TransactionAbortableError`` if a record of the transaction failed (then abort);
        after a ``KafkaTimeoutError`` call it again to go on waiting."""
        self._accumulator.flushing += 1
        try:
            self._wake()
            self._wait(self._transactional_call("commit_transaction", TransactionManager.commit), timeout)
        finally:
            self._accumulator.flushing -= 1

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort: records not yet sent fail with ``TransactionAbortedError``, those sent are
        discarded by read_committed consumers. The way out of ``TransactionAbortableError``."""
        self._wait(self._transactional_call("abort_transaction", TransactionManager.abort), timeout)

    def _transactional_call(
        self, name: str, call: Callable[[TransactionManager], TransactionResult | None]
    ) -> TransactionResult | None:
        manager = self._transactions
        if manager is None:
            raise TransactionStateError(f"{name}() needs a transactional producer: set transactional.id")
        if self._closing:
            raise ClientClosedError("producer is closed")

        async def on_loop() -> TransactionResult | None:
            result = call(manager)
            self._wakeup.set()
            return result

        return self._loop_thread.run(on_loop())

    def _wait(self, result: TransactionResult | None, timeout: float | None) -> None:
        if result is not None:
            result.wait(self.config.max_block_ms / 1000 if timeout is None else timeout)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now (ignoring linger) and wait until all of it is resolved."""
        self._accumulator.flushing += 1
        try:
            self._wake()
            if not self._accumulator.wait_all_done(timeout):
                raise KafkaTimeoutError(
                    f"flush: {self._accumulator.incomplete} batches still undelivered after {timeout} s"
                )
        finally:
            self._accumulator.flushing -= 1

    def partitions_for(self, topic: str) -> int:
        """The number of partitions of ``topic`` (waiting for its metadata if needed)."""
        return self._partition_counts.get(topic) or self._wait_for_topic(topic)

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (within ``timeout``), then stop. Idempotent. A transaction still
        open is aborted first, as Kafka's producer does (its records would otherwise hold back
        read_committed consumers until the coordinator times it out)."""
        if self._closed:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        manager = self._transactions
        if manager is not None and manager.state in (
            TransactionState.IN_TRANSACTION,
            TransactionState.ABORTABLE_ERROR,
        ):
            try:
                self.abort_transaction(timeout)
            except KafkaError as error:
                log.warning("producer closing: aborting the open transaction failed: %s", error)
        self._closing = True
        try:
            self.flush(None if deadline is None else max(deadline - time.monotonic(), 0))
        except KafkaTimeoutError:
            log.warning("producer closing with undelivered records")
        finally:
            self._closed = True
            with contextlib.suppress(Exception):
                self._loop_thread.run(self._shutdown(), timeout_s=5)
            self._loop_thread.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # -- application-thread helpers ------------------------------------------------------------

    def _wait_for_topic(self, topic: str) -> int:
        timeout_ms = self.config.max_block_ms
        count = self._loop_thread.run(
            self._topic_partitions(topic, timeout_ms), timeout_s=timeout_ms / 1000 + 1
        )
        return count

    async def _topic_partitions(self, topic: str, timeout_ms: int) -> int:
        count = await self._transport.wait_for_topic(topic, timeout_ms)
        self._publish_partition_counts()
        return count

    def _publish_partition_counts(self) -> None:
        metadata = self._transport.metadata
        self._partition_counts = {
            name: len(info.partitions) for name, info in metadata.topics.items() if info.partitions
        }

    def _wake(self) -> None:
        # One call_soon_threadsafe per burst: it writes to the loop's self-pipe, which is costly.
        if not self._wake_pending:
            self._wake_pending = True
            self._loop_thread.call_soon(self._on_wake)

    def _on_wake(self) -> None:
        self._wake_pending = False
        self._wakeup.set()

    # -- the sender (loop thread) --------------------------------------------------------------

    async def _run_sender(self) -> None:
        core = self._core
        loop = asyncio.get_running_loop()
        while not (self._closed and self._accumulator.incomplete == 0):
            self._wakeup.clear()
            next_ms: int | None = None
            try:
                if core.needs_producer_id:
                    await self._init_producer_id()
                if self._transactions is not None:
                    self._sync_transaction()
                if self._transport.metadata.stale(self._clock.monotonic_ms()):
                    self._start_refresh()
                jobs, next_ms = core.collect(self._clock.monotonic_ms(), self._node_ready)
                for job in jobs:
                    self._dispatch(job)
                if self._transactions is not None:
                    wake_ms = self._next_transactional_request()
                    if wake_ms is not None:
                        next_ms = wake_ms if next_ms is None else min(next_ms, wake_ms)
            except KafkaError as error:
                # Retriable failures (no broker yet, a timeout) repeat every retry.backoff.ms while
                # they last: worth a line at info, not a warning each time.
                log.log(logging.INFO if error.retriable else logging.WARNING, "producer sender: %s", error)
                next_ms = self.config.retry_backoff_ms
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("producer sender failed; retrying")
                next_ms = self.config.retry_backoff_ms
            if self._accumulator.incomplete > core.in_flight_batches:
                next_ms = _IDLE_RECHECK_MS if next_ms is None else min(next_ms, _IDLE_RECHECK_MS)
            wakeup = self._wakeup
            if wakeup.is_set():
                continue
            if next_ms is None:  # nothing due until woken: no timer
                await wakeup.wait()
                continue
            timer = loop.call_later(max(next_ms, 1) / 1000, wakeup.set)
            try:
                await wakeup.wait()
            finally:
                timer.cancel()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start_refresh(self) -> None:
        if self._refresh_task is not None and not self._refresh_task.done():
            return

        async def refresh() -> None:
            try:
                await self._transport.refresh_wanted()
                self._publish_partition_counts()
            except KafkaError as error:
                log.info("metadata refresh failed: %s", error)
                await asyncio.sleep(self.config.retry_backoff_ms / 1000)
            finally:
                self._wakeup.set()

        self._refresh_task = asyncio.ensure_future(refresh())

    def _node_ready(self, node_id: int) -> bool:
        channel = self._transport.ready_channel(node_id)
        if channel is None:
            self._spawn(self._connect(node_id))
            return False
        return channel.in_flight < self.config.max_in_flight_requests_per_connection

    async def _connect(self, node_id: int) -> None:
        try:
            await self._transport.channel(node_id)
        except KafkaError as error:
            log.info("producer: %s", error)
            self._transport.metadata.request_refresh()
        finally:
            self._wakeup.set()

    def _sync_transaction(self) -> None:
        """Before draining batches: fail those the transaction's state forbids sending, and take
        a new producer id or epoch (after init_transactions, or the bump that ends an abort)."""
        manager = self._transactions
        assert manager is not None
        core = self._core
        error = manager.queued_batches_error()
        if error is not None and self._accumulator.incomplete > core.in_flight_batches:
            core.fail_queued(error)
        if manager.producer_id >= 0 and (manager.producer_id, manager.producer_epoch) != (
            core.producer_id,
            core.producer_epoch,
        ):
            core.set_producer_id(manager.producer_id, manager.producer_epoch)

    def _next_transactional_request(self) -> int | None:
        """Send the transactional request due now, if any; the ms until one may be due after a
        backoff (None: nothing until woken)."""
        manager = self._transactions
        assert manager is not None
        now_ms = self._clock.monotonic_ms()
        sent = manager.next_request(now_ms, self._accumulator.incomplete > 0)
        if sent is not None:
            self._spawn(self._send_transactional(sent))
            return None
        return manager.wake_in_ms(now_ms)

    async def _send_transactional(self, sent: TransactionRequest) -> None:
        manager = self._transactions
        assert manager is not None
        try:
            response = await self._coordinator_request(sent)
        except KafkaError as error:
            log.log(
                logging.INFO if error.retriable else logging.WARNING,
                "transactional id %r: %s failed: %s",
                manager.transactional_id,
                sent.kind.value,
                error,
            )
            manager.on_request_failed(sent, error, self._clock.monotonic_ms())
        except Exception as error:  # a bug: make the producer fail loudly rather than hang
            log.exception("transactional request failed")
            manager.on_request_failed(
                sent, KafkaError(f"internal error: {error!r}"), self._clock.monotonic_ms()
            )
        else:
            manager.on_response(sent, response, self._clock.monotonic_ms())
        finally:
            self._wakeup.set()

    async def _coordinator_request(self, sent: TransactionRequest) -> Any:
        """Send to the request's coordinator (on a connection of its own) or any broker, fitted
        to the version the broker negotiated."""
        transport = self._transport
        coordinator = sent.coordinator
        if coordinator is None:
            node_id = transport.least_loaded_node()
        else:
            node_id = _COORDINATOR_CONNECTION_BASE - coordinator.node_id
            transport.register_address(node_id, coordinator.host, coordinator.port)
        timeout_ms = self.config.request_timeout_ms
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                channel = await transport.channel(node_id)
                version = channel.connection.version_for(sent.request.API_KEY)
                return await channel.request(fit_transaction_request(sent.request, version))
        except TimeoutError:
            raise KafkaTimeoutError(f"{sent.kind.value}: no answer within {timeout_ms} ms") from None

    async def _init_producer_id(self) -> None:
        request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000)
        response = await self._transport.send_any(request)
        if response.error_code != ErrorCode.NONE:
            raise error_for_code(response.error_code, context="InitProducerId")
        self._core.set_producer_id(response.producer_id, response.producer_epoch)

    def _dispatch(self, job: ProduceJob) -> None:
        """Write ``job`` now with a callback for its answer when its connection takes it at once
        (the usual case: no task, future or timer per request); otherwise ``_send_job``."""
        channel = self._transport.ready_channel(job.node_id)
        core = self._core
        try:
            if channel is None:
                sent = False
            elif not job.expects_response:
                sent = channel.send_nowait(job.request, None)
                if sent:
                    core.on_sent_without_response(job)
            else:
                job.sent_ms = self._clock.monotonic_ms()
                sent = channel.send_nowait(job.request, functools.partial(self._on_answer, job))
                if sent:
                    self._awaiting[job] = channel
                    if self._timeout_timer is None:
                        self._schedule_timeout_check(job.sent_ms)
        except KafkaError as error:
            core.on_error(job, error, self._clock.monotonic_ms())
            self._wakeup.set()
            return
        if not sent:
            self._spawn(self._send_job(job))

    def _on_answer(self, job: ProduceJob, response: Any, error: KafkaError | None) -> None:
        """The answer to a request written by ``_dispatch`` (or the error that ended it)."""
        self._awaiting.pop(job, None)
        core = self._core
        now_ms = self._clock.monotonic_ms()
        try:
            if error is None:
                core.on_response(job, response, now_ms)
            else:
                if job.timed_out:
                    error = KafkaTimeoutError(f"produce to broker {job.node_id} timed out")
                core.on_error(job, error, now_ms)
        except Exception as failure:  # a bug: fail the records loudly rather than hang them
            log.exception("produce answer handling failed")
            core.on_error(job, KafkaError(f"internal error: {failure!r}"), now_ms)
        # The sender looks again only when something waits (a batch queued meanwhile, a retry, a
        # partition that was blocked), or to finish closing or a transaction's next step.
        if self._transactions is not None or self._closed:
            self._wakeup.set()
        elif self._accumulator.incomplete > core.in_flight_batches:
            if self._accumulator.linger_ms == 0 and not self._send_from_answer(now_ms):
                return
            self._wakeup.set()

    def _send_from_answer(self, now_ms: int) -> bool:
        """With linger.ms 0, what waited for this answer leaves now, from the answer's callback,
        not a loop turn later through the sender. True when the sender must still look (a timer
        to set, something still waiting, or work only the sender does)."""
        core = self._core
        if core.needs_producer_id or self._transport.metadata.stale(now_ms):
            return True
        try:
            jobs, next_ms = core.collect(now_ms, self._node_ready)
            for job in jobs:
                self._dispatch(job)
        except Exception as error:  # the sender's loop reports and retries it
            log.debug("producer: sending from an answer failed (%r); the sender takes over", error)
            return True
        # Batches of partitions with a request in flight leave with its answer; any other one
        # (left out of this request, or queued meanwhile) is the sender's to look at.
        return (
            next_ms is not None
            or self._transport.metadata.stale(now_ms)
            or self._accumulator.has_queue_not_busy()
        )

    def _schedule_timeout_check(self, sent_ms: int) -> None:
        delay_ms = sent_ms + self.config.request_timeout_ms - self._clock.monotonic_ms()
        self._timeout_timer = asyncio.get_running_loop().call_later(
            max(delay_ms, 0) / 1000 + 0.001, self._check_timeouts
        )

    def _check_timeouts(self) -> None:
        """Close the connection of a request past request.timeout.ms: its answer may still come,
        but closing fails every request on it, and they are retried (sequence numbers keep the
        partition free of duplicates)."""
        self._timeout_timer = None
        now_ms = self._clock.monotonic_ms()
        timeout_ms = self.config.request_timeout_ms
        for job, channel in list(self._awaiting.items()):
            if now_ms - job.sent_ms < timeout_ms:
                break
            if job in self._awaiting:  # not already failed by an earlier close
                job.timed_out = True
                channel.close()
        oldest = next(iter(self._awaiting), None)
        if oldest is not None:
            self._schedule_timeout_check(oldest.sent_ms)

    async def _send_job(self, job: ProduceJob) -> None:
        core = self._core
        try:
            channel = self._transport.ready_channel(job.node_id) or await self._transport.channel(job.node_id)
            if not job.expects_response:
                await channel.request(job.request, expect_response=False)
                core.on_sent_without_response(job)
                return
            try:
                async with asyncio.timeout(self.config.request_timeout_ms / 1000):
                    response = await channel.request(job.request)
            except TimeoutError:
                # The answer may still come; closing makes every request on the channel fail
                # and be retried, so sequence numbers keep the partition free of duplicates.
                channel.close()
                raise KafkaTimeoutError(f"produce to broker {job.node_id} timed out") from None
            core.on_response(job, response, self._clock.monotonic_ms())
        except KafkaError as error:
            core.on_error(job, error, self._clock.monotonic_ms())
        except Exception as error:  # a bug: fail the records loudly rather than hang them
            log.exception("produce request failed")
            core.on_error(job, KafkaError(f"internal error: {error!r}"), self._clock.monotonic_ms())
        finally:
            self._wakeup.set()

    async def _shutdown(self) -> None:
        if self._timeout_timer is not None:
            self._timeout_timer.cancel()
        self._sender_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._sender_task
        self._core.fail_everything(ClientClosedError("producer closed before these records were sent"))
        if self._transactions is not None:
            self._transactions.closed(
                ClientClosedError("producer closed before the transactional call completed")
            )
        await self._transport.close()
