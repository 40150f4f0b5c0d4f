"""Fetch 4-17: whole batches straight from the segment files, with long polls.

Records are served exactly as stored, starting with the batch that holds the fetch offset (the
client skips offsets below its position), at most as many bytes as the connection may still buffer
(``RequestContext.response_bytes_max``, see ``broker/connection_budget.py``) and never less than
one batch. When fewer than ``min_bytes`` are ready the request waits until an append to one of its
partitions or ``max_wait_ms``, never by polling. Fetch sessions are supported in the "no session"
form Kafka allows to consumers: a full request gets session id 0, which tells the client that no
session was created and that its next request must be full too. A follower (a broker of the
cluster) gets an incremental fetch session (``strom.broker.fetch_sessions``): its requests then
name only what changed and the answers list only the partitions with news, which is what keeps
replication cheap when most partitions are quiet.

Who may read what is the ``Replication``'s to say: a consumer reads from the leader below the high
watermark (a single node: to the log end), checked against its ``current_leader_epoch``; a follower
(replica id >= 0, a broker of the cluster) reads to the log end, the offset it fetches at telling
the leader how far it got, and waits for appends while a consumer waits for the high watermark.

Isolation (KIP-98): a consumer fetching read_committed (``isolation_level`` 1) reads below the
last stable offset (no batch of a transaction still in progress) and is told, per partition, the
aborted transactions the batches it got overlap (producer id, first offset), from which it skips
their records. Every partition answer carries the last stable offset, read_uncommitted too (with
no aborted-transaction list: null). A follower reads to the log end whatever it asks.
"""

from __future__ import annotations

import uuid

from strom.base import limits
from strom.broker.authorization import cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    NO_SESSION_ID,
    FetchSession,
    PartitionKey,
    SessionPartition,
)
from strom.broker.registry import handles
from strom.broker.replication import TopicView
from strom.broker.state import BrokerState
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.security.acl import ResourceType
from strom.storage import LogFileError, OffsetOutOfRangeError

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


def _read_partition(
    state: BrokerState,
    partition: PartitionData,
    name: str,
    wanted: FetchRequest.FetchPartition | SessionPartition,
    replica_id: int,
    max_bytes: int,
    first: bool,
    read_committed: bool = False,
) -> tuple[int, bool]:
    """Fill ``partition`` (records, offsets or an error) for ``wanted`` of topic ``name``: (bytes
    of records, whether it errored). Every field it may carry is set (the object may be reused),
    but the aborted transactions, left as they are unless ``read_committed`` (a consumer's
    read_committed fetch) finds some."""
    partition.error_code = ErrorCode.NONE
    partition.high_watermark = partition.last_stable_offset = partition.log_start_offset = -1
    partition.records = b""
    replication = state.replication
    access = replication.readable(name, partition.partition_index, wanted.current_leader_epoch, replica_id)
    if isinstance(access, ErrorCode):
        partition.error_code = access
        return 0, True
    partition_log = access.log
    if replica_id >= 0:
        progress = replication.follower_fetched(access, replica_id, wanted.fetch_offset)
        if progress != ErrorCode.NONE:
            partition.error_code = progress
            partition.high_watermark = partition_log.high_watermark
            partition.log_start_offset = partition_log.log_start_offset
            return 0, True
    try:
        # KIP-74: the first batch of the response is returned whole even when larger than the
        # limits, so a consumer can never get stuck behind one big batch.
        result = partition_log.read(
            wanted.fetch_offset,
            max(max_bytes, 0),
            min_one_batch=first,
            max_offset=access.max_offset,
            read_committed=read_committed,
        )
    except OffsetOutOfRangeError:
        partition.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
        partition.high_watermark = partition_log.high_watermark
        partition.last_stable_offset = partition_log.last_stable_offset
        partition.log_start_offset = partition_log.log_start_offset
        return 0, True
    except LogFileError:  # e.g. out of file descriptors: this partition, this time
        partition.error_code = ErrorCode.KAFKA_STORAGE_ERROR
        return 0, True
    partition.high_watermark = result.high_watermark
    partition.last_stable_offset = result.last_stable_offset
    partition.log_start_offset = result.log_start_offset
    partition.records = result.records
    if result.aborted_transactions:
        partition.aborted_transactions = [
            FetchResponse.AbortedTransaction(producer_id=producer_id, first_offset=first_offset)
            for producer_id, first_offset in result.aborted_transactions
        ]
    return len(result.records), False


