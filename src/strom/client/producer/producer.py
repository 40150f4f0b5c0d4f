"""The Producer: synchronous, thread-safe ``send()`` in front of a sender task on the loop thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Iterable, Mapping
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Self

from strom.base.clock import SystemClock
from strom.client.cluster import TopicPartition
from strom.client.config import ProducerConfig
from strom.client.errors import ClientClosedError, ConfigError, KafkaError, KafkaTimeoutError, error_for_code
from strom.client.producer.accumulator import DeliveryCallback, RecordAccumulator, RecordMetadata
from strom.client.producer.partitioner import StickyPartitioner, partition_for_key
from strom.client.producer.sender import ProduceJob, SenderCore
from strom.client.transport import LoopThread, Transport
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.init_producer_id import InitProducerIdRequest

__all__ = ["Producer", "RecordMetadata"]

log = logging.getLogger(__name__)

HeadersArgument = Iterable[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None

# When batches wait for something the sender is not told about (a connection, a partition's
# requests in flight), it looks again this often.
_IDLE_RECHECK_MS = 50


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
        self._loop_thread = LoopThread(f"strom-producer-{self.config.client_id}")
        self._loop_thread.run(self._start())

    async def _start(self) -> None:
        self._transport = Transport(self.config, clock=self._clock, allow_auto_topic_creation=True)
        self._core = SenderCore(self.config, self._accumulator, self._transport.metadata)
        self._wakeup = asyncio.Event()
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
        """Deliver what is queued (within ``timeout``), then stop. Idempotent."""
        if self._closed:
            return
        self._closing = True
        try:
            self.flush(timeout)
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
        while not (self._closed and self._accumulator.incomplete == 0):
            self._wakeup.clear()
            next_ms: int | None = None
            try:
                if core.needs_producer_id:
                    await self._init_producer_id()
                if self._transport.metadata.stale(self._clock.monotonic_ms()):
                    self._start_refresh()
                jobs, next_ms = core.collect(self._clock.monotonic_ms(), self._node_ready)
                for job in jobs:
                    self._spawn(self._send_job(job))
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
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if next_ms is None else max(next_ms, 1) / 1000):
                    await self._wakeup.wait()

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

    async def _init_producer_id(self) -> None:
        request = InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000)
        response = await self._transport.send_any(request)
        if response.error_code != ErrorCode.NONE:
            raise error_for_code(response.error_code, context="InitProducerId")
        self._core.set_producer_id(response.producer_id, response.producer_epoch)

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
        self._sender_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._sender_task
        self._core.fail_everything(ClientClosedError("producer closed before these records were sent"))
        await self._transport.close()
