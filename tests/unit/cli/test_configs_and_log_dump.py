"""``strom configs``: kafka-configs' K=V list syntax, which configs count as set on a topic or a
broker, and what an alter sends (against an in-memory admin); ``strom log dump``: reading a
segment batch by batch, with a flipped byte and a torn tail."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from strom.cli.configs import Target, alter_resource_configs, configs_report, parse_config_list
from strom.cli.log_dump import DumpedBatch, TornTail, read_segment
from strom.cli.output import CliError, UsageError
from strom.client.admin import AlterConfigOperation, ConfigEntry, ConfigResource, ConfigResourceType
from strom.protocol.records.batch import Record, build_batch
from strom.protocol.records.compression import CompressionType


def test_config_list_syntax() -> None:
    assert parse_config_list("a=1,b=[x,y],c=") == [("a", "1"), ("b", "x,y"), ("c", "")]
    assert parse_config_list("retention.ms = 5") == [("retention.ms", "5")]
    for bad, message in (("a", "KEY=VALUE"), ("a=[1,2", "'\\[' without"), ("a=1]", "without '\\['")):
        with pytest.raises(ValueError, match=message):
            parse_config_list(bad)


ENTRIES = {
    "retention.ms": ConfigEntry("retention.ms", "1000", source=1),
    "segment.ms": ConfigEntry("segment.ms", "604800000", is_default=True, source=5),
    "log.dirs": ConfigEntry("log.dirs", "/data", read_only=True, source=4),
    "num.io.threads": ConfigEntry("num.io.threads", "8", source=2),
    "secret": ConfigEntry("secret", "hunter2", is_sensitive=True, source=1),
}


def test_report_shows_what_is_set_on_the_target_unless_all() -> None:
    topic = configs_report(Target("topic", "t"), ENTRIES, show_all=False)
    assert [(row["name"], row["value"]) for row in topic.value["configs"]] == [
        ("retention.ms", "1000"),
        ("secret", None),
    ]
    assert topic.tables[0].rows[1] == ["secret", "(sensitive)", "topic", False]
    broker = configs_report(Target("broker", "0"), ENTRIES, show_all=False)
    assert [row["name"] for row in broker.value["configs"]] == ["num.io.threads"]
    every = configs_report(Target("broker", "0"), ENTRIES, show_all=True)
    assert [row["source"] for row in every.value["configs"]] == [
        "static-broker", "dynamic-broker", "topic", "topic", "default",
    ]  # fmt: skip
    empty = configs_report(Target("broker-defaults", ""), ENTRIES, show_all=False)
    assert empty.tables == [] and empty.notes == [
        "no configs set on the brokers' defaults (--all shows every config)"
    ]


class FakeAdmin:
    def __init__(self, entries: Mapping[str, ConfigEntry]) -> None:
        self.entries = dict(entries)
        self.altered: list[
            tuple[ConfigResource, list[tuple[str, AlterConfigOperation, str | None]], bool]
        ] = []

    def describe_configs(
        self, resources: Iterable[ConfigResource]
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        return {resource: self.entries for resource in resources}

    def incremental_alter_configs(
        self, changes: Mapping[ConfigResource, Any], validate_only: bool = False
    ) -> None:
        for resource, entries in changes.items():
            self.altered.append((resource, list(entries), validate_only))


def test_alter_checks_every_name_then_sends_one_incremental_request() -> None:
    admin: Any = FakeAdmin(ENTRIES)
    done = alter_resource_configs(
        admin, Target("topic", "t"), [("segment.ms", "5")], ["retention.ms", "log.dirs"]
    )
    assert admin.altered == [
        (
            ConfigResource(ConfigResourceType.TOPIC, "t"),
            [
                ("segment.ms", AlterConfigOperation.SET, "5"),
                ("retention.ms", AlterConfigOperation.DELETE, None),
                ("log.dirs", AlterConfigOperation.DELETE, None),
            ],
            False,
        )
    ]
    assert done == [
        "set segment.ms=5 on topic 't'",
        "deleted retention.ms from topic 't' (back to what it inherits)",
        "log.dirs was not set on topic 't': nothing to delete",
    ]
    with pytest.raises(
        CliError, match=r"broker 0 has no config 'segment\.msec' \(did you mean segment\.ms\?\)"
    ):
        alter_resource_configs(admin, Target("broker", "0"), [], ["segment.msec"])
    with pytest.raises(UsageError, match=r"both set and deleted: segment\.ms"):
        alter_resource_configs(admin, Target("topic", "t"), [("segment.ms", "1")], ["segment.ms"])
    assert len(admin.altered) == 1
    assert Target("broker-defaults", "").resource() == ConfigResource(ConfigResourceType.BROKER, "")


def batch(base_offset: int, values: list[bytes], compression: int = CompressionType.NONE) -> bytes:
    records = [Record(index, 1000 + index, b"k", value, [("h", b"v")]) for index, value in enumerate(values)]
    return build_batch(
        records, base_offset=base_offset, compression=compression, producer_id=7, base_sequence=0
    )


def test_read_segment_batch_by_batch_with_records() -> None:
    first, second = batch(0, [b"a", b"b"]), batch(2, [b"c" * 100], CompressionType.GZIP)
    items = list(read_segment(io.BytesIO(first + second), print_data=True))
    assert all(isinstance(item, DumpedBatch) for item in items)
    dumped = [item for item in items if isinstance(item, DumpedBatch)]
    assert [
        (item.position, item.header.base_offset, item.header.record_count, item.crc_valid) for item in dumped
    ] == [
        (0, 0, 2, True),
        (len(first), 2, 1, True),
    ]
    assert dumped[0].records is not None
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in dumped[0].records] == [
        (0, 1000, b"k", b"a", [("h", b"v")]),
        (1, 1001, b"k", b"b", [("h", b"v")]),
    ]
    assert dumped[1].records is not None and dumped[1].records[0].value == b"c" * 100
    assert next(iter(read_segment(io.BytesIO(first), print_data=False))).records is None  # type: ignore[union-attr]


def test_read_segment_reports_a_bad_crc_and_a_torn_tail() -> None:
    first, second = bytearray(batch(0, [b"a"])), batch(1, [b"b"])
    first[-1] ^= 0xFF
    items = list(read_segment(io.BytesIO(bytes(first) + second[:-3]), print_data=True))
    assert isinstance(items[0], DumpedBatch) and not items[0].crc_valid and items[0].records is None
    assert items[0].error is not None and "CRC" in items[0].error
    assert items[1] == TornTail(
        len(first), len(second) - 3, f"the batch declares {len(second)} bytes, {len(second) - 3} are there"
    )
    assert list(read_segment(io.BytesIO(b"\x00" * 5), print_data=False)) == [
        TornTail(0, 5, "shorter than a batch header")
    ]
    garbage = b"\x00" * 16 + b"\x07" + b"\x00" * 60
    [tail] = read_segment(io.BytesIO(garbage), print_data=False)
    assert (
        isinstance(tail, TornTail) and tail.reason == "magic 7 is not 2" and tail.size_bytes == len(garbage)
    )