def _empty_partition(index: int, aborted: list[FetchResponse.AbortedTransaction] | None) -> PartitionData:
    return PartitionData(
        partition_index=index,
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        aborted_transactions=aborted,
        records=b"",
    )


def _topic_answer(
    version: int, name: str, topic_id: uuid.UUID, partitions: list[PartitionData]
) -> FetchResponse.FetchableTopicResponse:
    """A topic's answer, named as the version names topics (by id from v13)."""
    answer = FetchResponse.FetchableTopicResponse(partitions=partitions)
    if version >= TOPIC_IDS_MIN_VERSION:
        answer.topic_id = topic_id
    else:
        answer.topic = name
    return answer


def _bytes_allowed(request: FetchRequest, response_bytes_max: int) -> int:
    return min(request.max_bytes if request.max_bytes > 0 else 2**31 - 1, response_bytes_max)


def _read_all(
    state: BrokerState, request: FetchRequest, version: int, response_bytes_max: int, replica_id: int
) -> tuple[list[FetchResponse.FetchableTopicResponse], int, bool]:
    """One pass over every requested partition: (responses, bytes of records, any partition errored).
    At most ``response_bytes_max`` bytes of records, whatever the request asks (but one batch)."""
    bytes_left = _bytes_allowed(request, response_bytes_max)
    total_bytes = 0
    errored = False
    # Isolation is a consumer's: a follower reads to the log end, aborted transactions and all.
    read_committed = request.isolation_level == READ_COMMITTED and replica_id < 0
    responses: list[FetchResponse.FetchableTopicResponse] = []
    for topic in request.topics:
        resolved = _resolve(state, topic, version)
        partitions: list[PartitionData] = []
        for wanted in topic.partitions:
            partition = _empty_partition(wanted.partition, [] if read_committed else None)
            partitions.append(partition)
            if isinstance(resolved, ErrorCode):
                partition.error_code = resolved
                errored = True
                continue
            size, failed = _read_partition(
                state,
                partition,
                resolved.name,
                wanted,
                replica_id,
                min(wanted.partition_max_bytes, bytes_left),
                total_bytes == 0,
                read_committed,
            )
            errored |= failed
            total_bytes += size
            bytes_left -= size
        topic_id = topic.topic_id if isinstance(resolved, ErrorCode) else resolved.topic_id
        responses.append(_topic_answer(version, topic.topic, topic_id, partitions))
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
    version = context.api_version
    replica_id = replica_id_of(request, version)
    if (
        replica_id >= 0
        and context.broker.authorizer is not None
        and not cluster_allowed(context, AclOperation.CLUSTER_ACTION)
    ):
        return FetchResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, session_id=NO_SESSION_ID)
    if replica_id >= 0 and (request.session_id != NO_SESSION_ID or request.session_epoch != FINAL_EPOCH):
        return await _fetch_in_session(context, request, replica_id)
    session_error = _session_error(request)
    if session_error != ErrorCode.NONE:
        return FetchResponse(error_code=session_error, session_id=NO_SESSION_ID, responses=[])
    if replica_id < 0 and context.broker.authorizer is not None:
        refused = _refused_topics(context, request)
        if refused:
            response = await _full_fetch(context, request, replica_id)
            response.responses[:0] = refused
            return response
    return await _full_fetch(context, request, replica_id)


