"""What to send and what a Produce answer means: the producer's protocol logic. Pure, no I/O.

``collect()`` turns ready batches into Produce requests, one per leader; ``on_response()`` and
``on_error()`` resolve, retry or fail the batches of a request. With idempotence every batch gets
the partition's next sequence number when it is first drained and keeps it on every retry; a
partition whose batch must be retried sends nothing new until its requests in flight have all
come back, then resends in sequence order. So retries keep order and the broker drops duplicates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from strom.client.cluster import ClusterMetadata, TopicPartition
from strom.client.config import ProducerConfig
from strom.client.errors import KafkaError, KafkaTimeoutError, error_for_code
from strom.client.produce_codec import FastProduceRequest
from strom.client.producer.accumulator import ProducerBatch, RecordAccumulator
from strom.client.producer.transactions import TransactionManager
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse

__all__ = ["ProduceJob", "SenderCore"]

# Sequence numbers are int32 and wrap to 0 after the largest value (as the broker expects).
_SEQUENCE_MODULUS = 1 << 31


@dataclass(slots=True, eq=False)
class ProduceJob:
    """One Produce request for one broker, and the batch it carries for each partition."""

    node_id: int
    request: ProduceRequest
    batches: dict[TopicPartition, ProducerBatch]
    expects_response: bool
    # When it was written (monotonic ms), for request.timeout.ms; set by whoever sends it.
    sent_ms: int = 0
    # Its time ran out: the connection was closed, and the failure is a timeout.
    timed_out: bool = False


@dataclass(slots=True)
class _PartitionState:
    next_sequence: int = 0
    in_flight: int = 0
    # Batches put back for a retry and not yet resent: nothing newer goes out before them.
    retries_waiting: int = 0


@dataclass
class SenderCore:
    config: ProducerConfig
    accumulator: RecordAccumulator
    metadata: ClusterMetadata
    producer_id: int = -1
    producer_epoch: int = -1
    _partitions: dict[TopicPartition, _PartitionState] = field(default_factory=dict)
    in_flight_batches: int = 0
    # A transactional producer's transaction state (None: not transactional). Its producer id
    # comes from the transaction's InitProducerId, and a partition's batches wait until the
    # partition is in the transaction.
    transactions: TransactionManager | None = None

    @property
    def idempotent(self) -> bool:
        return self.config.enable_idempotence

    @property
    def needs_producer_id(self) -> bool:
        """An idempotent (not transactional) producer has yet to get its producer id."""
        return self.idempotent and self.producer_id < 0 and self.transactions is None

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self._partitions.clear()
        self.accumulator.busy.clear()

    def _state(self, topic_partition: TopicPartition) -> _PartitionState:
        state = self._partitions.get(topic_partition)
        if state is None:
            state = self._partitions[topic_partition] = _PartitionState()
        return state

    def blocked(self, topic_partition: TopicPartition) -> bool:
        """The partition may not send its next batch yet."""
        state = self._partitions.get(topic_partition)
        if state is None:
            return False
        if state.in_flight >= self.config.max_in_flight_requests_per_connection:
            return True
        return state.retries_waiting > 0 and state.in_flight > 0

    def busy(self, topic_partition: TopicPartition) -> bool:
        """The partition has a request in flight."""
        state = self._partitions.get(topic_partition)
        return state is not None and state.in_flight > 0

    # -- sending -------------------------------------------------------------------------------

    def expire(self, now_ms: int) -> None:
        """Fail queued batches that have waited past ``delivery.timeout.ms``."""
        for batch in self.accumulator.expired(now_ms, self.config.delivery_timeout_ms):
            if batch.encoded is not None:
                self._state(batch.topic_partition).retries_waiting -= 1
            self._fail(
                batch, KafkaTimeoutError(f"{batch.record_count} records for {batch.topic_partition} expired")
            )

    def _blocked_in_transaction(self, topic_partition: TopicPartition) -> bool:
        transactions = self.transactions
        assert transactions is not None
        return not transactions.may_send(topic_partition) or self.blocked(topic_partition)

    def collect(self, now_ms: int, node_ready: Callable[[int], bool]) -> tuple[list[ProduceJob], int | None]:
        """Produce requests to send now, and the ms until another batch will be ready."""
        if self.needs_producer_id:
            return [], None
        self.expire(now_ms)
        blocked = self.blocked
        if self.transactions is not None:
            if self.producer_id < 0:
                return [], None
            blocked = self._blocked_in_transaction
        ready, next_ms = self.accumulator.ready(now_ms, blocked, self.busy)
        by_node: dict[int, list[TopicPartition]] = {}
        for topic_partition in ready:
            leader = self.metadata.leader_for(topic_partition)
            if leader is None:
                self.metadata.request_refresh()
                continue
            if node_ready(leader):
                by_node.setdefault(leader, []).append(topic_partition)
        jobs = []
        for node_id, topic_partitions in by_node.items():
            job = self._build_job(node_id, topic_partitions)
            if job is not None:
                jobs.append(job)
        return jobs, next_ms

    def _build_job(self, node_id: int, topic_partitions: list[TopicPartition]) -> ProduceJob | None:
        batches: dict[TopicPartition, ProducerBatch] = {}
        request_bytes = 0
        for topic_partition in topic_partitions:
            size = self.accumulator.peek_size(topic_partition)
            if batches and request_bytes + size > self.config.max_request_size:
                continue
            batch = self.accumulator.pop(topic_partition)
            if batch is None:
                continue
            self._prepare(batch)
            request_bytes += len(batch.build())
            batches[topic_partition] = batch
        if not batches:
            return None
        topics: dict[str, ProduceRequest.TopicProduceData] = {}
        for (topic, partition), batch in batches.items():
            topic_data = topics.get(topic)
            if topic_data is None:
                topic_data = topics[topic] = ProduceRequest.TopicProduceData(name=topic)
            topic_data.partition_data.append(
                ProduceRequest.PartitionProduceData(index=partition, records=batch.encoded)
            )
        request = FastProduceRequest(
            acks=self.config.acks, timeout_ms=self.config.request_timeout_ms, topic_data=list(topics.values())
        )
        self.in_flight_batches += len(batches)
        return ProduceJob(node_id, request, batches, expects_response=self.config.acks != 0)

    def _prepare(self, batch: ProducerBatch) -> None:
        state = self._state(batch.topic_partition)
        state.in_flight += 1
        self.accumulator.busy.add(batch.topic_partition)
        batch.attempts += 1
        if batch.encoded is not None:  # a retry: same bytes, same sequence
            state.retries_waiting -= 1
            return
        if self.idempotent:
            batch.producer_id = self.producer_id
            batch.producer_epoch = self.producer_epoch
            batch.base_sequence = state.next_sequence
            state.next_sequence = (state.next_sequence + batch.record_count) % _SEQUENCE_MODULUS
        batch.build(self.accumulator.compression, self.transactions is not None)

    # -- answers -------------------------------------------------------------------------------

    def on_sent_without_response(self, job: ProduceJob) -> None:
        """acks=0: the request is written; that is all the acknowledgement there will be."""
        for batch in job.batches.values():
            self._finished_sending(batch)
            self._complete(batch, -1, -1)

    def on_response(self, job: ProduceJob, response: ProduceResponse, now_ms: int) -> None:
        answered: set[TopicPartition] = set()
        for topic_response in response.responses:
            for partition_response in topic_response.partition_responses:
                topic_partition = TopicPartition(topic_response.name, partition_response.index)
                batch = job.batches.get(topic_partition)
                if batch is None or topic_partition in answered:
                    continue
                answered.add(topic_partition)
                self._finished_sending(batch)
                self._on_partition(batch, partition_response, now_ms)
        for topic_partition, batch in job.batches.items():
            if topic_partition not in answered:
                self._finished_sending(batch)
                self._retry_or_fail(
                    batch,
                    KafkaError(f"broker did not answer for {topic_partition}", ErrorCode.NETWORK_EXCEPTION),
                    now_ms,
                )

    def _on_partition(
        self, batch: ProducerBatch, answer: ProduceResponse.PartitionProduceResponse, now_ms: int
    ) -> None:
        code = answer.error_code
        if code == ErrorCode.NONE:
            self._complete(batch, answer.base_offset, answer.log_append_time_ms)
        elif code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER and self.idempotent:
            # Appended by an earlier attempt whose answer was lost; the broker no longer has its offset.
            self._complete(batch, answer.base_offset if answer.base_offset >= 0 else -1, -1)
        else:
            error: KafkaError = error_for_code(
                code, answer.error_message, context=f"produce to {batch.topic_partition}"
            )
            if self.idempotent and code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                # An earlier batch of the partition failed and is being resent; so is this one.
                error = KafkaError(error.message, ErrorCode.NOT_ENOUGH_REPLICAS)
            self._retry_or_fail(batch, error, now_ms)

    def on_error(self, job: ProduceJob, error: KafkaError, now_ms: int) -> None:
        """The request failed as a whole (connection lost, timeout): every batch is retried."""
        self.metadata.request_refresh()
        for batch in job.batches.values():
            self._finished_sending(batch)
            self._retry_or_fail(batch, error, now_ms)

    def _finished_sending(self, batch: ProducerBatch) -> None:
        state = self._state(batch.topic_partition)
        state.in_flight -= 1
        if state.in_flight <= 0:
            self.accumulator.busy.discard(batch.topic_partition)
        self.in_flight_batches -= 1

    def _retry_or_fail(self, batch: ProducerBatch, error: KafkaError, now_ms: int) -> None:
        expired = now_ms - batch.created_ms >= self.config.delivery_timeout_ms
        if error.retriable and batch.attempts <= self.config.retries and not expired:
            if error.code is not None and error.code.invalid_metadata:
                self.metadata.request_refresh()
            self._state(batch.topic_partition).retries_waiting += 1
            self.accumulator.requeue(batch)
            return
        self._fail(batch, error)

    def _complete(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int) -> None:
        try:
            batch.complete(base_offset, log_append_time_ms)
        finally:
            self.accumulator.done(batch)

    def _fail(self, batch: ProducerBatch, error: Exception) -> None:
        if self.transactions is not None:
            error = self.transactions.batch_failed(error, sequenced=batch.encoded is not None)
        try:
            batch.fail(error)
        finally:
            self.accumulator.done(batch)

    def fail_queued(self, error: Exception) -> None:
        """Fail every batch not in flight (an aborted transaction's, a fenced producer's)."""
        for batch in self.accumulator.drain_all():
            if batch.encoded is not None:  # put back for a retry
                self._state(batch.topic_partition).retries_waiting -= 1
            self._fail(batch, error)

    def fail_everything(self, error: Exception) -> None:
        """The producer is closing without delivering: fail whatever is still queued."""
        for batch in self.accumulator.drain_all():
            self._fail(batch, error)
