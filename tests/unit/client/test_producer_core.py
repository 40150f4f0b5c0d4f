"""Accumulator and sender core against a fake broker: batching, linger, order, idempotent retries."""

from __future__ import annotations

from strom.base.clock import ManualClock
from strom.client.cluster import BrokerNode, ClusterMetadata, PartitionInfo, TopicInfo, TopicPartition
from strom.client.config import ProducerConfig
from strom.client.errors import KafkaConnectionError
from strom.client.producer.accumulator import DeliveryFuture, RecordAccumulator, RecordMetadata
from strom.client.producer.sender import ProduceJob, SenderCore
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.produce import ProduceResponse
from strom.protocol.records import iter_batches

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def cluster() -> ClusterMetadata:
    metadata = ClusterMetadata(max_age_ms=300_000)
    metadata.brokers = {1: BrokerNode(1, "h", 1)}
    metadata.topics = {"t": TopicInfo("t", {p: PartitionInfo(p, 1, 0, (1,), (1,)) for p in (0, 1)})}
    metadata.updated_ms = 0
    return metadata


class FakeBroker:
    """Keeps a log per partition and, like Kafka, per-partition producer sequence state."""

    def __init__(self) -> None:
        self.logs: dict[TopicPartition, list[bytes | None]] = {}
        self.next_sequence: dict[TopicPartition, int] = {}
        self.fail_next: list[ErrorCode] = []

    def handle(self, job: ProduceJob) -> ProduceResponse:
        responses = []
        for topic in job.request.topic_data:
            partitions = []
            for data in topic.partition_data:
                tp = TopicPartition(topic.name, data.index)
                partitions.append(self._append(tp, bytes(data.records or b"")))
            responses.append(
                ProduceResponse.TopicProduceResponse(name=topic.name, partition_responses=partitions)
            )
        return ProduceResponse(responses=responses)

    def _append(self, tp: TopicPartition, records: bytes) -> ProduceResponse.PartitionProduceResponse:
        (batch,) = list(iter_batches(records))
        log = self.logs.setdefault(tp, [])
        if self.fail_next:
            return ProduceResponse.PartitionProduceResponse(
                index=tp.partition, error_code=self.fail_next.pop(0)
            )
        expected = self.next_sequence.get(tp, 0)
        sequence = batch.header.base_sequence
        if sequence < expected:
            return ProduceResponse.PartitionProduceResponse(
                index=tp.partition, error_code=ErrorCode.DUPLICATE_SEQUENCE_NUMBER, base_offset=-1
            )
        if sequence > expected:
            return ProduceResponse.PartitionProduceResponse(
                index=tp.partition, error_code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            )
        self.next_sequence[tp] = expected + len(batch.records)
        base_offset = len(log)
        log.extend(record.value for record in batch.records)
        return ProduceResponse.PartitionProduceResponse(index=tp.partition, base_offset=base_offset)


def make(
    linger_ms: int = 5, batch_size: int = 1000, **settings: object
) -> tuple[RecordAccumulator, SenderCore, ManualClock]:
    config = ProducerConfig.from_settings(linger_ms=linger_ms, batch_size=batch_size, **settings)
    clock = ManualClock()
    accumulator = RecordAccumulator(
        batch_size=batch_size, linger_ms=linger_ms, compression="none", clock=clock
    )
    core = SenderCore(config, accumulator, cluster())
    core.set_producer_id(7, 0)
    return accumulator, core, clock


def append(
    accumulator: RecordAccumulator, clock: ManualClock, tp: TopicPartition, value: bytes
) -> DeliveryFuture:
    return accumulator.append(tp, clock.wall_ms(), None, value, (), None)


def always_ready(node_id: int) -> bool:
    return True


def test_batch_waits_for_linger_then_goes() -> None:
    accumulator, core, clock = make(linger_ms=5)
    append(accumulator, clock, TP0, b"a")
    jobs, next_ms = core.collect(clock.monotonic_ms(), always_ready)
    assert jobs == [] and next_ms == 5
    clock.advance(5)
    jobs, _ = core.collect(clock.monotonic_ms(), always_ready)
    assert len(jobs) == 1 and set(jobs[0].batches) == {TP0}


