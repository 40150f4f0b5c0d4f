"""InitProducerId 0-5.

Idempotent producers (no transactional id): a new producer gets a fresh id, unique across restarts
(and, in a cluster, across brokers: blocks of ids are taken from ZooKeeper), at epoch 0. A producer
that sends its current id and epoch (v3+, KIP-360) gets the same id with the epoch bumped, so it can
reset its sequence numbers without losing its identity; at the largest epoch it gets a new id.

Transactional producers: the transaction coordinator of the id (this broker, if it leads the id's
``__transaction_state`` partition) gives its producer id and a new epoch, fencing an earlier
instance (``strom.coordinator.transactions``); versions before v4 are told INVALID_PRODUCER_EPOCH
where later ones are told PRODUCER_FENCED.
"""

from __future__ import annotations

from strom.broker.authorization import allowed, cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.handlers.groups import _parked
from strom.broker.handlers.transactions import for_version
from strom.broker.refused import Refused
from strom.broker.registry import handles
from strom.coordinator.transactions import InitProducerIdResult
from strom.protocol.acl import AclOperation
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from strom.security.acl import ResourceType

EPOCH_MAX = 32767
NO_PRODUCER_ID = -1
# The producer id and epoch in the request (KIP-360), and PRODUCER_FENCED (KIP-588), from these.
KIP_360_MIN_VERSION = 3
PRODUCER_FENCED_MIN_VERSION = 4


@handles(InitProducerIdRequest, InitProducerIdResponse, 0, 5)
async def handle_init_producer_id(
    context: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    state = context.broker
    if request.transactional_id == "":
        return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
    authorizer = state.authorizer
    if request.transactional_id is not None:
        if authorizer is not None and not allowed(
            context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
        ):
            return InitProducerIdResponse(
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1
            )
        coordinator = state.transactions.coordinator
        result: InitProducerIdResult = await _parked(
            lambda respond: coordinator.init_producer_id(
                request.transactional_id,
                request.transaction_timeout_ms,
                request.producer_id if context.api_version >= KIP_360_MIN_VERSION else NO_PRODUCER_ID,
                request.producer_epoch if context.api_version >= KIP_360_MIN_VERSION else -1,
                respond,
            )
        )
        return InitProducerIdResponse(
            error_code=for_version(result.error, context.api_version, PRODUCER_FENCED_MIN_VERSION),
            producer_id=result.producer_id,
            producer_epoch=result.producer_epoch,
        )
    # An idempotent producer: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (Kafka 3's
    # rule since idempotence became the producers' default).
    if (
        authorizer is not None
        and not cluster_allowed(context, AclOperation.IDEMPOTENT_WRITE)
        and not authorizer.authorize_any(
            context.principal, context.client_host, AclOperation.WRITE, ResourceType.TOPIC
        )
    ):
        return InitProducerIdResponse(
            error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1, producer_epoch=-1
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
