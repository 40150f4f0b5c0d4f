"""How handlers reach partitions, topics and brokers: one interface, two implementations.

``Replication`` is everything a handler asks that depends on whether this broker is alone or one
broker of a cluster: may I append to this partition (and wait for its replicas), may I read it
and up to where, which brokers and topics exist and who leads each partition, create / delete /
grow a topic, change its config, hand out a producer id, find a group's coordinator.

* ``SingleNode`` (here): the embedded default. Every partition is led by this broker, the replica
  set is this broker, the high watermark is the log end, admin requests act on the local logs —
  exactly what the handlers did before the interface existed, at the same cost.
* ``ClusterReplication`` (``strom.broker.cluster``): a broker of a cluster on ZooKeeper; only
  the leader of a partition appends, acks=all waits for the in-sync replicas, consumers read below
  the high watermark, metadata comes from the controller, admin requests go through ZooKeeper.

The handlers hold no ``if cluster`` branch: they ask ``context.broker.replication``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from strom.base import limits
from strom.broker.refused import Refused
from strom.protocol.errors import ErrorCode
from strom.storage import PartitionLog, TopicMetadata

if TYPE_CHECKING:
    from strom.broker.state import BrokerState

# The leader epoch of every partition of a single node: it never changes leader.
SINGLE_NODE_LEADER_EPOCH = 0
DEFAULT_FROM_BROKER = -1
ACKS_ALL = -1


class BrokerView(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None


class PartitionView(NamedTuple):
    """One partition as Metadata describes it."""

    partition_index: int
    error: ErrorCode  # NONE, or LEADER_NOT_AVAILABLE while it has no leader
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]


class TopicView(Protocol):
    """A topic as clients see it (``TopicMetadata`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def internal(self) -> bool: ...

    @property
    def partitions(self) -> int: ...


class ReadAccess(NamedTuple):
    """A partition a request may read: its log, where a read stops (None: the log end), and the
    leader epoch to report."""

    log: PartitionLog
    max_offset: int | None
    leader_epoch: int


class Replication(Protocol):
    # ---- the data path --------------------------------------------------------------------------

    # True when acks=all must wait for other replicas (the produce handler then calls
    # ``wait_for_acks``); a single node's append is all there is.
    waits_for_replicas: bool

    def writable(self, topic: str, partition: int, acks: int) -> PartitionLog:
        """The log a produce appends to, or Refused (UNKNOWN_TOPIC_OR_PARTITION,
        NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS for acks=all with too small an ISR)."""
        ...

    async def wait_for_acks(
        self, appended: Sequence[tuple[PartitionLog, int]], timeout_ms: int
    ) -> list[ErrorCode]:
        """acks=all: wait until every ``(log, end offset)`` is below its high watermark (or the
        timeout); one answer per entry."""
        ...

    def readable(
        self, topic: str, partition: int, current_leader_epoch: int, replica_id: int
    ) -> ReadAccess | ErrorCode:
        """What a Fetch / ListOffsets / OffsetForLeaderEpoch may read, or why not. ``replica_id``
        >= 0 is a follower fetching (it reads to the log end and reports its progress with
        ``follower_fetched``); -1 a consumer (it reads below the high watermark)."""
        ...

    def follower_fetched(self, access: ReadAccess, replica_id: int, fetch_offset: int) -> ErrorCode:
        """A follower fetched at ``fetch_offset`` (its log end): the leader records its progress."""
        ...

    # ---- the cluster as clients see it --------------------------------------------------------------

    def brokers(self, listener: str) -> list[BrokerView]:
        """The live brokers, each at its endpoint for ``listener`` (the one a request came in on)."""
        ...

    def controller_id(self) -> int: ...

    async def metadata_known(self, timeout_ms: int) -> bool:
        """Wait (at most ``timeout_ms``) until this broker knows the cluster's topics; whether it
        does. A cluster broker that has just started (or restarted) knows nothing until the
        controller's first UpdateMetadata: answering Metadata from the empty image would tell
        clients that their topics do not exist (librdkafka then drops its assignment)."""
        ...

    def topic_names(self) -> list[str]: ...

    def topic(self, name: str) -> TopicView | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicView | None: ...

    def describe_partitions(self, topic: TopicView, first: int, last: int) -> list[PartitionView]:
        """Partitions ``first`` .. ``last - 1`` of ``topic``."""
        ...

    def find_coordinator(self, group_id: str, listener: str) -> BrokerView | Refused:
        """The broker coordinating ``group_id``, at its endpoint for ``listener`` (creating ``__consumer_offsets`` on first need)."""
        ...

    def find_transaction_coordinator(self, transactional_id: str, listener: str) -> BrokerView | Refused:
        """The broker coordinating ``transactional_id`` (creating ``__transaction_state`` on first need)."""
        ...

    # ---- admin -------------------------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        assignments: Mapping[int, Sequence[int]],
        overrides: Mapping[str, str],
        *,
        validate_only: bool,
    ) -> tuple[TopicMetadata, int]:
        """Create a topic (``assignments`` empty, or a replica list per partition); the topic and
        its replication factor, or Refused / a StorageError."""
        ...

    async def create_partitions(
        self, name: str, total: int, assignments: Sequence[Sequence[int]], *, validate_only: bool
    ) -> None: ...

    async def delete_topic(self, name: str) -> None: ...

    async def topic_config(self, name: str) -> TopicMetadata | None:
        """The topic with its config overrides (DescribeConfigs, AlterConfigs), or None."""
        ...

    async def alter_topic_config(self, name: str, overrides: Mapping[str, str]) -> None: ...

    async def allocate_producer_id(self) -> int: ...


class SingleNode:
    """The embedded default: this broker leads every partition, alone."""

    waits_for_replicas = False

    def __init__(self, state: BrokerState) -> None:
        self._state = state
        self._logs = state.logs
        # Built partition views by (node, first, last), and how many views that is in all.
        self._views: dict[tuple[int, int, int], list[PartitionView]] = {}
        self._views_held = 0

    # ---- the data path -----------------------------------------------------------------------------

    def writable(self, topic: str, partition: int, acks: int) -> PartitionLog:
        partition_log = self._logs.log(topic, partition)
        if partition_log is None:
            raise Refused(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"this broker has no partition {topic}-{partition}"
            )
        return partition_log

    async def wait_for_acks(
        self, appended: Sequence[tuple[PartitionLog, int]], timeout_ms: int
    ) -> list[ErrorCode]:
        return [ErrorCode.NONE] * len(appended)

    def readable(
        self, topic: str, partition: int, current_leader_epoch: int, replica_id: int
    ) -> ReadAccess | ErrorCode:
        partition_log = self._logs.log(topic, partition)
        if partition_log is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if current_leader_epoch > SINGLE_NODE_LEADER_EPOCH:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if 0 <= current_leader_epoch < SINGLE_NODE_LEADER_EPOCH:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ReadAccess(partition_log, None, SINGLE_NODE_LEADER_EPOCH)

    def follower_fetched(self, access: ReadAccess, replica_id: int, fetch_offset: int) -> ErrorCode:
        return ErrorCode.NONE  # a single node has no followers: a replica id is served like a consumer

    # ---- the cluster as clients see it ------------------------------------------------------------

    def _self(self, listener: str) -> BrokerView:
        endpoint = self._state.advertised_endpoint(listener)
        return BrokerView(self._state.node_id, endpoint.host, endpoint.port, None)

    def brokers(self, listener: str) -> list[BrokerView]:
        return [self._self(listener)]

    async def metadata_known(self, timeout_ms: int) -> bool:
        return True

    def controller_id(self) -> int:
        return self._state.node_id

    def topic_names(self) -> list[str]:
        return self._logs.topic_names()

    def topic(self, name: str) -> TopicMetadata | None:
        return self._logs.topic(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        return self._logs.topic_by_id(topic_id)

    def describe_partitions(self, topic: TopicView, first: int, last: int) -> list[PartitionView]:
        """Every partition of a single node is described alike (this broker leads it, alone), so
        the views of a range are built once and shared: callers only read them. A Metadata answer
        for 10,000 partitions built them afresh each time, a fifth of the broker's time for it."""
        node = self._state.node_id
        key = (node, first, last)
        views = self._views.get(key)
        if views is None:
            alone: list[int] = [node]
            offline: list[int] = []
            views = [
                PartitionView(index, ErrorCode.NONE, node, SINGLE_NODE_LEADER_EPOCH, alone, alone, offline)
                for index in range(first, last)
            ]
            if self._views_held + len(views) > limits.single_node_partition_views_cached_max:
                self._views.clear()
                self._views_held = 0
            self._views[key] = views
            self._views_held += len(views)
        return views

    def find_coordinator(self, group_id: str, listener: str) -> BrokerView | Refused:
        self._state.groups.ensure_offsets_topic()
        return self._self(listener)

    def find_transaction_coordinator(self, transactional_id: str, listener: str) -> BrokerView | Refused:
        self._state.transactions.ensure_topic()
        return self._self(listener)

    # ---- admin -------------------------------------------------------------------------------------------

    def _check_replicas(self, replication_factor: int, replica_lists: Sequence[Sequence[int]]) -> None:
        """One broker holds one replica of everything: a larger replication factor or another
        broker in an assignment is refused rather than quietly ignored."""
        if replication_factor not in (DEFAULT_FROM_BROKER, 1):
            raise Refused(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {replication_factor} is larger than the 1 available broker",
            )
        node = self._state.node_id
        for replicas in replica_lists:
            if list(replicas) != [node]:
                raise Refused(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"replica assignment {list(replicas)} names brokers other than {node}",
                )

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        assignments: Mapping[int, Sequence[int]],
        overrides: Mapping[str, str],
        *,
        validate_only: bool,
    ) -> tuple[TopicMetadata, int]:
        self._check_replicas(replication_factor, list(assignments.values()))
        created = await self._state.create_topic(name, partitions, overrides, validate_only=validate_only)
        return created, 1

    async def create_partitions(
        self, name: str, total: int, assignments: Sequence[Sequence[int]], *, validate_only: bool
    ) -> None:
        self._check_replicas(DEFAULT_FROM_BROKER, assignments)
        await self._state.create_partitions(name, total, validate_only=validate_only)

    async def delete_topic(self, name: str) -> None:
        await self._state.delete_topic(name)

    async def topic_config(self, name: str) -> TopicMetadata | None:
        return self._logs.topic(name)

    async def alter_topic_config(self, name: str, overrides: Mapping[str, str]) -> None:
        await self._state.alter_topic_config(name, overrides)

    async def allocate_producer_id(self) -> int:
        return self._state.producer_ids.allocate()
