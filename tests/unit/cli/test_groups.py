"""``strom groups``: the adapters from the admin client's real result types, and every command run
through ``main`` against an in-memory admin (no sockets): what is printed, what is refused, and
which offsets a reset commits."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from strom.assignors import Assignment
from strom.cli import groups
from strom.cli.main import main
from strom.client.admin import (
    ConsumerGroupDescription,
    ConsumerGroupMemberDescription,
    GroupDescription,
    GroupListing,
    MemberDescription,
    OffsetAndMetadata,
    PartitionDescription,
    TopicDescription,
)
from strom.client.cluster import TopicPartition
from strom.client.offsets import OffsetAndTimestamp

GROUP = "orders-app"
TOPIC = "orders"


def member(member_id: str, partitions: list[tuple[str, int]] | None) -> MemberDescription:
    assignment = None if partitions is None else Assignment(partitions=list(partitions))
    return MemberDescription(member_id, None, f"client-{member_id}", "/127.0.0.1", assignment, b"")


class FakeAdmin:
    """The admin calls the groups commands make, answered from dictionaries; commits recorded."""

    def __init__(self) -> None:
        self.descriptions: dict[str, GroupDescription] = {}
        # Consumer-protocol groups (what ConsumerGroupDescribe knows; the rest are classic).
        self.consumer_groups: dict[str, ConsumerGroupDescription] = {}
        # Listed as an old broker lists groups: ListGroups below v4 has no state.
        self.listed_without_state: list[str] = []
        self.committed: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self.log_starts = {TopicPartition(TOPIC, 0): 0, TopicPartition(TOPIC, 1): 5}
        self.log_ends = {TopicPartition(TOPIC, 0): 100, TopicPartition(TOPIC, 1): 40}
        # Offsets ListOffsets finds for a timestamp (None: no record that new).
        self.at_time: dict[TopicPartition, int | None] = {
            TopicPartition(TOPIC, 0): 60,
            TopicPartition(TOPIC, 1): None,
        }
        self.altered: list[tuple[str, dict[TopicPartition, int]]] = []
        self.deleted: list[str] = []
        self.offsets_deleted: list[tuple[str, list[TopicPartition]]] = []

    def list_groups(self, states: Iterable[str] | None = None) -> list[GroupListing]:
        return (
            [
                GroupListing(description.group_id, description.protocol_type, description.state, "classic")
                for description in self.descriptions.values()
            ]
            + [
                GroupListing(group.group_id, "consumer", group.state, "consumer")
                for group in self.consumer_groups.values()
            ]
            + [GroupListing(group_id, "consumer", None) for group_id in self.listed_without_state]
        )

    def describe_consumer_protocol_groups(
        self, group_ids: Iterable[str]
    ) -> dict[str, ConsumerGroupDescription | None]:
        return {group_id: self.consumer_groups.get(group_id) for group_id in group_ids}

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        return {
            group_id: self.descriptions.get(group_id, GroupDescription(group_id, "Dead", "", "", []))
            for group_id in group_ids
        }

    def list_group_offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return dict(self.committed.get(group_id, {}))

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        partitions = [PartitionDescription(number, 1, (1,), (1,)) for number in (0, 1)]
        return {name: TopicDescription(name, partitions) for name in names}

    def list_offsets(self, specs: Mapping[TopicPartition, str | int]) -> dict[TopicPartition, Any]:
        answers: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for partition, spec in specs.items():
            if spec == "earliest":
                answers[partition] = OffsetAndTimestamp(self.log_starts[partition], -1)
            elif spec == "latest":
                answers[partition] = OffsetAndTimestamp(self.log_ends[partition], -1)
            else:
                found = self.at_time[partition]
                answers[partition] = None if found is None else OffsetAndTimestamp(found, int(spec))
        return answers

    def alter_group_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        self.altered.append((group_id, dict(offsets)))

    def delete_groups(self, group_ids: Iterable[str]) -> None:
        self.deleted += list(group_ids)

    def delete_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        self.offsets_deleted.append((group_id, sorted(partitions)))


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    fake = FakeAdmin()
    fake.descriptions[GROUP] = GroupDescription(GROUP, "Empty", "consumer", "", [])
    fake.committed[GROUP] = {
        TopicPartition(TOPIC, 0): OffsetAndMetadata(30),
        TopicPartition(TOPIC, 1): OffsetAndMetadata(10, "note"),
    }

    @contextmanager
    def open_fake(arguments: Any) -> Iterator[FakeAdmin]:
        yield fake

    monkeypatch.setattr(groups, "open_admin", open_fake)
    return fake


def make_stable(admin: FakeAdmin) -> None:
    admin.descriptions[GROUP] = GroupDescription(
        GROUP,
        "Stable",
        "consumer",
        "range",
        [member("m-1", [(TOPIC, 1), (TOPIC, 0)])],
    )


# -- adapters ------------------------------------------------------------------------------------


def test_description_view_reads_members_and_sorted_assignments() -> None:
    described = groups.description_view(
        GroupDescription(
            GROUP,
            "CompletingRebalance",
            "consumer",
            "cooperative-sticky",
            [member("a", [(TOPIC, 1), (TOPIC, 0)]), member("b", None)],
        )
    )
    assert described.state == "CompletingRebalance"
    assert described.protocol == "cooperative-sticky"
    assert described.members[0] == groups.GroupMember(
        "a", "client-a", "/127.0.0.1", ((TOPIC, 0), (TOPIC, 1)), None
    )
    # An assignment the client could not decode shows as no partitions rather than hiding the member.
    assert described.members[1].assignment == ()


def test_committed_view_drops_metadata_and_treats_negative_as_nothing() -> None:
    view = groups.committed_view(
        {TopicPartition(TOPIC, 0): OffsetAndMetadata(7, "m"), TopicPartition(TOPIC, 1): OffsetAndMetadata(-1)}
    )
    assert view == {(TOPIC, 0): 7, (TOPIC, 1): None}


@pytest.mark.parametrize(
    ("state", "members", "active"),
    [("Empty", 0, False), ("Dead", 0, False), ("Stable", 1, True), ("PreparingRebalance", 0, True)],
)
def test_is_active_follows_the_coordinator(state: str, members: int, active: bool) -> None:
    description = groups.GroupDescription(
        GROUP, state, "consumer", "", tuple(groups.GroupMember(f"m{i}", "c", "h") for i in range(members))
    )
    assert groups.is_active(description) is active


# -- commands --------------------------------------------------------------------------------------


def test_list_prints_state_or_a_dash_when_the_broker_does_not_say(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    admin.listed_without_state.append("old")
    assert main(["groups", "list"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "GROUP       TYPE     STATE  PROTOCOL-TYPE",
        "old         -        -      consumer",
        "orders-app  classic  Empty  consumer",
    ]
    assert main(["groups", "list", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0] == {
        "group": "old",
        "type": None,
        "state": None,
        "protocol_type": "consumer",
    }


def consumer_protocol_group() -> ConsumerGroupDescription:
    """A consumer-protocol group half-way through a move: m-1 still owns partition 1, which its
    target gives to m-2 (who has nothing yet)."""
    return ConsumerGroupDescription(
        "kip848-app",
        "Reconciling",
        7,
        7,
        "uniform",
        [
            ConsumerGroupMemberDescription(
                "m-1",
                None,
                None,
                6,
                "client-1",
                "/127.0.0.1",
                [TOPIC],
                None,
                [TopicPartition(TOPIC, 1), TopicPartition(TOPIC, 0)],
                [TopicPartition(TOPIC, 0)],
            ),
            ConsumerGroupMemberDescription(
                "m-2",
                "i-2",
                "rack-a",
                7,
                "client-2",
                "/127.0.0.1",
                [],
                "^ord.*",
                [],
                [TopicPartition(TOPIC, 1)],
            ),
        ],
    )


def test_list_shows_the_group_type(admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    group = consumer_protocol_group()
    admin.consumer_groups[group.group_id] = group
    assert main(["groups", "list"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "GROUP       TYPE      STATE        PROTOCOL-TYPE",
        "kip848-app  consumer  Reconciling  consumer",
        "orders-app  classic   Empty        consumer",
    ]


def test_describe_a_consumer_protocol_group_shows_epochs_and_targets(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    group = consumer_protocol_group()
    admin.consumer_groups[group.group_id] = group
    admin.committed[group.group_id] = {TopicPartition(TOPIC, 0): OffsetAndMetadata(90)}
    assert main(["groups", "describe", group.group_id, "--output", "json"]) == 0
    [value] = json.loads(capsys.readouterr().out)
    assert (value["type"], value["state"], value["protocol"]) == ("consumer", "Reconciling", "uniform")
    assert (value["group_epoch"], value["assignment_epoch"]) == (7, 7)
    first, second = value["members"]
    assert first["member_epoch"] == 6
    assert first["assignment"] == [{"topic": TOPIC, "partition": 0}, {"topic": TOPIC, "partition": 1}]
    assert first["target_assignment"] == [{"topic": TOPIC, "partition": 0}]
    assert (second["member_epoch"], second["group_instance_id"], second["assignment"]) == (7, "i-2", [])
    assert second["target_assignment"] == [{"topic": TOPIC, "partition": 1}]
    assert [(row["partition"], row["lag"], row["member_id"]) for row in value["offsets"]] == [
        (0, 10, "m-1"),
        (1, None, "m-1"),
    ]
    assert main(["groups", "describe", group.group_id]) == 0
    text = capsys.readouterr().out
    assert "type: consumer  state: Reconciling  assignor: uniform  epoch: 7  assignment epoch: 7" in text
    members = text[text.index("Members") :].splitlines()
    assert members[1].split() == [
        "MEMBER-ID",
        "CLIENT-ID",
        "HOST",
        "EPOCH",
        "ASSIGNMENT",
        "TARGET-ASSIGNMENT",
    ]
    assert members[2].split() == ["m-1", "client-1", "/127.0.0.1", "6", "orders-0", "orders-1", "orders-0"]
    assert members[3].split() == ["m-2", "client-2", "/127.0.0.1", "7", "-", "orders-1"]


def test_describe_shows_lag_and_owner_per_partition(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    make_stable(admin)
    assert main(["groups", "describe", GROUP, "--output", "json"]) == 0
    [value] = json.loads(capsys.readouterr().out)
    assert value["state"] == "Stable" and value["protocol"] == "range"
    assert [
        (row["partition"], row["committed_offset"], row["log_end_offset"], row["lag"])
        for row in value["offsets"]
    ] == [
        (0, 30, 100, 70),
        (1, 10, 40, 30),
    ]
    assert {row["member_id"] for row in value["offsets"]} == {"m-1"}
    assert value["total_lag"] == 100
    assert value["members"][0]["client_id"] == "client-m-1"


def test_describe_of_an_unknown_group_exits_1(admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["groups", "describe", "nobody"]) == 1
    assert capsys.readouterr().err == (
        "strom: error: group 'nobody' does not exist; `strom groups list` shows the groups there are\n"
    )


def test_describe_several_groups_and_all_groups(admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    make_stable(admin)
    admin.descriptions["idle"] = GroupDescription("idle", "Empty", "consumer", "", [])
    admin.committed["idle"] = {TopicPartition(TOPIC, 0): OffsetAndMetadata(99)}
    assert main(["groups", "describe", GROUP, "idle", "--output", "json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert [(group["group"], group["state"], group["total_lag"]) for group in described] == [
        (GROUP, "Stable", 100),
        ("idle", "Empty", 1),
    ]
    assert main(["groups", "describe", "--all-groups"]) == 0
    titles = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Group: ")]
    assert [title.split()[1] for title in titles] == [GROUP, "idle"]
    # The groups that exist are shown; the missing one is named, and the exit code says so.
    assert main(["groups", "describe", "idle", "nobody"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("Group: idle")
    assert "group 'nobody' does not exist" in captured.err
    assert main(["groups", "describe"]) == 2
    assert "name the groups to describe, or give --all-groups" in capsys.readouterr().err


def test_delete_offsets_of_a_topic_and_of_chosen_partitions(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["groups", "delete-offsets", GROUP, "--topic", TOPIC]) == 0
    assert admin.offsets_deleted == [(GROUP, [TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])]
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:4] == ["TOPIC   PARTITION  DELETED-OFFSET", "orders          0              30",
                          "orders          1              10"]  # fmt: skip
    assert lines[-1] == "offsets deleted"
    assert main(["groups", "delete-offsets", GROUP, "--topic", f"{TOPIC}:1", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["partitions"] == [
        {"topic": TOPIC, "partition": 1, "deleted_offset": 10}
    ]
    assert main(["groups", "delete-offsets", GROUP, "--topic", "other"]) == 1
    assert "has no committed offsets for topic 'other'" in capsys.readouterr().err


def test_reset_is_refused_while_the_group_has_members(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    make_stable(admin)
    assert main(["groups", "reset-offsets", GROUP, "--topic", TOPIC, "--to-earliest", "--execute"]) == 1
    error = capsys.readouterr().err
    assert "1 active member(s) (state Stable); stop its consumers first" in error
    assert admin.altered == []


def test_reset_dry_run_prints_the_plan_and_commits_nothing(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["groups", "reset-offsets", GROUP, "--topic", TOPIC, "--shift-by", "-12"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split() == [TOPIC, "0", "30", "18", "0", "100"]
    assert lines[3].split() == [TOPIC, "1", "10", "5", "5", "40"]  # clamped at the log start
    assert lines[-1].startswith("dry run: nothing changed")
    assert admin.altered == []


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (["--to-earliest"], {0: 0, 1: 5}),
        (["--to-latest"], {0: 100, 1: 40}),
        (["--to-offset", "50"], {0: 50, 1: 40}),
        (["--shift-by", "3"], {0: 33, 1: 13}),
        (["--to-datetime", "1700000000000"], {0: 60, 1: 40}),
    ],
    ids=lambda value: str(value),
)
def test_reset_execute_commits_the_plan(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str], target: list[str], expected: dict[int, int]
) -> None:
    assert main(["groups", "reset-offsets", GROUP, "--topic", TOPIC, *target, "--execute"]) == 0
    assert admin.altered == [
        (GROUP, {TopicPartition(TOPIC, partition): offset for partition, offset in expected.items()})
    ]
    assert capsys.readouterr().out.splitlines()[-1] == "offsets reset"


def test_reset_of_chosen_partitions_and_an_unknown_partition(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["groups", "reset-offsets", GROUP, "--topic", f"{TOPIC}:1", "--to-earliest", "--execute"]) == 0
    )
    assert admin.altered == [(GROUP, {TopicPartition(TOPIC, 1): 5})]
    assert main(["groups", "reset-offsets", GROUP, "--topic", f"{TOPIC}:0,7", "--to-earliest"]) == 2
    assert "topic 'orders' has no partition 7" in capsys.readouterr().err


def test_delete_refuses_an_active_group_before_deleting_any(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    admin.descriptions["idle"] = GroupDescription("idle", "Empty", "consumer", "", [])
    make_stable(admin)
    assert main(["groups", "delete", "idle", GROUP]) == 1
    assert "cannot delete group 'orders-app': it has 1 active member(s)" in capsys.readouterr().err
    assert admin.deleted == []


def test_delete_empty_groups_and_refuse_unknown_ones(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["groups", "delete", GROUP]) == 0
    assert admin.deleted == [GROUP]
    assert capsys.readouterr().out == "deleted group 'orders-app'\n"
    assert main(["groups", "delete", "nobody"]) == 1
    assert "group 'nobody' does not exist" in capsys.readouterr().err


def test_reset_all_topics_to_current_exports_csv_that_from_file_reads_back(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    assert main(["groups", "reset-offsets", GROUP, "--all-topics", "--to-current", "--export"]) == 0
    exported = capsys.readouterr().out
    assert exported == f"{TOPIC},0,30\n{TOPIC},1,10\n"
    assert admin.altered == []
    plan = tmp_path / "plan.csv"
    plan.write_text(exported.replace(",30", ",20"))
    assert main(["groups", "reset-offsets", GROUP, "--from-file", str(plan), "--execute"]) == 0
    assert admin.altered == [(GROUP, {TopicPartition(TOPIC, 0): 20, TopicPartition(TOPIC, 1): 10})]
    # Kafka's several-groups form: group,topic,partition,offset; only this group's rows count.
    plan.write_text(f"other,{TOPIC},0,1\n{GROUP},{TOPIC},1,200\n")
    assert main(["groups", "reset-offsets", GROUP, "--from-file", str(plan), "--execute"]) == 0
    assert admin.altered[-1] == (GROUP, {TopicPartition(TOPIC, 1): 40})  # pulled back to the log end
    assert main(["groups", "reset-offsets", GROUP, "--from-file", str(plan), "--to-earliest"]) == 2
    assert "--from-file gives the offsets itself" in capsys.readouterr().err


def test_to_current_where_nothing_is_committed_is_the_log_end(
    admin: FakeAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    del admin.committed[GROUP][TopicPartition(TOPIC, 1)]
    assert main(["groups", "reset-offsets", GROUP, "--topic", TOPIC, "--to-current", "--export"]) == 0
    assert capsys.readouterr().out == f"{TOPIC},0,30\n{TOPIC},1,40\n"


def test_reset_by_duration_and_a_missing_target(admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["groups", "reset-offsets", GROUP, "--topic", TOPIC, "--by-duration", "PT1H", "--execute"]) == 0
    )
    assert admin.altered == [(GROUP, {TopicPartition(TOPIC, 0): 60, TopicPartition(TOPIC, 1): 40})]
    assert main(["groups", "reset-offsets", GROUP, "--topic", TOPIC, "--by-duration", "1 hour"]) == 2
    assert "PnDTnHnMnS" in capsys.readouterr().err
    assert main(["groups", "reset-offsets", GROUP, "--topic", TOPIC]) == 2
    assert "say where to" in capsys.readouterr().err