def test_full_batch_goes_without_linger_and_flush_sends_everything() -> None:
    accumulator, core, clock = make(linger_ms=10_000, batch_size=200)
    for _ in range(5):
        append(accumulator, clock, TP0, b"x" * 50)
    append(accumulator, clock, TP1, b"y")
    jobs, _ = core.collect(clock.monotonic_ms(), always_ready)
    assert [set(job.batches) for job in jobs] == [{TP0}]
    accumulator.flushing += 1
    jobs, _ = core.collect(clock.monotonic_ms(), always_ready)
    assert {tp for job in jobs for tp in job.batches} == {TP0, TP1}


def test_records_resolve_with_consecutive_offsets_in_send_order() -> None:
    accumulator, core, clock = make(linger_ms=0)
    broker = FakeBroker()
    futures = [append(accumulator, clock, TP0, bytes([index])) for index in range(10)]
    for job in core.collect(clock.monotonic_ms(), always_ready)[0]:
        core.on_response(job, broker.handle(job), clock.monotonic_ms())
    assert [future.result(0) for future in futures] == [
        RecordMetadata("t", 0, offset, clock.wall_ms()) for offset in range(10)
    ]
    assert accumulator.incomplete == 0


def test_sequences_follow_record_counts_per_partition() -> None:
    accumulator, core, clock = make(linger_ms=0, batch_size=100)
    for index in range(6):
        append(accumulator, clock, TP0, bytes(60) + bytes([index]))  # one record per batch
    sequences = []
    for _ in range(6):
        jobs, _ = core.collect(clock.monotonic_ms(), always_ready)
        for job in jobs:
            batch = job.batches[TP0]
            sequences.append(batch.base_sequence)
            core.on_response(job, _ok(job), clock.monotonic_ms())
    assert sequences == [0, 1, 2, 3, 4, 5]


def _ok(job: ProduceJob) -> ProduceResponse:
    return ProduceResponse(
        responses=[
            ProduceResponse.TopicProduceResponse(
                name=tp.topic,
                partition_responses=[ProduceResponse.PartitionProduceResponse(index=tp.partition)],
            )
            for tp in job.batches
        ]
    )


def test_lost_connection_retries_in_order_without_duplicates() -> None:
    """Five batches in flight; the first reaches the broker but its answer is lost, the
    connection drops. Everything is resent in sequence order: the broker keeps exactly one copy
    of each record and the log is in send order."""
    accumulator, core, clock = make(linger_ms=0, batch_size=100)
    broker = FakeBroker()
    futures = []
    in_flight: list[ProduceJob] = []
    for index in range(5):
        futures.append(append(accumulator, clock, TP0, bytes(60) + bytes([index])))
        jobs, _ = core.collect(clock.monotonic_ms(), always_ready)
        in_flight.extend(jobs)
    assert len(in_flight) == 5
    broker.handle(in_flight[0])  # appended, answer lost
    for job in in_flight:
        core.on_error(job, KafkaConnectionError("connection reset"), clock.monotonic_ms())
    futures.append(append(accumulator, clock, TP0, bytes(60) + bytes([5])))
    for _ in range(20):
        jobs, _ = core.collect(clock.monotonic_ms(), always_ready)
        if not jobs:
            break
        for job in jobs:
            core.on_response(job, broker.handle(job), clock.monotonic_ms())
    assert [value[-1] for value in broker.logs[TP0] if value] == [0, 1, 2, 3, 4, 5]
    assert all(future.done() and future.exception() is None for future in futures)


