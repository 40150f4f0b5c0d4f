"""What the commands print: tables, JSON, record formats and the reports of describe commands."""

from __future__ import annotations

import io
import json

from strom.cli.consume import format_record, record_to_json
from strom.cli.groups import (
    GroupDescription,
    GroupMember,
    describe_group_report,
    list_groups_report,
    reset_plan_report,
)
from strom.cli.output import Report, Table, bytes_to_text, render_table, write_report
from strom.cli.reset_plan import PlannedReset
from strom.cli.topics import describe_report, is_set_on_topic
from strom.client.admin import ConfigEntry, PartitionDescription, TopicDescription
from strom.client.consumer.positions import ConsumerRecord


def printed(report: Report, output_format: str = "table") -> str:
    stream = io.StringIO()
    write_report(report, output_format, stream)  # type: ignore[arg-type]
    return stream.getvalue()


def test_table_aligns_numbers_right_and_text_left() -> None:
    table = Table(["NAME", "COUNT", "FLAG"], [["a", 5, True], ["longer", 12345, None]], title="Title")
    assert render_table(table).splitlines() == [
        "Title",
        "NAME    COUNT  FLAG",
        "a           5  yes",
        "longer  12345  -",
    ]


def test_table_cells_show_lists_and_bytes() -> None:
    assert render_table(Table(["R", "B"], [[[1, 2, 3], b"\xffok"]])).splitlines()[1] == "1,2,3  \\xffok"


def test_json_output_is_the_value_and_notes_are_table_only() -> None:
    report = Report({"a": [1, None]}, [Table(["X"], [])], notes=["nothing here"])
    assert json.loads(printed(report, "json")) == {"a": [1, None]}
    assert printed(report) == "X\n\nnothing here\n"


def test_bytes_to_text_escapes_only_what_is_not_utf8() -> None:
    assert bytes_to_text(None) is None
    assert bytes_to_text("grüß".encode()) == "grüß"
    assert bytes_to_text(b"a\xff\x00b") == "a\\xff\x00b"


RECORD = ConsumerRecord("t", 2, 41, 1_700_000_000_000, 0, b"k\xfe", b"v", [("h", b"1"), ("h", None)])


def test_record_formats() -> None:
    assert format_record(RECORD, "value") == "v"
    assert format_record(RECORD, "key-value") == "k\\xfe\tv"
    assert format_record(RECORD, "key-value", ":") == "k\\xfe:v"
    keyless = RECORD._replace(key=None, value=None)
    assert format_record(keyless, "key-value") == "null\tnull"
    assert (
        json.loads(format_record(RECORD, "json"))
        == record_to_json(RECORD)
        == {
            "topic": "t",
            "partition": 2,
            "offset": 41,
            "timestamp": 1_700_000_000_000,
            "key": "k\\xfe",
            "value": "v",
            "headers": [{"key": "h", "value": "1"}, {"key": "h", "value": None}],
        }
    )


def test_topic_describe_report() -> None:
    descriptions = {
        "orders": TopicDescription(
            "orders",
            [PartitionDescription(0, 1, (1, 2), (1,)), PartitionDescription(1, 2, (2, 1), (2, 1))],
            topic_id="abc",
        )
    }
    offsets = {("orders", 0): (5, 12), ("orders", 1): (0, 0)}
    configs = {
        "orders": {
            "retention.ms": ConfigEntry("retention.ms", "1000", source=1),
            "segment.bytes": ConfigEntry("segment.bytes", "1073741824", source=5),
            "secret": ConfigEntry("secret", "hush", is_sensitive=True, source=4),
        }
    }
    sizes = {("orders", 0): 3 * 1024 * 1024, ("orders", 1): 0}
    report = describe_report(descriptions, offsets, configs, sizes)
    [topic] = report.value
    assert topic["replication_factor"] == 2
    assert topic["size_bytes"] == 3 * 1024 * 1024
    assert topic["partitions"][0] == {
        "partition": 0,
        "leader": 1,
        "replicas": [1, 2],
        "isr": [1],
        "log_start_offset": 5,
        "log_end_offset": 12,
        "size_bytes": 3 * 1024 * 1024,
    }
    assert [(c["name"], c["set_on_topic"], c["value"]) for c in topic["configs"]] == [
        ("retention.ms", True, "1000"),
        ("secret", False, None),
        ("segment.bytes", False, "1073741824"),
    ]
    lines = printed(report).splitlines()
    assert lines[0] == "Topic: orders  partitions: 2  replication factor: 2  id: abc"
    assert lines[2].split() == ["0", "1", "1,2", "1", "5", "12", "7", "3.0", "MiB"]
    assert lines[3].split()[-2:] == ["0", "B"]
    assert [line.split() for line in lines if line.startswith("retention.ms")] == [
        ["retention.ms", "1000", "*"]
    ]
    assert [line.split() for line in lines if line.startswith("secret")] == [["secret", "(sensitive)"]]


