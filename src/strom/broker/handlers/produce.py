"""Produce 3-11 (record batch format v2; acks 0, 1 and -1).

The hot path does per-batch work: the batch headers and CRC-32C are validated, then the batch
is checked completely once, as Kafka's log validator does (``strom.protocol.records.validate``:
records parse to the end of the batch, counts and offset deltas agree, the codec is known,
compressed batches decompress within their bound, keys are present on a compacted topic), a run of
alike records at a time with numpy rather than a record at a time; a batch too large to check on
the event loop is checked in a worker thread, its partition's later produces queued behind it
(``strom.broker.produce_validation``). Then the log assigns offsets by rewriting the batch's base
offset, and the bytes are appended as they came. A partition's records are one batch, as Kafka
requires of Produce v3 and later (none, or several, are INVALID_RECORD). A partition whose records
fail any check gets CORRUPT_MESSAGE (bad CRC, unknown codec, undecompressable data or more of it
than ``limits.decompressed_batch_bytes_max``) or INVALID_RECORD (the rest, with the culprit records
listed where Kafka lists them) and none of its records are appended. Internal topics
(``__consumer_offsets``) are INVALID_TOPIC_EXCEPTION, as in Kafka. Which partitions this broker
may append to, and whether acks=-1 waits for other replicas, is the ``Replication``'s to say: a
single node's append is all there is (acks=-1 like acks=1); in a cluster only the leader appends
and acks=-1 waits until the in-sync replicas have the batch.
"""

from __future__ import annotations

import logging

from strom.broker.context import RequestContext
from strom.broker.produce_validation import Turn
from strom.broker.refused import Refused
from strom.broker.registry import handles
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.records.header import MAGIC_OFFSET, CorruptBatchError, validate_batches
from strom.protocol.records.validate import InvalidRecordError
from strom.security.acl import ResourceType
from strom.storage import (
    DuplicateSequenceError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    PartitionLog,
    RecordTooLargeError,
    StorageError,
    UnknownProducerIdError,
)

log = logging.getLogger("strom.broker.produce")

ZSTD = 4
# Kafka lets only a request with this client id append to internal topics (its admin tools).
ADMIN_CLIENT_ID = "__admin_client"
ZSTD_MIN_PRODUCE_VERSION = 7
ACKS_ALL = -1
VALID_ACKS = (ACKS_ALL, 0, 1)

Partition = ProduceResponse.PartitionProduceResponse
TopicAnswer = ProduceResponse.TopicProduceResponse
RecordError = ProduceResponse.BatchIndexAndErrorMessage


class _RefusedRecords(Refused):
    """INVALID_RECORD with the culprit records (record_errors, Produce v8+)."""

    def __init__(self, message: str, record_errors: tuple[tuple[int, str], ...]) -> None:
        super().__init__(ErrorCode.INVALID_RECORD, message)
        self.record_errors = record_errors


