"""InitProducerId 0-5 for idempotent (non-transactional) producers.

A new producer gets a fresh id, unique across restarts (and, in a cluster, across brokers: blocks
of ids are taken from ZooKeeper), at epoch 0. A producer that sends its
current id and epoch (v3+, KIP-360) gets the same id with the epoch bumped, so it can reset its
sequence numbers without losing its identity; at the largest epoch it gets a new id instead.
Transactions are not implemented, so a transactional id is refused with a clear error.
"""

from __future__ import annotations

from strom.broker.context import RequestContext
from strom.broker.refused import Refused
from strom.broker.registry import handles
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse

EPOCH_MAX = 32767
NO_PRODUCER_ID = -1


@handles(InitProducerIdRequest, InitProducerIdResponse, 0, 5)
async def handle_init_producer_id(
    context: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    state = context.broker
    if request.transactional_id == "":
        return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
    if request.transactional_id is not None:
        return InitProducerIdResponse(
            error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1
        )
    if request.producer_id != NO_PRODUCER_ID and 0 <= request.producer_epoch < EPOCH_MAX:
        return InitProducerIdResponse(
            error_code=ErrorCode.NONE,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch + 1,
        )
    try:
        producer_id = await state.replication.allocate_producer_id()
    except Refused as refused:
        return InitProducerIdResponse(error_code=refused.error, producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0)