def test_topic_describe_report_without_offsets_or_sizes() -> None:
    # A broker of a cluster down (metadata still names it): leaders, replicas and ISRs are known,
    # offsets and sizes are not, and show as unknown rather than as zeros.
    descriptions = {"orders": TopicDescription("orders", [PartitionDescription(0, 3, (3, 1, 2), (3, 1, 2))])}
    report = describe_report(descriptions, {}, {}, None)
    [topic] = report.value
    assert topic["size_bytes"] is None
    assert topic["partitions"][0]["log_start_offset"] is None
    assert topic["partitions"][0]["log_end_offset"] is None
    lines = printed(report).splitlines()
    assert lines[2].split() == ["0", "3", "3,1,2", "3,1,2", "-", "-", "-", "-"]


def test_is_set_on_topic_falls_back_to_is_default_without_a_source() -> None:
    assert is_set_on_topic(ConfigEntry("a", "1", is_default=False, source=-1))
    assert not is_set_on_topic(ConfigEntry("a", "1", is_default=True, source=-1))
    assert not is_set_on_topic(ConfigEntry("a", "1", is_default=False, source=4))


def test_group_describe_report_lag_and_owners() -> None:
    description = GroupDescription(
        "g",
        "Stable",
        "consumer",
        "range",
        (GroupMember("m-1", "client-a", "/10.0.0.1", (("t", 0),)),),
    )
    committed: dict[tuple[str, int], int | None] = {("t", 0): 7, ("t", 1): None, ("t", 2): 30}
    ends = {("t", 0): 10, ("t", 1): 4, ("t", 2): 30}
    report = describe_group_report(description, committed, ends)
    assert [(row["partition"], row["lag"], row["member_id"]) for row in report.value["offsets"]] == [
        (0, 3, "m-1"),
        (1, None, None),
        (2, 0, None),
    ]
    assert report.value["total_lag"] == 3
    assert report.value["members"][0]["assignment"] == [{"topic": "t", "partition": 0}]
    lines = printed(report).splitlines()
    assert lines[0].startswith("Group: g  state: Stable  protocol: range (consumer)  members: 1")
    assert lines[2].split() == ["t", "0", "7", "10", "3", "m-1", "/10.0.0.1", "client-a"]
    assert lines[3].split() == ["t", "1", "-", "4", "-", "-", "-", "-"]
    assert "t-0" in lines[-1]


def test_list_groups_report() -> None:
    report = list_groups_report(
        [("b", "classic", "Empty", "consumer"), ("a", "consumer", "Stable", "consumer")]
    )
    assert [(row["group"], row["type"]) for row in report.value] == [("a", "consumer"), ("b", "classic")]
    assert printed(list_groups_report([])) == "GROUP  TYPE  STATE  PROTOCOL-TYPE\n\nno groups\n"


def test_reset_plan_report_says_whether_it_ran() -> None:
    plan = [PlannedReset("t", 0, 3, 0, 0, 9)]
    dry = printed(reset_plan_report("g", plan, executed=False))
    assert "dry run" in dry and dry.splitlines()[2].split() == ["t", "0", "3", "0", "0", "9"]
    assert reset_plan_report("g", plan, executed=True).value == {
        "group": "g",
        "executed": True,
        "partitions": [
            {
                "topic": "t",
                "partition": 0,
                "current_offset": 3,
                "new_offset": 0,
                "log_start_offset": 0,
                "log_end_offset": 9,
            }
        ],
    }


def test_a_number_column_with_missing_cells_stays_aligned_right() -> None:
    table = Table(["NAME", "OFFSET"], [["a", 286], ["b", None], ["c", 0]])
    assert render_table(table).splitlines() == [
        "NAME  OFFSET",
        "a        286",
        "b          -",
        "c          0",
    ]
    assert render_table(Table(["X"], [[None]])).splitlines() == ["X", "-"]