async def _append(
    context: RequestContext,
    partition_log: PartitionLog,
    data: bytes | bytearray | memoryview | None,
    acks: int,
) -> Partition:
    state = context.broker
    if data is None or len(data) == 0:
        raise Refused(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {context.api_version} must have at least one record batch per partition",
        )
    if len(data) > MAGIC_OFFSET and data[MAGIC_OFFSET] != 2:
        raise Refused(
            ErrorCode.INVALID_RECORD,
            f"produce v{context.api_version} takes record batches of magic 2, got magic {data[MAGIC_OFFSET]}",
        )
    # The request's own buffer is writable (the frame decoder hands it over): offsets are written
    # into it in place; anything else is copied once.
    records = data if isinstance(data, memoryview) and not data.readonly else bytearray(data)
    try:
        headers = validate_batches(records)
    except CorruptBatchError as error:
        raise Refused(ErrorCode.CORRUPT_MESSAGE, str(error)) from None
    if len(headers) > 1:
        # Kafka's rule for Produce v3+ (ProduceRequest.validateRecords); no client sends more.
        raise Refused(
            ErrorCode.INVALID_RECORD,
            f"Produce requests with version {context.api_version} are only allowed to contain "
            "exactly one record batch per partition",
        )
    config = partition_log.config
    for header in headers:
        if header.size_bytes > config.max_message_bytes:
            raise Refused(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"batch of {header.size_bytes} bytes exceeds max.message.bytes {config.max_message_bytes}",
            )
        if header.compression == ZSTD and context.api_version < ZSTD_MIN_PRODUCE_VERSION:
            raise Refused(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs produce v7 or later")
    if len(records) > config.segment_bytes:
        raise Refused(
            ErrorCode.RECORD_LIST_TOO_LARGE,
            f"{len(records)} bytes of records exceed segment.bytes {config.segment_bytes}",
        )
    topic, index = partition_log.topic, partition_log.partition
    validation = state.produce_validation
    turn: Turn | None = None
    try:
        # Cheap uncompressed records to a partition with nothing in progress (the usual case) are
        # checked without a coroutine; anything else awaits its turn.
        checked = validation.check_at_once(
            (topic, index), records, headers, keys_required=config.requires_keys
        )
        if checked is None:
            turn = await validation.check(
                (topic, index), records, headers, keys_required=config.requires_keys
            )
            checked = turn.headers
    except InvalidRecordError as error:
        raise _RefusedRecords(str(error), error.record_errors) from None
    except CorruptBatchError as error:
        raise Refused(ErrorCode.CORRUPT_MESSAGE, str(error)) from None
    try:
        # After a wait the partition may be gone or led elsewhere: asked again.
        if (
            turn is not None
            and turn.waited
            and state.replication.writable(topic, index, acks) is not partition_log
        ):
            raise Refused(
                ErrorCode.NOT_LEADER_OR_FOLLOWER, f"{topic}-{index} changed while its records were checked"
            )
        now_ms = state.clock.wall_ms()
        try:
            result = partition_log.append(records, checked, now_ms)
        except DuplicateSequenceError as duplicate:
            # A retry of a batch already in the log: answered with where it went the first time.
            return Partition(
                error_code=ErrorCode.NONE,
                base_offset=duplicate.base_offset,
                log_start_offset=partition_log.log_start_offset,
            )
        except OutOfOrderSequenceError as error:
            raise Refused(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, str(error)) from None
        except InvalidProducerEpochError as error:
            raise Refused(ErrorCode.INVALID_PRODUCER_EPOCH, str(error)) from None
        except InvalidTxnStateError as error:
            raise Refused(ErrorCode.INVALID_TXN_STATE, str(error)) from None
        except UnknownProducerIdError as error:
            raise Refused(ErrorCode.UNKNOWN_PRODUCER_ID, str(error)) from None
        except RecordTooLargeError as error:
            raise Refused(ErrorCode.MESSAGE_TOO_LARGE, str(error)) from None
    finally:
        if turn is not None:
            turn.done()
    state.notify_append(partition_log.topic, partition_log.partition)
    if partition_log.needs_flush(now_ms):
        await state.flush(partition_log)
    # Positional (index, error code, base offset, append time, log start): on every produce's path.
    return Partition(
        0, ErrorCode.NONE, result.base_offset, result.log_append_time_ms, result.log_start_offset
    )


@handles(ProduceRequest, ProduceResponse, 3, 11)
async def handle_produce(context: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    state = context.broker
    replication = state.replication
    responses: list[ProduceResponse.TopicProduceResponse] = []
    acks_valid = request.acks in VALID_ACKS
    # acks=all on a replicated partition: (log, its end after the append, the answer) for each
    # partition appended to, answered once the in-sync replicas have it (``wait_for_acks``).
    replicated: list[tuple[PartitionLog, int, Partition]] | None = (
        [] if request.acks == ACKS_ALL and replication.waits_for_replicas else None
    )
    internal_allowed = context.client_id == ADMIN_CLIENT_ID
    authorizer = state.authorizer
    # With authorization on: WRITE on the transactional id of a transactional produce (else every
    # partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED), WRITE on each topic (else its
    # partitions are TOPIC_AUTHORIZATION_FAILED, whether it exists or not).
    refused_all = (
        authorizer is not None
        and request.transactional_id is not None
        and not authorizer.authorize(
            context.principal,
            context.client_host,
            AclOperation.WRITE,
            ResourceType.TRANSACTIONAL_ID,
            request.transactional_id,
        )
    )
    for topic_data in request.topic_data:
        partitions: list[Partition] = []
        topic = replication.topic(topic_data.name)
        internal = topic is not None and topic.internal and not internal_allowed
        refused_error = (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            if refused_all
            else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            if authorizer is not None
            and not authorizer.authorize(
                context.principal,
                context.client_host,
                AclOperation.WRITE,
                ResourceType.TOPIC,
                topic_data.name,
            )
            else None
        )
        for partition_data in topic_data.partition_data:
            index = partition_data.index
            try:
                if refused_error is not None:
                    raise Refused(refused_error, f"not authorized to write to {topic_data.name}")
                if not acks_valid:
                    raise Refused(
                        ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be -1, 0 or 1, not {request.acks}"
                    )
                if internal:
                    # As Kafka: clients write __consumer_offsets through the coordinator, never by
                    # hand (its records are replayed into group state on every start).
                    raise Refused(
                        ErrorCode.INVALID_TOPIC_EXCEPTION,
                        f"Cannot append to internal topic {topic_data.name}",
                    )
                partition_log = replication.writable(topic_data.name, index, request.acks)
                partition = await _append(context, partition_log, partition_data.records, request.acks)
                if replicated is not None:
                    replicated.append((partition_log, partition_log.log_end_offset, partition))
            except Refused as refused:
                partition = Partition(error_code=refused.error, base_offset=-1, log_start_offset=-1)
                if context.api_version >= 8:
                    partition.error_message = refused.message
                    if isinstance(refused, _RefusedRecords):
                        partition.record_errors = [
                            RecordError(batch_index=index, batch_index_error_message=reason)
                            for index, reason in refused.record_errors
                        ]
            except StorageError as error:
                log.error("append to %s-%d failed: %s", topic_data.name, index, error)
                partition = Partition(error_code=ErrorCode.KAFKA_STORAGE_ERROR, base_offset=-1)
                if context.api_version >= 8:
                    partition.error_message = str(error)
            partition.index = index
            partitions.append(partition)
        responses.append(TopicAnswer(topic_data.name, partitions))
    if replicated:
        await _wait_for_replicas(context, replicated, request.timeout_ms)
    if request.acks == 0:
        return None
    return ProduceResponse(responses)


async def _wait_for_replicas(
    context: RequestContext, appended: list[tuple[PartitionLog, int, Partition]], timeout_ms: int
) -> None:
    """acks=all: each answer stands once its partition's high watermark passes the append; else it
    becomes the error the replication gives (NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT,
    NOT_LEADER_OR_FOLLOWER)."""
    errors = await context.broker.replication.wait_for_acks(
        [(partition_log, end_offset) for partition_log, end_offset, _ in appended], timeout_ms
    )
    for (_log, _end, partition), error in zip(appended, errors, strict=True):
        if error != ErrorCode.NONE:
            partition.error_code = error
            partition.base_offset = -1
            partition.log_append_time_ms = -1
