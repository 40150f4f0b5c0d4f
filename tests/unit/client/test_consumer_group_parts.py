"""Consumer group pieces without sockets: requests fitted to older versions, positions that wait for
committed offsets."""

from __future__ import annotations

import pytest

from strom.client.cluster import TopicPartition
from strom.client.consumer.coordinator import _offset_fetch_request, fit_request
from strom.client.consumer.positions import SubscriptionState
from strom.client.errors import UnsupportedVersionError
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.protocol.messages.heartbeat import HeartbeatRequest
from strom.protocol.messages.join_group import JoinGroupRequest
from strom.protocol.messages.leave_group import LeaveGroupRequest
from strom.protocol.messages.offset_fetch import OffsetFetchRequest

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


@pytest.mark.parametrize("version", range(FindCoordinatorRequest.MAX_VERSION + 1))
def test_find_coordinator_fits_every_version(version: int) -> None:
    request = fit_request(FindCoordinatorRequest(coordinator_keys=["g"]), version)
    request.encode(version)  # refuses any field the version lacks
    assert (request.key if version < 4 else request.coordinator_keys[0]) == "g"


@pytest.mark.parametrize("version", range(OffsetFetchRequest.MIN_VERSION, OffsetFetchRequest.MAX_VERSION + 1))
def test_a_read_committed_offset_fetch_asks_for_stable_offsets_where_the_version_can(version: int) -> None:
    request = _offset_fetch_request("g", {"t": [0]}, version, require_stable=True)
    request.encode(version)
    assert request.require_stable is (version >= 7)
    assert _offset_fetch_request("g", {"t": [0]}, version).require_stable is False


@pytest.mark.parametrize("version", range(LeaveGroupRequest.MAX_VERSION + 1))
def test_leave_group_fits_every_version(version: int) -> None:
    request = LeaveGroupRequest(
        group_id="g", members=[LeaveGroupRequest.MemberIdentity(member_id="m-1", reason="closing")]
    )
    fitted = fit_request(request, version)
    fitted.encode(version)
    assert (fitted.member_id if version < 3 else fitted.members[0].member_id) == "m-1"


@pytest.mark.parametrize("version", range(JoinGroupRequest.MAX_VERSION + 1))
def test_dynamic_join_fits_every_version(version: int) -> None:
    request = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=60_000,
        protocol_type="consumer",
        reason="x",
    )
    fit_request(request, version).encode(version)


def test_static_join_needs_version_5() -> None:
    with pytest.raises(UnsupportedVersionError, match="v5"):
        fit_request(JoinGroupRequest(group_id="g", group_instance_id="i"), 4)
    fit_request(HeartbeatRequest(group_id="g", group_instance_id="i"), 2).encode(2)


def test_assigned_partitions_wait_for_committed_offsets_before_any_reset() -> None:
    state = SubscriptionState("earliest")
    state.add_partitions([TP0, TP1])
    assert state.needing_reset() == {}
    assert state.fetchable() == {}
    assert state.awaiting_committed([TP0, TP1]) == [TP0, TP1]
    state.committed_loaded({TP0: 42, TP1: None})
    assert state.position(TP0) == 42
    # Nothing committed: auto.offset.reset decides.
    assert state.needing_reset() == {TP1: "earliest"}
    assert state.positions() == {TP0: 42}


def test_a_seek_in_the_assigned_callback_wins_over_the_committed_offset() -> None:
    state = SubscriptionState("latest")
    state.add_partitions([TP0])
    state.seek(TP0, 7)
    state.committed_loaded({TP0: 42})
    assert state.position(TP0) == 7


def test_adding_keeps_existing_partitions_and_removing_drops_their_buffers() -> None:
    state = SubscriptionState("latest")
    state.add_partitions([TP0])
    state.committed_loaded({TP0: 5})
    state.add_partitions([TP0, TP1])
    assert state.position(TP0) == 5
    state.remove_partitions([TP0])
    assert state.assignment() == {TP1}