def _refused_topics(
    context: RequestContext, request: FetchRequest
) -> list[FetchResponse.FetchableTopicResponse]:
    """With authorization on, a consumer needs READ on each topic (a follower CLUSTER_ACTION on
    the cluster, checked before). The topics it may not read are taken out of ``request`` and
    answered TOPIC_AUTHORIZATION_FAILED, whether they exist or not (a topic asked for by an id no
    topic has stays UNKNOWN_TOPIC_ID: an id tells nothing)."""
    state = context.broker
    authorizer = state.authorizer
    assert authorizer is not None
    version = context.api_version
    refused: list[FetchResponse.FetchableTopicResponse] = []
    kept: list[FetchRequest.FetchTopic] = []
    for topic in request.topics:
        resolved = _resolve(state, topic, version)
        name = (
            topic.topic
            if version < TOPIC_IDS_MIN_VERSION
            else (resolved.name if not isinstance(resolved, ErrorCode) else None)
        )
        if name is None or authorizer.authorize(
            context.principal, context.client_host, AclOperation.READ, ResourceType.TOPIC, name
        ):
            kept.append(topic)
            continue
        partitions = [_empty_partition(wanted.partition, None) for wanted in topic.partitions]
        for data in partitions:
            data.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        refused.append(_topic_answer(version, topic.topic, topic.topic_id, partitions))
    request.topics = kept
    return refused


async def _full_fetch(context: RequestContext, request: FetchRequest, replica_id: int) -> FetchResponse:
    state = context.broker
    version = context.api_version
    wait_ms = min(max(request.max_wait_ms, 0), limits.fetch_max_wait_ms_max)
    deadline_ms = state.clock.monotonic_ms() + wait_ms
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


# ---- a follower's incremental fetch session (strom.broker.fetch_sessions) -------------------------


async def _fetch_in_session(context: RequestContext, request: FetchRequest, replica_id: int) -> FetchResponse:
    state = context.broker
    sessions = state.fetch_sessions
    if request.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        # A full fetch; it closes the session it names, and (epoch 0) asks for a new one.
        if request.session_id != NO_SESSION_ID:
            sessions.remove(request.session_id)
        response = await _full_fetch(context, request, replica_id)
        if request.session_epoch == INITIAL_EPOCH:
            _open_session(context, request, response)
        return response
    session = sessions.get(request.session_id)
    if session is None:
        return FetchResponse(
            error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=NO_SESSION_ID, responses=[]
        )
    if request.session_epoch != session.next_epoch:
        return FetchResponse(
            error_code=ErrorCode.INVALID_FETCH_SESSION_EPOCH, session_id=NO_SESSION_ID, responses=[]
        )
    session.last_used_ms = state.clock.monotonic_ms()
    unknown = _update_session(context, request, session)
    session.advance()
    if sessions.get(session.session_id) is not session:  # over the budget: dropped
        return FetchResponse(
            error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=NO_SESSION_ID, responses=[]
        )
    return await _incremental_fetch(context, request, session, replica_id, unknown)


def _open_session(context: RequestContext, request: FetchRequest, response: FetchResponse) -> None:
    """A new session of the partitions of a full fetch, with what its answer told of each."""
    state = context.broker
    version = context.api_version
    told: dict[tuple[object, int], PartitionData] = {}
    for topic_response in response.responses:
        topic_key = topic_response.topic_id if version >= TOPIC_IDS_MIN_VERSION else topic_response.topic
        for data in topic_response.partitions:
            told[(topic_key, data.partition_index)] = data
    partitions: dict[PartitionKey, SessionPartition] = {}
    for topic in request.topics:
        resolved = _resolve(state, topic, version)
        if isinstance(resolved, ErrorCode):
            continue
        topic_key = topic.topic_id if version >= TOPIC_IDS_MIN_VERSION else topic.topic
        for wanted in topic.partitions:
            entry = _session_partition(resolved.topic_id, wanted)
            told_of = told.get((topic_key, wanted.partition))
            if told_of is not None:
                entry.high_watermark, entry.log_start_offset = (
                    told_of.high_watermark,
                    told_of.log_start_offset,
                )
            partitions[(resolved.name, wanted.partition)] = entry
    session = state.fetch_sessions.create(partitions, state.clock.monotonic_ms())
    if session is not None:
        response.session_id = session.session_id


def _session_partition(topic_id: uuid.UUID, wanted: FetchRequest.FetchPartition) -> SessionPartition:
    return SessionPartition(
        topic_id, wanted.fetch_offset, wanted.partition_max_bytes, wanted.current_leader_epoch
    )


