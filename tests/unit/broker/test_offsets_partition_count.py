"""``__consumer_offsets`` keeps the partition count it was created with: a broker restarted with
another offsets.topic.num.partitions still finds every group where it was (Kafka reads the count
from the topic too). Before, it hashed groups over the new setting: their offsets were not found,
and a count below the topic's made loading fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.protocol.messages.offset_commit import OffsetCommitRequest
from strom.protocol.messages.offset_fetch import OffsetFetchRequest
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import create_topic

GROUPS = [f"group-{index}" for index in range(20)]


def started(data_dir: Path, partitions: int) -> InProcessBroker:
    broker = InProcessBroker(data_dir, {"offsets.topic.num.partitions": str(partitions)})
    broker.loop.run_until_complete(broker.server.state.groups.wait_loaded())
    return broker


def commit(broker: InProcessBroker, group: str, offset: int) -> None:
    request = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=offset
                    )
                ],
            )
        ],
    )
    response = broker.call(request, 8)
    assert response.topics[0].partitions[0].error_code == ErrorCode.NONE, response


def committed(broker: InProcessBroker, group: str) -> int:
    request = OffsetFetchRequest(
        group_id=group,
        topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])],
    )
    response = broker.call(request, 6)
    assert response.error_code == ErrorCode.NONE, response
    return int(response.topics[0].partitions[0].committed_offset)


@pytest.mark.parametrize("restarted_with", [50, 2])
def test_groups_stay_in_the_partitions_the_topic_was_created_with(
    tmp_path: Path, restarted_with: int
) -> None:
    broker = started(tmp_path / "data", 7)
    create_topic(broker, "t")
    assert broker.call(FindCoordinatorRequest(key="g", key_type=0), 3).error_code == ErrorCode.NONE
    for index, group in enumerate(GROUPS):
        commit(broker, group, 100 + index)
    broker.close()
    broker = started(tmp_path / "data", restarted_with)
    try:
        assert broker.server.state.groups.partitions == 7
        assert [committed(broker, group) for group in GROUPS] == [100 + i for i in range(len(GROUPS))]
    finally:
        broker.close()
