"""ListOffsets 1-10: earliest (-2), latest (-1), max timestamp (-3, v7+), earliest local (-4, v8+),
latest tiered (-5, v9+: no offset, as Kafka answers without tiered storage; v10's TimeoutMs is for
remote reads, which strom has none of) and the first offset whose timestamp is at or after a given
time.

Answered by the partition's leader (``Replication.readable``, which checks the request's
``current_leader_epoch``); latest is the high watermark (the log end of a single node), or the last
stable offset for a read_committed consumer (``isolation_level`` 1, v2+): where its reading stops.
A timestamp lookup (and max timestamp) answers only a record below that end, as Kafka does: one at
or past it is answered offset -1 (not yet readable by this consumer)."""

from __future__ import annotations

from collections.abc import Callable

from strom.broker.context import RequestContext
from strom.broker.registry import handles
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from strom.protocol.records import AbsoluteRecord, CorruptBatchError, iter_batches
from strom.security.acl import ResourceType
from strom.storage import OffsetOutOfRangeError, PartitionLog

LATEST = -1
EARLIEST = -2
READ_COMMITTED = 1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
LATEST_TIERED_MIN_VERSION = 9

Partition = ListOffsetsResponse.ListOffsetsPartitionResponse


def _lookup(
    partition_log: PartitionLog, timestamp: int, version: int, read_committed: bool
) -> tuple[ErrorCode, int, int]:
    """(error, offset, timestamp) for one partition."""
    # What this reader may fetch ends here: the last stable offset (read_committed) or the high
    # watermark. A record found by its timestamp at or past it is not answered (offset -1).
    fetchable_end = partition_log.last_stable_offset if read_committed else partition_log.high_watermark
    if timestamp == LATEST:
        return ErrorCode.NONE, fetchable_end, -1
    if timestamp == EARLIEST or (timestamp == EARLIEST_LOCAL and version >= 8):
        return ErrorCode.NONE, partition_log.log_start_offset, -1
    if timestamp == LATEST_TIERED and version >= LATEST_TIERED_MIN_VERSION:
        return ErrorCode.NONE, -1, -1  # nothing is tiered: no offset (KIP-1005)
    if timestamp == MAX_TIMESTAMP and version >= 7:
        offset, max_timestamp = partition_log.max_timestamp()
        if offset < 0:
            return ErrorCode.NONE, -1, -1
        exact = _first_record_at(
            partition_log, offset, lambda record: record.timestamp == max_timestamp, whole_batch=True
        )
        return _fetchable(exact or (offset, max_timestamp), fetchable_end)
    if timestamp < 0:
        return ErrorCode.UNSUPPORTED_VERSION, -1, -1
    found = partition_log.offset_for_timestamp(timestamp)
    if found is None:
        return ErrorCode.NONE, -1, -1
    exact = _first_record_at(partition_log, found[0], lambda record: record.timestamp >= timestamp)
    return _fetchable(exact or found, fetchable_end)


def _fetchable(found: tuple[int, int], fetchable_end: int) -> tuple[ErrorCode, int, int]:
    offset, timestamp = found
    if offset >= fetchable_end:
        return ErrorCode.NONE, -1, -1
    return ErrorCode.NONE, offset, timestamp


def _first_record_at(
    partition_log: PartitionLog,
    offset: int,
    matches: Callable[[AbsoluteRecord], bool],
    whole_batch: bool = False,
) -> tuple[int, int] | None:
    """The log answers at batch granularity; the protocol wants the record. Decode the one batch
    that holds ``offset`` (this is where the semantics demand a decode) and pick the record."""
    try:
        data = partition_log.read(offset, 1, min_one_batch=True).records
        batches = list(iter_batches(data))
    except (OffsetOutOfRangeError, CorruptBatchError):
        return None
    for batch in batches[:1]:
        for record in batch.absolute_records():
            if (
                (whole_batch or record.offset >= offset)
                and record.offset >= partition_log.log_start_offset
                and matches(record)
            ):
                return record.offset, record.timestamp
    return None


@handles(ListOffsetsRequest, ListOffsetsResponse, 1, 10)
async def handle_list_offsets(context: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    state = context.broker
    version = context.api_version
    read_committed = version >= 2 and request.isolation_level == READ_COMMITTED
    authorizer = state.authorizer
    topics: list[ListOffsetsResponse.ListOffsetsTopicResponse] = []
    for topic in request.topics:
        partitions: list[Partition] = []
        # With authorization on: DESCRIBE on the topic, whether it exists or not.
        refused = authorizer is not None and not authorizer.authorize(
            context.principal, context.client_host, AclOperation.DESCRIBE, ResourceType.TOPIC, topic.name
        )
        for wanted in topic.partitions:
            partition = Partition(partition_index=wanted.partition_index, timestamp=-1, offset=-1)
            partitions.append(partition)
            if refused:
                partition.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            access = state.replication.readable(
                topic.name, wanted.partition_index, wanted.current_leader_epoch, request.replica_id
            )
            if isinstance(access, ErrorCode):
                partition.error_code = access
                continue
            error, offset, timestamp = _lookup(access.log, wanted.timestamp, version, read_committed)
            partition.error_code = error
            partition.offset = offset
            partition.timestamp = timestamp
            if version >= 4:
                partition.leader_epoch = access.leader_epoch if offset >= 0 else -1
        topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
    return ListOffsetsResponse(topics=topics)