def test_out_of_order_after_a_failed_predecessor_is_retried_not_failed() -> None:
    accumulator, core, clock = make(linger_ms=0, batch_size=100)
    broker = FakeBroker()
    futures = [append(accumulator, clock, TP0, bytes(60) + bytes([0]))]
    first, _ = core.collect(clock.monotonic_ms(), always_ready)
    futures.append(append(accumulator, clock, TP0, bytes(60) + bytes([1])))
    second, _ = core.collect(clock.monotonic_ms(), always_ready)
    broker.fail_next = [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    core.on_response(first[0], broker.handle(first[0]), clock.monotonic_ms())
    core.on_response(second[0], broker.handle(second[0]), clock.monotonic_ms())  # OUT_OF_ORDER
    for _ in range(5):
        jobs, _ = core.collect(clock.monotonic_ms(), always_ready)
        for job in jobs:
            core.on_response(job, broker.handle(job), clock.monotonic_ms())
    assert [value[-1] for value in broker.logs[TP0] if value] == [0, 1]
    assert [future.result(0).offset for future in futures] == [0, 1]


def test_non_retriable_error_fails_the_records() -> None:
    accumulator, core, clock = make(linger_ms=0)
    broker = FakeBroker()
    future = append(accumulator, clock, TP0, b"v")
    broker.fail_next = [ErrorCode.MESSAGE_TOO_LARGE]
    (job,), _ = core.collect(clock.monotonic_ms(), always_ready)
    core.on_response(job, broker.handle(job), clock.monotonic_ms())
    error = future.exception(0)
    assert error is not None and "MESSAGE_TOO_LARGE" in str(error)
    assert accumulator.incomplete == 0


def test_delivery_timeout_expires_queued_batches() -> None:
    accumulator, core, clock = make(linger_ms=0, delivery_timeout_ms=1000, request_timeout_ms=500)
    future = append(accumulator, clock, TP0, b"v")
    clock.advance(1000)
    core.collect(clock.monotonic_ms(), lambda node_id: False)
    assert "expired" in str(future.exception(0))


def test_blocked_partition_waits_for_its_in_flight_requests() -> None:
    accumulator, core, clock = make(linger_ms=0, max_in_flight_requests_per_connection=1)
    append(accumulator, clock, TP0, b"a")
    (job,), _ = core.collect(clock.monotonic_ms(), always_ready)
    append(accumulator, clock, TP0, b"b")
    assert core.collect(clock.monotonic_ms(), always_ready)[0] == []
    core.on_response(job, _ok(job), clock.monotonic_ms())
    assert len(core.collect(clock.monotonic_ms(), always_ready)[0]) == 1


def test_linger_zero_sends_at_once_then_gathers_what_arrives_while_a_request_is_out() -> None:
    accumulator, core, clock = make(linger_ms=0, batch_size=1000)
    broker = FakeBroker()
    append(accumulator, clock, TP0, b"a")
    assert accumulator.wake_needed  # the partition is idle: its first record wakes the sender
    accumulator.wake_needed = False
    (first,), _ = core.collect(clock.monotonic_ms(), always_ready)
    assert TP0 in accumulator.busy
    futures = [append(accumulator, clock, TP0, bytes([index])) for index in range(3)]
    # Its request is out: the records wait for the answer (no wake-up, no timer), all in one batch.
    assert not accumulator.wake_needed
    assert core.collect(clock.monotonic_ms(), always_ready) == ([], None)
    core.on_response(first, broker.handle(first), clock.monotonic_ms())
    assert TP0 not in accumulator.busy
    assert accumulator.incomplete > core.in_flight_batches  # what makes the producer wake the sender
    (second,), _ = core.collect(clock.monotonic_ms(), always_ready)
    assert second.batches[TP0].record_count == 3
    core.on_response(second, broker.handle(second), clock.monotonic_ms())
    assert [future.result(0).offset for future in futures] == [1, 2, 3]
    assert broker.logs[TP0] == [b"a", b"\x00", b"\x01", b"\x02"]


def test_linger_zero_sends_a_full_batch_even_while_a_request_is_out() -> None:
    accumulator, core, clock = make(linger_ms=0, batch_size=200)
    append(accumulator, clock, TP0, b"a")
    core.collect(clock.monotonic_ms(), always_ready)
    accumulator.wake_needed = False
    for _ in range(3):  # the third fills the batch (header and records over 200 bytes)
        append(accumulator, clock, TP0, b"x" * 50)
    assert accumulator.wake_needed  # full: it goes now, up to max.in.flight
    (job,), _ = core.collect(clock.monotonic_ms(), always_ready)
    assert job.batches[TP0].record_count == 3
