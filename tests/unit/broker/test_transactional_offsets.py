"""TxnOffsetCommit end to end through dispatch (no sockets), with the transaction's marker written
straight into the broker's ``__consumer_offsets`` partition as a control batch (no transaction
coordinator on the broker yet): what OffsetFetch answers before and after the marker, and what a
restarted broker loads from that log (committed, aborted, still open)."""

from __future__ import annotations

from pathlib import Path

from strom.broker import transactions
from strom.coordinator import OFFSETS_TOPIC
from strom.coordinator.transactions import TopicPartition, TransactionMarkers
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.protocol.messages.offset_commit import OffsetCommitRequest
from strom.protocol.messages.offset_fetch import OffsetFetchRequest
from strom.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from strom.protocol.records import iter_batches
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import create_topic

GROUP = "pipeline"
PRODUCER_ID, OTHER_PRODUCER_ID = 4000, 5000

Errors = dict[tuple[str, int], ErrorCode]


def offsets_partition(broker: InProcessBroker) -> int:
    return broker.server.state.groups.partition_for(GROUP)


def commit(broker: InProcessBroker, offsets: dict[tuple[str, int], int]) -> Errors:
    request = OffsetCommitRequest(
        group_id=GROUP,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=p, committed_offset=o)
                ],
            )
            for (topic, p), o in offsets.items()
        ],
    )
    response = broker.call(request, 8)
    return {
        (t.name, p.partition_index): ErrorCode(p.error_code) for t in response.topics for p in t.partitions
    }


def txn_commit(
    broker: InProcessBroker, offsets: dict[tuple[str, int], int], producer_id: int, version: int = 3
) -> Errors:
    by_topic: dict[str, list[TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata="tx"
            )
        )
    request = TxnOffsetCommitRequest(
        transactional_id="pipeline-tx",
        group_id=GROUP,
        producer_id=producer_id,
        producer_epoch=2,
        topics=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=name, partitions=partitions)
            for name, partitions in by_topic.items()
        ],
    )
    response = broker.call(request, version)
    return {
        (t.name, p.partition_index): ErrorCode(p.error_code) for t in response.topics for p in t.partitions
    }


def fetch(
    broker: InProcessBroker, partitions: list[tuple[str, int]], *, require_stable: bool, version: int = 7
) -> dict[tuple[str, int], tuple[int, ErrorCode]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    request = OffsetFetchRequest(
        group_id=GROUP,
        topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name=name, partition_indexes=indexes)
            for name, indexes in by_topic.items()
        ],
        require_stable=require_stable if version >= 7 else False,
    )
    response = broker.call(request, version)
    assert response.error_code == ErrorCode.NONE, response
    return {
        (t.name, p.partition_index): (p.committed_offset, ErrorCode(p.error_code))
        for t in response.topics
        for p in t.partitions
    }


def write_marker(broker: InProcessBroker, producer_id: int, commit: bool) -> None:
    """What the transaction coordinator has the broker do: the COMMIT or ABORT marker appended to
    the group's ``__consumer_offsets`` partition, then the group coordinator told."""
    partition = offsets_partition(broker)
    markers = TransactionMarkers(
        transactional_id="tx",
        producer_id=producer_id,
        producer_epoch=2,
        coordinator_epoch=0,
        commit=commit,
        transaction_log_partition=0,
        partitions=(TopicPartition(OFFSETS_TOPIC, partition),),
    )
    error = broker.loop.run_until_complete(
        transactions.write_marker(broker.server.state, markers.partitions[0], markers, 1000)
    )
    assert error == ErrorCode.NONE


def start(path: Path) -> InProcessBroker:
    broker = InProcessBroker(path)
    broker.loop.run_until_complete(broker.server.state.groups.wait_loaded())
    return broker


def test_offsets_committed_in_a_transaction_count_once_its_marker_is_written(tmp_path: Path) -> None:
    broker = start(tmp_path)
    try:
        create_topic(broker, "in", partitions=2)
        broker.call(FindCoordinatorRequest(key=GROUP), 1)  # creates __consumer_offsets
        assert commit(broker, {("in", 0): 5}) == {("in", 0): ErrorCode.NONE}
        assert txn_commit(
            broker, {("in", 0): 10, ("in", 1): 11, ("in", 7): 1, ("gone", 0): 1}, PRODUCER_ID
        ) == {
            ("in", 0): ErrorCode.NONE,
            ("in", 1): ErrorCode.NONE,
            ("in", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ("gone", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        }
        # One transactional batch of the producer, without a sequence number.
        partition_log = broker.server.state.logs.log(OFFSETS_TOPIC, offsets_partition(broker))
        assert partition_log is not None
        *_, written = iter_batches(partition_log.read(0, 1 << 20).records)
        header = written.header
        assert header.is_transactional and not header.is_control
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PRODUCER_ID, 2, -1)
        assert len(written.records) == 2

        wanted = [("in", 0), ("in", 1)]
        assert fetch(broker, wanted, require_stable=True) == {
            ("in", 0): (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
            ("in", 1): (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
        }
        assert fetch(broker, wanted, require_stable=False, version=6) == {
            ("in", 0): (5, ErrorCode.NONE),
            ("in", 1): (-1, ErrorCode.NONE),
        }
        write_marker(broker, PRODUCER_ID, commit=True)
        committed = {("in", 0): (10, ErrorCode.NONE), ("in", 1): (11, ErrorCode.NONE)}
        assert fetch(broker, wanted, require_stable=True) == committed
        assert fetch(broker, wanted, require_stable=False, version=6) == committed
    finally:
        broker.close()
    restarted = start(tmp_path)
    try:
        assert fetch(restarted, wanted, require_stable=True) == committed
    finally:
        restarted.close()


def test_a_restarted_broker_drops_aborted_offsets_and_keeps_open_ones_pending(tmp_path: Path) -> None:
    broker = start(tmp_path)
    wanted = [("in", 0), ("in", 1)]
    try:
        create_topic(broker, "in", partitions=2)
        broker.call(FindCoordinatorRequest(key=GROUP), 1)
        commit(broker, {("in", 0): 5})
        assert txn_commit(broker, {("in", 0): 10}, PRODUCER_ID, version=0) == {("in", 0): ErrorCode.NONE}
        write_marker(broker, PRODUCER_ID, commit=False)
        assert txn_commit(broker, {("in", 1): 11}, OTHER_PRODUCER_ID) == {("in", 1): ErrorCode.NONE}
    finally:
        broker.close()
    restarted = start(tmp_path)
    try:
        # Aborted: 5 stays; open: pending after the load, its marker may still come.
        assert fetch(restarted, wanted, require_stable=True) == {
            ("in", 0): (5, ErrorCode.NONE),
            ("in", 1): (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
        }
        write_marker(restarted, OTHER_PRODUCER_ID, commit=True)
        assert fetch(restarted, wanted, require_stable=True) == {
            ("in", 0): (5, ErrorCode.NONE),
            ("in", 1): (11, ErrorCode.NONE),
        }
    finally:
        restarted.close()


def test_api_versions_advertises_txn_offset_commit_0_to_3(broker: InProcessBroker) -> None:
    response = broker.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    advertised = {api.api_key: (api.min_version, api.max_version) for api in response.api_keys}
    assert advertised[TxnOffsetCommitRequest.API_KEY] == (0, 3)
