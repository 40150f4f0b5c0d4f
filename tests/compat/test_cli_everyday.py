"""The everyday commands Kafka users reach for, run as the real ``strom`` executable against a real
broker and cross-checked with confluent-kafka (librdkafka): configs of topics and brokers,
delete-records, several topics deleted at once, consume of several topics / a regex / to a bound /
in a kcat-like format, produce with per-line headers and timestamps, and ``log dump`` of a live
segment."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]  # re-exported untyped

from tests.compat.cli_support import Finished, run_strom
from tests.compat.conftest import BrokerProcess
from tests.compat.support import (
    ADMIN_TIMEOUT_S,
    admin_client,
    confluent_producer,
    create_topic,
    unique_topic,
)

pytestmark = pytest.mark.compat

BASE_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return {"group.initial.rebalance.delay.ms": "0"}


def strom(broker: BrokerProcess, *argv: str, stdin: bytes | str | None = None) -> Finished:
    return run_strom(*argv, "--bootstrap-server", broker.bootstrap, stdin=stdin)


def ok(finished: Finished) -> Finished:
    assert finished.returncode == 0, finished
    return finished


def topic_configs(bootstrap: str, topic: str) -> dict[str, tuple[str, bool]]:
    """confluent-kafka's view: name -> (value, set on the topic)."""
    resource = ConfigResource("topic", topic)
    admin = admin_client(bootstrap)  # kept alive until the result is in: dropping it cancels the request
    described = admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    return {name: (entry.value, not entry.is_default) for name, entry in described.items()}


def produce_keyed(bootstrap: str, topic: str, partition: int, count: int, start_ms: int = BASE_MS) -> None:
    producer = confluent_producer(bootstrap)
    for index in range(count):
        producer.produce(
            topic,
            key=b"k%d" % index,
            value=b"v%d" % index,
            partition=partition,
            timestamp=start_ms + index * 1000,
            headers=[("n", str(index).encode())],
        )
    assert producer.flush(30) == 0


def read_with_confluent(bootstrap: str, topic: str, partitions: int) -> list[dict[str, Any]]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "broker.address.family": "v4",
            "group.id": "cli-everyday-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, 0) for partition in range(partitions)])
        records: list[dict[str, Any]] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                if message.error() is not None:
                    at_end.add(message.partition())
                    continue
                records.append(
                    {
                        "partition": message.partition(),
                        "offset": message.offset(),
                        "timestamp": message.timestamp()[1],
                        "key": message.key(),
                        "value": message.value(),
                        "headers": list(message.headers() or []),
                    }
                )
        assert len(at_end) == partitions, "did not reach the end of every partition"
        return sorted(records, key=lambda record: (record["partition"], record["offset"]))
    finally:
        consumer.close()


# -- configs -------------------------------------------------------------------------------------------


def test_configs_of_a_group(shared_broker: BrokerProcess) -> None:
    group = f"cli-group-{uuid.uuid4().hex[:8]}"
    described = ok(strom(shared_broker, "configs", "describe", "--group", group))
    assert described.stdout == f"no configs set on group {group!r} (--all shows every config)\n"
    altered = ok(
        strom(
            shared_broker,
            *("configs", "alter", "--group", group, "--add-config", "consumer.heartbeat.interval.ms=6000"),
        )
    )
    assert altered.stdout == f"set consumer.heartbeat.interval.ms=6000 on group {group!r}\n"
    described = ok(strom(shared_broker, "configs", "describe", "--group", group, "--all", "--output", "json"))
    assert {
        (row["name"], row["value"], row["source"]) for row in json.loads(described.stdout)["configs"]
    } == {
        ("consumer.heartbeat.interval.ms", "6000", "group"),
        ("consumer.session.timeout.ms", "45000", "default"),
    }
    refused = strom(
        shared_broker, "configs", "alter", "--group", group, "--add-config", "session.timeout.ms=1"
    )
    assert refused.returncode != 0 and "has no config 'session.timeout.ms'" in refused.stderr
    deleted = ok(
        strom(
            shared_broker,
            "configs",
            "alter",
            "--group",
            group,
            "--delete-config",
            "consumer.heartbeat.interval.ms",
        )
    )
    assert deleted.stdout.startswith("deleted consumer.heartbeat.interval.ms from group")


