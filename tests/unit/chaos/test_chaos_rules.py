"""The fault campaign's own logic (tools/chaos), without a cluster: one seed always gives the same
schedule, and each invariant the checker enforces catches the violation it is about — and only
that — on hand-made evidence."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest

from strom.cli.dev_cluster import BrokerProcess
from tools.chaos import checker
from tools.chaos.cluster import ChaosBroker, ChaosCluster
from tools.chaos.schedule import FAULT_KINDS, make_schedule
from tools.chaos.workload import Acked, Assigned, Committed, Processed


def test_a_seed_replays_the_same_schedule_and_faults_never_overlap() -> None:
    first = make_schedule(7, 600, [1, 2, 3])
    assert first == make_schedule(7, 600, [1, 2, 3])
    assert first != make_schedule(8, 600, [1, 2, 3])
    assert {fault.kind for fault in first} == set(FAULT_KINDS)
    for earlier, later in itertools.pairwise(first):
        assert earlier.at_s + earlier.duration_s < later.at_s
    assert all(fault.at_s + fault.duration_s <= 600 for fault in first)
    assert all((fault.target is None) == (fault.kind == "zookeeper-restart") for fault in first)
    only_kills = make_schedule(7, 120, [1, 2, 3], ("kill",))
    assert only_kills and {fault.kind for fault in only_kills} == {"kill"}


def test_lost_and_duplicated_records_are_found_in_the_log_as_read_back() -> None:
    acked = [Acked(0, 0, b"a", 1.0), Acked(0, 1, b"b", 1.1), Acked(1, 0, b"c", 1.2)]
    log = {0: {0: b"a", 1: b"x"}, 1: {}}
    assert checker.lost_records(acked, log) == [
        "partition 0 offset 1 (b'b')",
        "partition 1 offset 0 (b'c')",
    ]
    assert checker.lost_records(acked, {0: {0: b"a", 1: b"b"}, 1: {0: b"c"}}) == []
    assert checker.duplicated_values({0: {0: b"a", 1: b"b"}, 1: {0: b"a"}}) == ["b'a' x2"]


def test_a_record_acknowledged_without_an_offset_is_found_by_its_value() -> None:
    """librdkafka may acknowledge a record without its offset (a retry it knows was persisted):
    the checker looks for the value in the partition; absent, the record is lost."""
    acked = [Acked(0, None, b"a", 1.0), Acked(0, None, b"z", 1.1), Acked(1, 0, b"c", 1.2)]
    log = {0: {0: b"x", 1: b"a"}, 1: {0: b"c"}}
    resolved = checker.with_offsets(acked, log)
    assert [record.offset for record in resolved] == [1, None, 0]
    assert checker.lost_records(resolved, log) == ["partition 0 offset None (b'z')"]
    assert checker.unprocessed_records(resolved, processed("m", 1, 0, [1], 2.0)) == ["partition 1 offset 0"]


def processed(member: str, session: int, partition: int, offsets: list[int], start: float) -> list[Processed]:
    return [
        Processed(member, 1, partition, offset, b"", session, start + index * 0.01)
        for index, offset in enumerate(offsets)
    ]


def test_consumption_must_be_contiguous_within_an_owner_and_between_owners() -> None:
    # A re-reads from its last commit after a rebalance (at least once): fine.
    fine = processed("A", 1, 0, [0, 1, 2, 3], 0.0) + processed("B", 1, 0, [2, 3, 4], 1.0)
    assert checker.consumption_gaps(fine) == []
    skipped = processed("A", 1, 0, [0, 1, 3], 0.0)
    assert checker.consumption_gaps(skipped) == ["A processed partition 0 offset 3 after 1"]
    started_past = processed("A", 1, 0, [0, 1], 0.0) + processed("B", 1, 0, [5, 6], 1.0)
    assert checker.consumption_gaps(started_past) == ["B started partition 0 at 5, only 1 processed before"]
    acked = [Acked(0, offset, b"", 0.0) for offset in range(8)]
    assert checker.unprocessed_records(acked, started_past) == [
        f"partition 0 offset {o}" for o in (2, 3, 4, 7)
    ]


def test_committed_offsets_never_go_backwards() -> None:
    commits = [
        Committed("A", 3, ((0, 10), (1, 5)), 1.0),
        Committed("B", 4, ((0, 12),), 2.0),
        Committed("B", 4, ((0, 11),), 3.0),
    ]
    found = checker.commit_regressions(commits, [(1.5, {0: 10}), (2.5, {0: 12}), (3.5, {0: 9})])
    assert found == [
        "partition 0: B (generation 4) committed 11 after B (generation 4) had 12 acknowledged",
        "partition 0: OffsetFetch gave 9 after 12",
    ]
    assert checker.commit_regressions(commits[:2], [(1.5, {0: 10}), (2.5, {0: 12})]) == []


def test_a_partition_owned_by_two_members_of_one_generation_is_reported() -> None:
    assigned = [
        Assigned("A", 5, (0, 1), 1, 1.0),
        Assigned("B", 5, (2,), 1, 1.0),
        Assigned("B", 6, (0, 1), 2, 2.0),  # another generation: a handover, not a double owner
        Assigned("C", 6, (1, 2), 1, 2.0),
    ]
    assert checker.double_ownerships(assigned) == ["generation 6: partition 1 owned by ['B', 'C']"]


def test_unavailability_is_the_longest_silence_of_a_partition_and_replicas_must_match() -> None:
    acked = [Acked(0, i, b"", at) for i, at in enumerate([1.0, 2.0, 6.5, 7.0])] + [Acked(1, 0, b"", 9.0)]
    longest = checker.longest_unavailability(acked, 0.0, 10.0)
    assert longest == {0: 4.5, 1: 9.0}
    same = {0: {1: [(0, 9, 111)], 2: [(0, 9, 111)]}}
    assert checker.replicas_identical(same) == []
    different = {0: {1: [(0, 9, 111)], 2: [(0, 9, 111), (10, 12, 5)]}}
    assert checker.replicas_identical(different) == [
        "partition 0: replicas differ (last offsets {1: 9, 2: 12})"
    ]


def test_a_broker_that_exited_without_being_killed_is_reported_once_and_started_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = ChaosCluster(tmp_path)
    processes = {}
    for node_id, command in ((1, ["true"]), (2, ["false"]), (3, ["sleep", "30"])):
        process = BrokerProcess(node_id, 0, tmp_path / f"b{node_id}", tmp_path / f"b{node_id}.log", "-")
        process.process = subprocess.Popen(command)
        processes[node_id] = process
        cluster.brokers[node_id] = ChaosBroker(node_id, process, 0)
    processes[1].process.wait()  # type: ignore[union-attr]
    processes[2].process.wait()  # type: ignore[union-attr]
    cluster.kill(1)  # killed by the campaign: not reported
    restarted: list[int] = []
    monkeypatch.setattr(cluster, "restart", restarted.append)
    try:
        assert cluster.exited_on_their_own() == ["broker 2 exited on its own (exit code 1)"]
        assert restarted == [2]
        assert cluster.exited_on_their_own() == []
    finally:
        processes[3].kill()
        cluster.proxy.stop()
