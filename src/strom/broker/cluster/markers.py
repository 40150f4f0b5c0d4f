"""Transaction markers in a cluster: the coordinator's COMMIT / ABORT to each partition's leader.

The transaction coordinator (``strom.broker.transactions``) asks for a marker on every partition of
a transaction. ``ClusterMarkers`` finds each partition's leader in this broker's metadata image:
partitions this broker leads are written here (``write_marker``: an acks=all append, answered once
replicated); the others go, grouped per leader, in one WriteTxnMarkers v1 to it, over one
connection per leader broker (its endpoint of the inter-broker listener, ``PeerDialer``), whose
handler (``strom.broker.handlers.transactions``) writes them there the same way. Each partition's
answer goes back to the coordinator: NONE, a fencing error, or something it retries after a backoff
(no leader known: NOT_LEADER_OR_FOLLOWER; a broken connection: NETWORK_EXCEPTION). A partition
whose topic is gone from the metadata is UNKNOWN_TOPIC_OR_PARTITION: the coordinator drops it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from strom.broker.cluster.peer import PeerConnection, PeerError
from strom.broker.transactions import write_marker
from strom.cluster.model import TopicPartition as ClusterTopicPartition
from strom.coordinator.transactions import PartitionWritten, TopicPartition, TransactionMarkers
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse

if TYPE_CHECKING:
    from strom.broker.cluster.runtime import ClusterReplication
    from strom.broker.state import BrokerState

WRITE_TXN_MARKERS_VERSION = 1


class ClusterMarkers:
    def __init__(self, cluster: ClusterReplication, state: BrokerState, timeout_ms: int) -> None:
        self._cluster = cluster
        self._state = state
        self._timeout_ms = timeout_ms
        self._peers: dict[int, PeerConnection] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def write_markers(self, markers: TransactionMarkers, on_partition_written: PartitionWritten) -> None:
        metadata = self._cluster.control.metadata
        by_leader: dict[int, list[TopicPartition]] = {}
        for partition in markers.partitions:
            topic, index = partition
            if metadata.topic(topic) is None:
                on_partition_written(partition, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            leader = metadata.leader(ClusterTopicPartition(topic, index))
            if leader is None:
                on_partition_written(partition, ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            by_leader.setdefault(leader.node_id, []).append(partition)
        for leader_id, partitions in by_leader.items():
            if leader_id == self._cluster.node_id:
                for partition in partitions:
                    self._spawn(self._here(partition, markers, on_partition_written))
            else:
                self._spawn(self._there(leader_id, partitions, markers, on_partition_written))

    async def _here(
        self, partition: TopicPartition, markers: TransactionMarkers, on_partition_written: PartitionWritten
    ) -> None:
        on_partition_written(partition, await write_marker(self._state, partition, markers, self._timeout_ms))

    async def _there(
        self,
        leader_id: int,
        partitions: list[TopicPartition],
        markers: TransactionMarkers,
        on_partition_written: PartitionWritten,
    ) -> None:
        by_topic: dict[str, list[int]] = {}
        for name, index in partitions:
            by_topic.setdefault(name, []).append(index)
        request = WriteTxnMarkersRequest(
            markers=[
                WriteTxnMarkersRequest.WritableTxnMarker(
                    producer_id=markers.producer_id,
                    producer_epoch=markers.producer_epoch,
                    transaction_result=markers.commit,
                    topics=[
                        WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
                        for name, indexes in by_topic.items()
                    ],
                    coordinator_epoch=markers.coordinator_epoch,
                )
            ]
        )
        answered: dict[TopicPartition, ErrorCode] = {}
        try:
            peer = self._peer(leader_id)
            response: WriteTxnMarkersResponse = await peer.request(
                request, WRITE_TXN_MARKERS_VERSION, WriteTxnMarkersResponse, self._timeout_ms + 5_000
            )
            for result in response.markers:
                for topic_result in result.topics:
                    for found in topic_result.partitions:
                        answered[TopicPartition(topic_result.name, found.partition_index)] = ErrorCode(
                            found.error_code
                        )
        except (PeerError, LookupError):
            pass
        for partition in partitions:
            on_partition_written(partition, answered.get(partition, ErrorCode.NETWORK_EXCEPTION))

    def _peer(self, leader_id: int) -> PeerConnection:
        broker = self._cluster.control.metadata.brokers.get(leader_id)
        if broker is None:
            raise LookupError(f"broker {leader_id} is not registered")
        dialer = self._cluster.dialer
        host, port = dialer.address(broker)
        peer = self._peers.get(leader_id)
        if peer is None or peer.closed or (peer.host, peer.port) != (host, port):
            if peer is not None:
                peer.close()
            peer = self._peers[leader_id] = dialer.connection(
                host, port, f"strom-broker-{self._cluster.node_id}"
            )
        return peer

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for peer in self._peers.values():
            peer.close()
        self._peers.clear()