def test_configs_of_a_topic(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("cli-configs")
    create_topic(shared_broker.bootstrap, topic, 1)
    described = ok(strom(shared_broker, "configs", "describe", "--topic", topic))
    assert described.stdout == f"no configs set on topic {topic!r} (--all shows every config)\n"

    altered = ok(
        strom(
            shared_broker,
            *("configs", "alter", "--topic", topic),
            *("--add-config", "retention.ms=60000,cleanup.policy=[compact,delete]"),
            *("--add-config", "segment.ms=3600000"),
        )
    )
    assert altered.stdout.splitlines() == [
        f"set retention.ms=60000 on topic {topic!r}",
        f"set cleanup.policy=compact,delete on topic {topic!r}",
        f"set segment.ms=3600000 on topic {topic!r}",
    ]
    seen = topic_configs(shared_broker.bootstrap, topic)
    assert seen["retention.ms"] == ("60000", True)
    assert seen["cleanup.policy"] == ("compact,delete", True)
    described = ok(strom(shared_broker, "configs", "describe", "--topic", topic, "--output", "json"))
    assert {
        (row["name"], row["value"], row["source"]) for row in json.loads(described.stdout)["configs"]
    } == {
        ("cleanup.policy", "compact,delete", "topic"),
        ("retention.ms", "60000", "topic"),
        ("segment.ms", "3600000", "topic"),
    }
    every = json.loads(
        ok(strom(shared_broker, "configs", "describe", "--topic", topic, "--all", "--output", "json")).stdout
    )
    assert len(every["configs"]) > 10 and any(
        row["name"] == "max.message.bytes" and not row["set"] for row in every["configs"]
    )

    # Delete: back to what it inherits; other configs untouched (IncrementalAlterConfigs).
    deleted = ok(
        strom(
            shared_broker, "configs", "alter", "--topic", topic, "--delete-config", "retention.ms,segment.ms"
        )
    )
    assert deleted.stdout.splitlines() == [
        f"deleted retention.ms from topic {topic!r} (back to what it inherits)",
        f"deleted segment.ms from topic {topic!r} (back to what it inherits)",
    ]
    seen = topic_configs(shared_broker.bootstrap, topic)
    assert not seen["retention.ms"][1] and seen["cleanup.policy"] == ("compact,delete", True)
    not_set = ok(
        strom(shared_broker, "configs", "alter", "--topic", topic, "--delete-config", "retention.ms")
    )
    assert not_set.stdout == f"retention.ms was not set on topic {topic!r}: nothing to delete\n"

    # Unknown names are refused, with the names meant; the topic keeps its configs.
    for option in ("--delete-config", "--add-config"):
        value = "retention.msec" if option == "--delete-config" else "retention.msec=5"
        refused = strom(shared_broker, "configs", "alter", "--topic", topic, option, value)
        assert refused.returncode == 1
        assert refused.stderr == (
            f"strom: error: topic {topic!r} has no config 'retention.msec' (did you mean retention.ms, "
            "retention.bytes, delete.retention.ms?)\n"
        )
    refused = strom(shared_broker, "topics", "alter", topic, "--delete-config", "cleanup.polcy")
    assert (
        refused.returncode == 1
        and "has no config 'cleanup.polcy' (did you mean cleanup.policy" in refused.stderr
    )
    assert topic_configs(shared_broker.bootstrap, topic)["cleanup.policy"] == ("compact,delete", True)

    # A value the broker refuses: its reason in words, the code's name, and what to do.
    bad = strom(shared_broker, "configs", "alter", "--topic", topic, "--add-config", "retention.ms=soon")
    assert bad.returncode == 1 and "(INVALID_CONFIG)" in bad.stderr and "strom configs describe" in bad.stderr

    validated = ok(
        strom(
            shared_broker,
            "configs",
            "alter",
            "--topic",
            topic,
            "--add-config",
            "retention.ms=1",
            "--validate-only",
        )
    )
    assert validated.stdout == f"would set retention.ms=1 on topic {topic!r}\n"
    assert not topic_configs(shared_broker.bootstrap, topic)["retention.ms"][1]

    missing = strom(shared_broker, "configs", "describe", "--topic", "no-such-topic-here")
    assert missing.returncode == 1
    assert "no-such-topic-here" in missing.stderr and "`strom topics list` shows the topics" in missing.stderr


def test_configs_of_a_broker(shared_broker: BrokerProcess) -> None:
    every = json.loads(
        ok(strom(shared_broker, "configs", "describe", "--broker", "0", "--all", "--output", "json")).stdout
    )
    assert every["resource"] == "broker" and every["name"] == "0"
    names = {row["name"] for row in every["configs"]}
    assert {"log.retention.ms", "num.partitions"} <= names or {"num.partitions"} <= names
    ok(strom(shared_broker, "configs", "describe", "--broker", "0"))
    ok(strom(shared_broker, "configs", "describe", "--broker-defaults"))

    # A name the broker does not have is refused before anything is sent.
    refused = strom(shared_broker, "configs", "alter", "--broker", "0", "--add-config", "num.partitons=3")
    assert refused.returncode == 1
    assert "broker 0 has no config 'num.partitons' (did you mean num.partitions" in refused.stderr

    # A dynamic broker config: it shows as set on broker 0, and deleting it puts the static value back.
    altered = ok(
        strom(shared_broker, "configs", "alter", "--broker", "0", "--add-config", "log.retention.ms=7200000")
    )
    assert altered.stdout == "set log.retention.ms=7200000 on broker 0\n"
    dynamic = json.loads(
        ok(strom(shared_broker, "configs", "describe", "--broker", "0", "--output", "json")).stdout
    )
    assert ("log.retention.ms", "7200000", "dynamic-broker") in {
        (row["name"], row["value"], row["source"]) for row in dynamic["configs"]
    }
    ok(strom(shared_broker, "configs", "alter", "--broker", "0", "--delete-config", "log.retention.ms"))
    dynamic = json.loads(
        ok(strom(shared_broker, "configs", "describe", "--broker", "0", "--output", "json")).stdout
    )
    assert "log.retention.ms" not in {row["name"] for row in dynamic["configs"]}


def test_configs_of_the_broker_defaults(start_broker: Callable[..., BrokerProcess]) -> None:
    """The cluster-wide default (resource ''): set, shown as dynamic-default-broker, kept across a restart."""
    broker = start_broker()
    ok(strom(broker, "configs", "alter", "--broker-defaults", "--add-config", "log.segment.bytes=2097152"))
    broker.restart()
    rows = json.loads(
        ok(strom(broker, "configs", "describe", "--broker-defaults", "--output", "json")).stdout
    )["configs"]
    assert ("log.segment.bytes", "2097152", "dynamic-default-broker") in {
        (row["name"], row["value"], row["source"]) for row in rows
    }
    ok(strom(broker, "configs", "alter", "--broker-defaults", "--delete-config", "log.segment.bytes"))
    rows = json.loads(
        ok(strom(broker, "configs", "describe", "--broker-defaults", "--output", "json")).stdout
    )["configs"]
    assert "log.segment.bytes" not in {row["name"] for row in rows}


# -- topics --------------------------------------------------------------------------------------------


def test_delete_records_moves_the_log_start(shared_broker: BrokerProcess, tmp_path: Path) -> None:
    topic = unique_topic("cli-delete-records")
    create_topic(shared_broker.bootstrap, topic, 2)
    for partition in (0, 1):
        produce_keyed(shared_broker.bootstrap, topic, partition, 10)

    deleted = ok(
        strom(shared_broker, "topics", "delete-records", f"{topic}:0", "--before", "4", "--output", "json")
    )
    assert json.loads(deleted.stdout) == [{"topic": topic, "partition": 0, "log_start_offset": 4}]
    values = ok(
        strom(shared_broker, "consume", topic, "--partition", "0", "--offset", "earliest", "--until", "end")
    )
    assert values.stdout.splitlines() == [f"v{index}" for index in range(4, 10)]

    plan = tmp_path / "offsets.json"
    plan.write_text(
        json.dumps({"partitions": [{"topic": topic, "partition": 1, "offset": -1}], "version": 1})
    )
    deleted = ok(strom(shared_broker, "topics", "delete-records", "--offset-json-file", str(plan)))
    assert deleted.stdout.splitlines()[1].split() == [topic, "1", "10"]
    described = json.loads(ok(strom(shared_broker, "topics", "describe", topic, "--output", "json")).stdout)
    assert [(p["log_start_offset"], p["log_end_offset"]) for p in described[0]["partitions"]] == [
        (4, 10),
        (10, 10),
    ]

    beyond = strom(shared_broker, "topics", "delete-records", f"{topic}:0", "--before", "11")
    assert beyond.returncode == 1 and "ends at offset 10" in beyond.stderr


def test_deleting_several_topics_names_each_outcome(shared_broker: BrokerProcess) -> None:
    first, second = unique_topic("cli-del-a"), unique_topic("cli-del-b")
    for topic in (first, second):
        create_topic(shared_broker.bootstrap, topic, 1)
    finished = strom(shared_broker, "topics", "delete", first, "no-such-topic-x", second)
    assert finished.returncode == 1
    assert finished.stdout.splitlines() == [f"deleted topic {first!r}", f"deleted topic {second!r}"]
    assert finished.stderr_lines == [
        "not deleted: delete topic 'no-such-topic-x': no such topic or partition (UNKNOWN_TOPIC_OR_PARTITION); "
        "`strom topics list` shows the topics there are",
        "strom: error: 2 of 3 topics deleted",
    ]
    listed = json.loads(ok(strom(shared_broker, "topics", "list", "--output", "json")).stdout)
    assert not {first, second} & {row["name"] for row in listed}


# -- consume -------------------------------------------------------------------------------------------


def test_consume_several_topics_a_regex_and_bounds(shared_broker: BrokerProcess) -> None:
    prefix = f"cli-many-{uuid.uuid4().hex[:6]}"
    first, second, other = f"{prefix}-a", f"{prefix}-b", f"x{prefix}-c"
    for topic in (first, second, other):
        create_topic(shared_broker.bootstrap, topic, 1)
        produce_keyed(shared_broker.bootstrap, topic, 0, 5)

    both = ok(
        strom(
            shared_broker,
            "consume",
            first,
            second,
            "--offset",
            "earliest",
            "--format",
            "%t:%o %k=%s",
            "--until",
            "end",
        )
    )
    assert sorted(both.stdout.splitlines()) == sorted(
        f"{topic}:{index} k{index}=v{index}" for topic in (first, second) for index in range(5)
    )
    # --include matches whole names: x{prefix}-c does not match {prefix}-.*
    matched = ok(
        strom(
            shared_broker,
            "consume",
            "--include",
            f"{prefix}-.*",
            "--from-beginning",
            "--format",
            "%t",
            "--until",
            "end",
        )
    )
    assert sorted(set(matched.stdout.splitlines())) == [first, second]
    assert matched.stderr == "consumed 10 records\n"

    # Bounds: end (and exit without waiting), an offset, a time.
    ended = ok(strom(shared_broker, "consume", first, "--from-beginning", "--until", "end"))
    assert (
        ended.stdout.splitlines() == [f"v{index}" for index in range(5)]
        and ended.stderr == "consumed 5 records\n"
    )
    below = ok(strom(shared_broker, "consume", first, "--from-beginning", "--until", "3"))
    assert below.stdout.splitlines() == ["v0", "v1", "v2"]
    before_time = ok(
        strom(shared_broker, "consume", first, "--from-beginning", "--until", f"@{BASE_MS + 2000}")
    )
    assert before_time.stdout.splitlines() == ["v0", "v1"]
    iso = "2023-11-14T22:13:22Z"  # BASE_MS + 2 s
    assert ok(
        strom(shared_broker, "consume", first, "--from-beginning", "--until", iso)
    ).stdout.splitlines() == ["v0", "v1"]
    from_three = ok(
        strom(shared_broker, "consume", first, "--partition", "0", "--offset", "3", "--until", "end")
    )
    assert from_three.stdout.splitlines() == ["v3", "v4"]
    at_end = ok(strom(shared_broker, "consume", first, "--offset", "latest", "--until", "end"))
    assert (at_end.stdout, at_end.stderr) == ("", "consumed 0 records\n")

    # With a group: bounded, and what was printed is committed.
    group = f"cli-until-{uuid.uuid4().hex[:6]}"
    grouped = ok(
        strom(shared_broker, "consume", first, "--group", group, "--from-beginning", "--until", "end")
    )
    assert grouped.stdout.splitlines() == [f"v{index}" for index in range(5)]
    [described] = json.loads(ok(strom(shared_broker, "groups", "describe", group, "--output", "json")).stdout)
    assert [(row["committed_offset"], row["lag"]) for row in described["offsets"]] == [(5, 0)]

    nothing = strom(shared_broker, "consume", "--include", f"{prefix}-none.*")
    assert nothing.returncode == 1 and "no topic matches --include" in nothing.stderr
    missing = strom(shared_broker, "consume", "no-such-topic-y", "--group", group)
    assert missing.returncode == 1
    assert missing.stderr_lines == [
        "strom: error: topic 'no-such-topic-y': no such topic or partition (UNKNOWN_TOPIC_OR_PARTITION); "
        "`strom topics list` shows the topics there are"
    ]


def test_consume_formats_and_binary_encodings(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("cli-format")
    create_topic(shared_broker.bootstrap, topic, 1)
    producer = confluent_producer(shared_broker.bootstrap)
    producer.produce(
        topic, key=b"\x00\xff", value=b"\xfe\x01bin", timestamp=BASE_MS, headers=[("h", b"\xff")]
    )
    producer.produce(topic, key=None, value=None, timestamp=BASE_MS + 1)
    assert producer.flush(30) == 0
    base = ("consume", topic, "--from-beginning", "--until", "end")

    kcat = ok(strom(shared_broker, *base, "--format", r"%p@%o %T %K/%S %k|%s|%h\n", "--encoding", "hex"))
    assert kcat.stdout.splitlines() == [
        f"0@0 {BASE_MS} 2/5 00ff|fe0162696e|h=ff",
        f"0@1 {BASE_MS + 1} -1/-1 ||",
    ]
    as_json = ok(strom(shared_broker, *base, "--format", "json", "--encoding", "base64"))
    first, second = (json.loads(line) for line in as_json.stdout.splitlines())
    assert (
        base64.b64decode(first["key"]) == b"\x00\xff" and base64.b64decode(first["value"]) == b"\xfe\x01bin"
    )
    assert first["headers"] == [{"key": "h", "value": base64.b64encode(b"\xff").decode()}]
    assert (second["key"], second["value"]) == (None, None)
    text = ok(strom(shared_broker, *base, "--format", "key-value"))
    # Text shows UTF-8 as it is (NUL and \x01 are UTF-8) and escapes only what is not.
    assert text.stdout.splitlines() == ["\x00\\xff\t\\xfe\x01bin", "null\tnull"]


# -- produce -------------------------------------------------------------------------------------------


def test_produce_per_line_headers_timestamps_and_a_json_round_trip(shared_broker: BrokerProcess) -> None:
    source, copy = unique_topic("cli-produce-src"), unique_topic("cli-produce-copy")
    create_topic(shared_broker.bootstrap, source, 2)
    create_topic(shared_broker.bootstrap, copy, 2)

    lines = "a:1,b:two\tk1\tfirst\n\tk2\tsecond\nc:\tk3\tthird\n"
    produced = strom(
        shared_broker,
        *("produce", source, "--parse-headers", "--key-separator", "\t", "--partition", "1"),
        *("--timestamp", str(BASE_MS), "--header", "src=cli", "-X", "linger.ms=50", "-X", "batch.size=32768"),
        stdin=lines,
    )
    assert produced.returncode == 0 and produced.stderr == f"produced 3 of 3 records to {source!r}\n"
    records = read_with_confluent(shared_broker.bootstrap, source, 2)
    assert [(r["partition"], r["key"], r["value"], r["headers"], r["timestamp"]) for r in records] == [
        (1, b"k1", b"first", [("a", b"1"), ("b", b"two"), ("src", b"cli")], BASE_MS),
        (1, b"k2", b"second", [("src", b"cli")], BASE_MS),
        (1, b"k3", b"third", [("c", b""), ("src", b"cli")], BASE_MS),
    ]
    broken = strom(shared_broker, "produce", source, "--parse-headers", stdin="nodelimiter\n")
    assert broken.returncode == 1
    assert broken.stderr_lines[-1] == "strom: error: line 1: no headers delimiter '\\t' in the line"

    # What consume prints as JSON, produce takes back: keys, values, headers, timestamps, partitions.
    producer = confluent_producer(shared_broker.bootstrap)
    producer.produce(
        source, key=b"\x00", value=b"\xff\xfe", partition=0, timestamp=BASE_MS + 5, headers=[("x", b"\x01")]
    )
    producer.produce(source, key=None, value=None, partition=0, timestamp=BASE_MS + 6)
    assert producer.flush(30) == 0
    exported = ok(
        strom(
            shared_broker,
            "consume",
            source,
            "--from-beginning",
            "--until",
            "end",
            "--format",
            "json",
            "--encoding",
            "base64",
        )
    )
    imported = strom(
        shared_broker,
        "produce",
        copy,
        "--input-format",
        "json",
        "--encoding",
        "base64",
        stdin=exported.stdout,
    )
    assert imported.returncode == 0 and imported.stderr == f"produced 5 of 5 records to {copy!r}\n"
    assert read_with_confluent(shared_broker.bootstrap, copy, 2) == read_with_confluent(
        shared_broker.bootstrap, source, 2
    )


# -- groups --------------------------------------------------------------------------------------------


def test_groups_describe_several_delete_offsets_and_reset_from_an_exported_plan(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = unique_topic("cli-group-tools")
    create_topic(shared_broker.bootstrap, topic, 2)
    for partition in (0, 1):
        produce_keyed(shared_broker.bootstrap, topic, partition, 6)
    first, second = (f"cli-tools-{uuid.uuid4().hex[:6]}" for _ in range(2))
    for group, count in ((first, "7"), (second, "12")):
        ok(
            strom(
                shared_broker, "consume", topic, "--group", group, "--from-beginning", "--max-messages", count
            )
        )

    both = json.loads(
        ok(strom(shared_broker, "groups", "describe", first, second, "--output", "json")).stdout
    )
    assert [(group["group"], group["total_lag"]) for group in both] == [(first, 5), (second, 0)]
    every = json.loads(
        ok(strom(shared_broker, "groups", "describe", "--all-groups", "--output", "json")).stdout
    )
    assert {first, second} <= {group["group"] for group in every}

    # Snapshot the first group's offsets, move them, then restore the snapshot.
    snapshot = ok(
        strom(shared_broker, "groups", "reset-offsets", first, "--all-topics", "--to-current", "--export")
    )
    rows = sorted(snapshot.stdout.splitlines())
    assert len(rows) == 2 and all(row.startswith(f"{topic},") for row in rows)
    plan = tmp_path / "plan.csv"
    plan.write_text(snapshot.stdout)
    ok(strom(shared_broker, "groups", "reset-offsets", first, "--topic", topic, "--to-earliest", "--execute"))
    [moved] = json.loads(ok(strom(shared_broker, "groups", "describe", first, "--output", "json")).stdout)
    assert moved["total_lag"] == 12
    restored = ok(
        strom(
            shared_broker,
            "groups",
            "reset-offsets",
            first,
            "--from-file",
            str(plan),
            "--execute",
            "--output",
            "json",
        )
    )
    assert json.loads(restored.stdout)["executed"] is True
    [back] = json.loads(ok(strom(shared_broker, "groups", "describe", first, "--output", "json")).stdout)
    assert back["total_lag"] == 5
    by_duration = ok(
        strom(
            shared_broker,
            "groups",
            "reset-offsets",
            first,
            "--topic",
            topic,
            "--by-duration",
            "P36500D",
            "--output",
            "json",
        )
    )
    assert {row["new_offset"] for row in json.loads(by_duration.stdout)["partitions"]} == {0}  # a dry run

    deleted = ok(
        strom(shared_broker, "groups", "delete-offsets", second, "--topic", f"{topic}:1", "--output", "json")
    )
    assert json.loads(deleted.stdout)["partitions"] == [{"topic": topic, "partition": 1, "deleted_offset": 6}]
    [after] = json.loads(ok(strom(shared_broker, "groups", "describe", second, "--output", "json")).stdout)
    assert [row["partition"] for row in after["offsets"]] == [0]


# -- log dump ------------------------------------------------------------------------------------------


def test_log_dump_of_a_live_segment(shared_broker: BrokerProcess, tmp_path: Path) -> None:
    topic = unique_topic("cli-dump")
    create_topic(shared_broker.bootstrap, topic, 1)
    producer = confluent_producer(shared_broker.bootstrap, compression_type="lz4")
    # Values that compress: librdkafka sends a batch uncompressed when compressing does not make it smaller.
    filler = b"x" * 200
    for index in range(3):
        producer.produce(
            topic,
            key=b"k%d" % index,
            value=b"v%d" % index + filler,
            timestamp=BASE_MS + index,
            headers=[("i", b"%d" % index)],
        )
    assert producer.flush(30) == 0
    producer.produce(topic, value=b"\xff" + filler, timestamp=BASE_MS + 9)
    assert producer.flush(30) == 0
    segment = shared_broker.data_dir / f"{topic}-0" / f"{0:020d}.log"

    dumped = json.loads(ok(run_strom("log", "dump", str(segment), "--print-data", "--output", "json")).stdout)
    [dump] = dumped
    assert dump["torn_tail"] is None
    assert [(b["base_offset"], b["count"], b["compression"], b["crc_valid"]) for b in dump["batches"]] == [
        (0, 3, "lz4", True),
        (3, 1, "lz4", True),
    ]
    records = [record for batch in dump["batches"] for record in batch["records"]]
    text_filler = filler.decode()
    assert [(r["offset"], r["timestamp"], r["key"], r["value"]) for r in records] == [
        (0, BASE_MS, "k0", "v0" + text_filler), (1, BASE_MS + 1, "k1", "v1" + text_filler),
        (2, BASE_MS + 2, "k2", "v2" + text_filler), (3, BASE_MS + 9, None, "\\xff" + text_filler),
    ]  # fmt: skip
    assert records[1]["headers"] == [{"key": "i", "value": "1"}]
    text = ok(run_strom("log", "dump", str(segment), "--print-data")).stdout.splitlines()
    assert text[:2] == [f"Dumping {segment}", "Log starting offset: 0"]
    assert text[2].startswith("baseOffset: 0 lastOffset: 2 count: 3 ") and "compresscodec: lz4" in text[2]
    assert text[3].startswith(f"| offset: 0 CreateTime: {BASE_MS} keySize: 2 valueSize: 202 ")

    # A flipped byte fails the CRC; a cut-off tail is reported, not a crash.
    damaged = tmp_path / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[70] ^= 0xFF
    damaged.write_bytes(bytes(data[:-5]))
    [report] = json.loads(ok(run_strom("log", "dump", str(damaged), "--output", "json")).stdout)
    assert [batch["crc_valid"] for batch in report["batches"]] == [False]
    assert report["torn_tail"]["reason"].startswith("the batch declares")
    wrong = run_strom("log", "dump", str(tmp_path / "x.txt"))
    assert wrong.returncode == 2 and "a segment (.log) or an index" in wrong.stderr
