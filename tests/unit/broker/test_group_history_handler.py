"""StromGroupHistory (strom-only API key 32100) through the in-process broker: advertised in
ApiVersions, answered from the coordinator's history, DESCRIBE on the group with ACLs on; and the
history's series on /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.assignors.protocol import Assignment, encode_assignment
from strom.broker.handlers.group_history import handle_strom_group_history
from strom.protocol.api import STROM_CLIENT_SOFTWARE_NAME
from strom.protocol.errors import ErrorCode
from strom.protocol.group_history import (
    STROM_GROUP_HISTORY_API_KEY,
    StromGroupHistoryRequest,
    StromGroupHistoryResponse,
    decode_entry,
)
from strom.protocol.messages.api_versions import ApiVersionsRequest
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.protocol.messages.join_group import JoinGroupRequest
from strom.protocol.messages.sync_group import SyncGroupRequest
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_authorization import as_principal, authorizing_state, state  # noqa: F401

SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"


@pytest.fixture
def fast_broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    instance = InProcessBroker(tmp_path / "data", {"group.initial.rebalance.delay.ms": "0"})
    yield instance
    instance.close()


def test_the_history_api_is_advertised_and_answers_a_groups_rebalances(fast_broker: InProcessBroker) -> None:
    # Advertised to strom's client (which names itself), not to others (tests/unit/broker/test_dispatch.py).
    strom_client = ApiVersionsRequest(
        client_software_name=STROM_CLIENT_SOFTWARE_NAME, client_software_version="0"
    )
    versions = fast_broker.call(strom_client, 3)
    assert {entry.api_key: entry.max_version for entry in versions.api_keys}[STROM_GROUP_HISTORY_API_KEY] == 0
    fast_broker.call(FindCoordinatorRequest(key="g"), 1)  # creates __consumer_offsets
    missing: StromGroupHistoryResponse = fast_broker.call(StromGroupHistoryRequest("g"), 0)
    assert missing.error_code == ErrorCode.GROUP_ID_NOT_FOUND and missing.entries == []

    joined = fast_broker.call(
        JoinGroupRequest(
            group_id="g",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            member_id="",
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=SUBSCRIPTION)],
        ),
        3,
    )
    assert joined.error_code == ErrorCode.NONE
    assignment = encode_assignment(Assignment(partitions=[("t", 0), ("t", 1)]))
    synced = fast_broker.call(
        SyncGroupRequest(
            group_id="g",
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=joined.member_id, assignment=assignment)
            ],
        ),
        3,
    )
    assert synced.error_code == ErrorCode.NONE

    response: StromGroupHistoryResponse = fast_broker.call(StromGroupHistoryRequest("g"), 0)
    assert response.error_code == ErrorCode.NONE
    [entry] = [decode_entry(raw) for raw in response.entries]
    assert (entry.trigger, entry.causes, entry.generation) == ("member-joined", (joined.member_id,), 1)
    assert [(move.topic, move.partition, move.to_member) for move in entry.moves] == [
        ("t", 0, joined.member_id),
        ("t", 1, joined.member_id),
    ]

    page = fast_broker.server.metrics.render(fast_broker.server.state)
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    }
    assert samples[("strom_rebalances_recorded_total", (("trigger", "member-joined"),))] == 1
    assert samples[("strom_rebalances_recorded_total", (("trigger", "session-expired"),))] == 0
    assert samples[("strom_rebalance_duration_ms_count", ())] == 1
    assert samples[("strom_rebalance_duration_ms_bucket", (("le", "+Inf"),))] == 1


def test_the_history_needs_describe_on_the_group(state) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    def ask(principal: str, group: str) -> StromGroupHistoryResponse:
        return asyncio.run(
            handle_strom_group_history(as_principal(state, principal, 0), StromGroupHistoryRequest(group))
        )

    assert ask("User:bob", "billing").error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert ask("User:alice", "other").error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    # READ on the group implies DESCRIBE: the request reaches the coordinator (which owns nothing yet).
    assert ask("User:alice", "billing").error_code == ErrorCode.NOT_COORDINATOR
