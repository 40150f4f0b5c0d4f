"""Fetch 4-17: whole batches straight from the segment files, with long polls.

Records are served exactly as stored, starting with the batch that holds the fetch offset (the
client skips offsets below its position), at most as many bytes as the connection may still buffer
(``RequestContext.response_bytes_max``, see ``broker/connection_budget.py``) and never less than
one batch. When fewer than ``min_bytes`` are ready the request waits until an append to one of its
partitions or ``max_wait_ms``, never by polling. Fetch sessions are supported in the "no session"
form Kafka allows: a full request gets session id 0, which tells the client that no session was
created and that its next request must be full too.

Who may read what is the ``Replication``'s to say: a consumer reads from the leader below the high
watermark (a single node: to the log end), checked against its ``current_leader_epoch``; a follower
(replica id >= 0, a broker of the cluster) reads to the log end, the offset it fetches at telling
the leader how far it got, and waits for appends while a consumer waits for the high watermark.
"""

from __future__ import annotations

from strom.base import limits
from strom.broker.context import RequestContext
from strom.broker.registry import handles
from strom.broker.replication import TopicView
from strom.broker.state import BrokerState
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.storage import LogFileError, OffsetOutOfRangeError

NO_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
TOPIC_IDS_MIN_VERSION = 13
REPLICA_STATE_MIN_VERSION = 15
READ_COMMITTED = 1

PartitionData = FetchResponse.PartitionData


def _session_error(request: FetchRequest) -> ErrorCode:
    """Sessionless fetches only: a request that refers to a session we never created is refused."""
    if request.session_id != NO_SESSION_ID:
        return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    if request.session_epoch not in (INITIAL_EPOCH, FINAL_EPOCH):
        return ErrorCode.INVALID_FETCH_SESSION_EPOCH
    return ErrorCode.NONE


def _resolve(state: BrokerState, topic: FetchRequest.FetchTopic, version: int) -> TopicView | ErrorCode:
    if version >= TOPIC_IDS_MIN_VERSION:
        found = state.replication.topic_by_id(topic.topic_id)
        return found if found is not None else ErrorCode.UNKNOWN_TOPIC_ID
    found = state.replication.topic(topic.topic)
    return found if found is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def replica_id_of(request: FetchRequest, version: int) -> int:
    """The fetching broker's id (-1 for a consumer): a field of its own before v15, in the
    replica state from v15."""
    return request.replica_state.replica_id if version >= REPLICA_STATE_MIN_VERSION else request.replica_id


def _read_all(
    state: BrokerState, request: FetchRequest, version: int, response_bytes_max: int, replica_id: int
) -> tuple[list[FetchResponse.FetchableTopicResponse], int, bool]:
    """One pass over every requested partition: (responses, bytes of records, any partition errored).
    At most ``response_bytes_max`` bytes of records, whatever the request asks (but one batch)."""
    bytes_left = min(request.max_bytes if request.max_bytes > 0 else 2**31 - 1, response_bytes_max)
    total_bytes = 0
    errored = False
    aborted: list[FetchResponse.AbortedTransaction] | None = (
        [] if request.isolation_level == READ_COMMITTED else None
    )
    responses: list[FetchResponse.FetchableTopicResponse] = []
    replication = state.replication
    for topic in request.topics:
        resolved = _resolve(state, topic, version)
        partitions: list[PartitionData] = []
        for wanted in topic.partitions:
            partition = PartitionData(
                partition_index=wanted.partition,
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
                aborted_transactions=aborted,
                records=b"",
            )
            partitions.append(partition)
            if isinstance(resolved, ErrorCode):
                partition.error_code = resolved
                errored = True
                continue
            access = replication.readable(
                resolved.name, wanted.partition, wanted.current_leader_epoch, replica_id
            )
            if isinstance(access, ErrorCode):
                partition.error_code = access
                errored = True
                continue
            partition_log = access.log
            if replica_id >= 0:
                progress = replication.follower_fetched(access, replica_id, wanted.fetch_offset)
                if progress != ErrorCode.NONE:
                    partition.error_code = progress
                    partition.high_watermark = partition_log.high_watermark
                    partition.log_start_offset = partition_log.log_start_offset
                    errored = True
                    continue
            max_bytes = min(wanted.partition_max_bytes, bytes_left)
            try:
                # KIP-74: the first batch of the response is returned whole even when larger than
                # the limits, so a consumer can never get stuck behind one big batch.
                result = partition_log.read(
                    wanted.fetch_offset,
                    max(max_bytes, 0),
                    min_one_batch=total_bytes == 0,
                    max_offset=access.max_offset,
                )
            except OffsetOutOfRangeError:
                partition.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                partition.high_watermark = partition_log.high_watermark
                partition.last_stable_offset = partition_log.high_watermark
                partition.log_start_offset = partition_log.log_start_offset
                errored = True
                continue
            except LogFileError:  # e.g. out of file descriptors: this partition, this time
                partition.error_code = ErrorCode.KAFKA_STORAGE_ERROR
                errored = True
                continue
            partition.high_watermark = result.high_watermark
            partition.last_stable_offset = result.last_stable_offset
            partition.log_start_offset = result.log_start_offset
            partition.records = result.records
            size = len(result.records)
            total_bytes += size
            bytes_left -= size
        response = FetchResponse.FetchableTopicResponse(partitions=partitions)
        if version >= TOPIC_IDS_MIN_VERSION:
            response.topic_id = topic.topic_id if isinstance(resolved, ErrorCode) else resolved.topic_id
        else:
            response.topic = topic.topic
        responses.append(response)
    return responses, total_bytes, errored


def _partitions_of(state: BrokerState, request: FetchRequest, version: int) -> list[tuple[str, int]]:
    keys: list[tuple[str, int]] = []
    for topic in request.topics:
        resolved = _resolve(state, topic, version)
        if not isinstance(resolved, ErrorCode):
            keys.extend((resolved.name, wanted.partition) for wanted in topic.partitions)
    return keys


@handles(FetchRequest, FetchResponse, 4, 17)
async def handle_fetch(context: RequestContext, request: FetchRequest) -> FetchResponse:
    state = context.broker
    version = context.api_version
    session_error = _session_error(request)
    if session_error != ErrorCode.NONE:
        return FetchResponse(error_code=session_error, session_id=NO_SESSION_ID, responses=[])
    wait_ms = min(max(request.max_wait_ms, 0), limits.fetch_max_wait_ms_max)
    deadline_ms = state.clock.monotonic_ms() + wait_ms
    replica_id = replica_id_of(request, version)
    while True:
        responses, total_bytes, errored = _read_all(
            state, request, version, context.response_bytes_max, replica_id
        )
        remaining_ms = deadline_ms - state.clock.monotonic_ms()
        if total_bytes >= request.min_bytes or errored or remaining_ms <= 0 or not request.topics:
            return FetchResponse(error_code=ErrorCode.NONE, session_id=NO_SESSION_ID, responses=responses)
        await state.wait_for_append(
            _partitions_of(state, request, version), remaining_ms, replica=replica_id >= 0
        )