def _update_session(
    context: RequestContext, request: FetchRequest, session: FetchSession
) -> list[FetchResponse.FetchableTopicResponse]:
    """Apply an incremental request's additions, changes and removals to ``session``; the
    answers for topics it named that do not exist (not added)."""
    state = context.broker
    version = context.api_version
    partitions = session.partitions
    before = len(partitions)
    unknown: list[FetchResponse.FetchableTopicResponse] = []
    for topic in request.topics:
        resolved = _resolve(state, topic, version)
        if isinstance(resolved, ErrorCode):
            answer = _topic_answer(
                version,
                topic.topic,
                topic.topic_id,
                [_empty_partition(p.partition, None) for p in topic.partitions],
            )
            for data in answer.partitions:
                data.error_code = resolved
            unknown.append(answer)
            continue
        for wanted in topic.partitions:
            key = (resolved.name, wanted.partition)
            known = partitions.get(key)
            if known is None or known.topic_id != resolved.topic_id:
                partitions[key] = _session_partition(resolved.topic_id, wanted)
            else:
                known.fetch_offset = wanted.fetch_offset
                known.partition_max_bytes = wanted.partition_max_bytes
                known.current_leader_epoch = wanted.current_leader_epoch
    for forgotten in request.forgotten_topics_data:
        if version >= TOPIC_IDS_MIN_VERSION:
            found = state.replication.topic_by_id(forgotten.topic_id)
            name = found.name if found is not None else None
        else:
            name = forgotten.topic
        if name is None:
            continue
        for index in forgotten.partitions:
            partitions.pop((name, index), None)
    state.fetch_sessions.resized(session, before)
    return unknown


async def _incremental_fetch(
    context: RequestContext,
    request: FetchRequest,
    session: FetchSession,
    replica_id: int,
    unknown: list[FetchResponse.FetchableTopicResponse],
) -> FetchResponse:
    """Read every partition of the session; answer those with news (records, a new high
    watermark or log start, an error) — waiting, as a full fetch does, for ``min_bytes``."""
    state = context.broker
    version = context.api_version
    wait_ms = min(max(request.max_wait_ms, 0), limits.fetch_max_wait_ms_max)
    deadline_ms = state.clock.monotonic_ms() + wait_ms
    while True:
        bytes_left = _bytes_allowed(request, context.response_bytes_max)
        total_bytes = 0
        errored = bool(unknown)
        news: list[tuple[PartitionKey, SessionPartition, PartitionData]] = []
        # One PartitionData serves every quiet partition of the pass (most of them): only those
        # with news get one of their own.
        partition = _empty_partition(0, None)
        for key, entry in list(session.partitions.items()):
            name, index = key
            partition.partition_index = index
            size, failed = _read_partition(
                state,
                partition,
                name,
                entry,
                replica_id,
                min(entry.partition_max_bytes, bytes_left),
                total_bytes == 0,
            )
            errored |= failed
            total_bytes += size
            bytes_left -= size
            if (
                size
                or failed
                or partition.high_watermark != entry.high_watermark
                or partition.log_start_offset != entry.log_start_offset
            ):
                news.append((key, entry, partition))
                partition = _empty_partition(0, None)
        remaining_ms = deadline_ms - state.clock.monotonic_ms()
        if total_bytes >= request.min_bytes or errored or remaining_ms <= 0 or not session.partitions:
            break
        await state.wait_for_append(list(session.partitions), remaining_ms, replica=True)
    by_topic: dict[str, FetchResponse.FetchableTopicResponse] = {}
    for key, entry, partition in news:
        entry.high_watermark, entry.log_start_offset = partition.high_watermark, partition.log_start_offset
        if partition.records:
            session.move_to_end(key)
        answer = by_topic.get(key[0])
        if answer is None:
            answer = by_topic[key[0]] = _topic_answer(version, key[0], entry.topic_id, [])
        answer.partitions.append(partition)
    return FetchResponse(
        error_code=ErrorCode.NONE, session_id=session.session_id, responses=[*unknown, *by_topic.values()]
    )
