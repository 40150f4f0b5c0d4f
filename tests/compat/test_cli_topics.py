"""``strom topics``, ``strom produce`` and ``strom consume`` against a real broker, cross-checked with
confluent-kafka; and the exit code when the cluster cannot be reached."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from strom.cli.main import main
from tests.compat.conftest import BrokerProcess
from tests.compat.support import confluent_producer, confluent_read_all, create_topic, unique_topic

pytestmark = pytest.mark.compat


def run_cli(capsys: pytest.CaptureFixture[str], broker: BrokerProcess, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "--bootstrap-server", broker.bootstrap])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_topics_lifecycle(shared_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    topic = unique_topic("cli-topics")
    code, out, _ = run_cli(
        capsys,
        shared_broker,
        "topics",
        "create",
        topic,
        "--partitions",
        "3",
        "--config",
        "retention.ms=600000",
    )
    assert (code, out) == (0, f"created topic {topic!r}\n")
    code, _, err = run_cli(capsys, shared_broker, "topics", "create", topic, "--partitions", "3")
    assert code == 1 and "already exists" in err

    code, out, _ = run_cli(capsys, shared_broker, "topics", "list", "--output", "json")
    assert code == 0
    assert {"name": topic, "partitions": 3, "internal": False} in json.loads(out)
    code, out, _ = run_cli(capsys, shared_broker, "topics", "list")
    assert [line.split() for line in out.splitlines() if line.startswith(topic)] == [[topic, "3", "no"]]

    producer = confluent_producer(shared_broker.bootstrap)
    for index in range(5):
        producer.produce(topic, value=b"v%d" % index, partition=1)
    assert producer.flush(30) == 0

    code, out, _ = run_cli(capsys, shared_broker, "topics", "describe", topic, "--output", "json")
    [described] = json.loads(out)
    assert described["name"] == topic and described["replication_factor"] == 1
    assert [
        (p["partition"], p["log_start_offset"], p["log_end_offset"]) for p in described["partitions"]
    ] == [
        (0, 0, 0),
        (1, 0, 5),
        (2, 0, 0),
    ]
    assert all(p["leader"] >= 0 and p["isr"] == p["replicas"] for p in described["partitions"])
    # Size on disk from DescribeLogDirs: only partition 1 holds records.
    sizes = [p["size_bytes"] for p in described["partitions"]]
    assert sizes[0] == 0 and sizes[2] == 0 and sizes[1] > 5 * 2
    assert described["size_bytes"] == sizes[1]
    configs = {entry["name"]: entry for entry in described["configs"]}
    assert configs["retention.ms"]["value"] == "600000" and configs["retention.ms"]["set_on_topic"]
    assert not configs["segment.bytes"]["set_on_topic"]

    code, out, _ = run_cli(
        capsys,
        shared_broker,
        "topics",
        "alter",
        topic,
        "--config",
        "segment.ms=3600000",
        "--delete-config",
        "retention.ms",
    )
    assert code == 0
    code, out, _ = run_cli(capsys, shared_broker, "topics", "describe", topic)
    partition_rows = [line.split() for line in out.splitlines()[2:5]]
    assert [row[0] for row in partition_rows] == ["0", "1", "2"] and partition_rows[0][-2:] == ["0", "B"]
    marked = {line.split()[0] for line in out.splitlines() if line.rstrip().endswith("*")}
    assert marked == {"segment.ms"}
    assert out.splitlines()[0].startswith(f"Topic: {topic}  partitions: 3  replication factor: 1")

    code, out, _ = run_cli(capsys, shared_broker, "topics", "delete", topic)
    assert (code, out) == (0, f"deleted topic {topic!r}\n")
    code, out, _ = run_cli(capsys, shared_broker, "topics", "list", "--output", "json")
    assert topic not in {entry["name"] for entry in json.loads(out)}
    code, _, err = run_cli(capsys, shared_broker, "topics", "describe", topic)
    assert code == 1 and topic in err


def test_produce_from_file_and_stdin_read_back_by_confluent(
    shared_broker: BrokerProcess,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    topic = unique_topic("cli-produce")
    create_topic(shared_broker.bootstrap, topic, 2)
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"k1|hello\nk2|world|with|bars\nno-key-here\n")
    code, _, err = run_cli(
        capsys,
        shared_broker,
        "produce",
        topic,
        "--file",
        str(lines),
        "--key-separator",
        "|",
        "--header",
        "source=cli",
        "--header",
        "run=1",
        "--compression",
        "gzip",
        "--partition",
        "1",
    )
    assert code == 0 and err == f"produced 3 of 3 records to {topic!r}\n"
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(b"plain\n\xffbinary\n")))
    code, _, err = run_cli(capsys, shared_broker, "produce", topic, "--partition", "0", "--acks", "1")
    assert code == 0 and "produced 2 of 2" in err

    records = confluent_read_all(shared_broker.bootstrap, topic, 2)
    by_partition = {
        partition: [(r.offset, r.key, r.value, r.headers) for r in records if r.partition == partition]
        for partition in (0, 1)
    }
    headers = [("source", b"cli"), ("run", b"1")]
    assert by_partition[1] == [
        (0, b"k1", b"hello", headers),
        (1, b"k2", b"world|with|bars", headers),
        (2, None, b"no-key-here", headers),
    ]
    assert by_partition[0] == [(0, None, b"plain", []), (1, None, b"\xffbinary", [])]


def test_consume_start_positions_and_formats(
    shared_broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique_topic("cli-consume")
    create_topic(shared_broker.bootstrap, topic, 2)
    producer = confluent_producer(shared_broker.bootstrap)
    base_ms = 1_700_000_000_000
    for index in range(6):
        producer.produce(
            topic,
            value=b"value-%d" % index,
            key=b"key-%d" % index,
            partition=index % 2,
            timestamp=base_ms + index * 1000,
            headers=[("n", str(index).encode())],
        )
    producer.produce(topic, value=b"\xfe\x00", partition=0, timestamp=base_ms + 10_000)
    assert producer.flush(30) == 0
    quick = ("--timeout-ms", "1500")

    code, out, err = run_cli(
        capsys, shared_broker, "consume", topic, "--from-beginning", "--format", "json", *quick
    )
    assert code == 0 and err == "consumed 7 records\n"
    records = [json.loads(line) for line in out.splitlines()]
    assert sorted((r["partition"], r["offset"]) for r in records) == [
        (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2)
    ]  # fmt: skip
    first = next(r for r in records if (r["partition"], r["offset"]) == (1, 0))
    assert first == {
        "topic": topic,
        "partition": 1,
        "offset": 0,
        "timestamp": base_ms + 1000,
        "key": "key-1",
        "value": "value-1",
        "headers": [{"key": "n", "value": "1"}],
    }
    assert next(r for r in records if r["offset"] == 3)["value"] == "\\xfe\x00"

    code, out, _ = run_cli(
        capsys,
        shared_broker,
        "consume",
        topic,
        "--partition",
        "0",
        "--offset",
        "1",
        "--format",
        "key-value",
        *quick,
    )
    assert out.splitlines() == ["key-2\tvalue-2", "key-4\tvalue-4", "null\t\\xfe\x00"]

    code, out, _ = run_cli(
        capsys, shared_broker, "consume", topic, "--from-timestamp", str(base_ms + 3000), *quick
    )
    assert sorted(out.splitlines()) == sorted(["value-3", "value-4", "value-5", "\\xfe\x00"])
    code, out, _ = run_cli(
        capsys, shared_broker, "consume", topic, "--from-timestamp", "2023-11-14T22:13:24Z", *quick
    )
    assert sorted(out.splitlines()) == sorted(["value-4", "value-5", "\\xfe\x00"])

    code, out, err = run_cli(
        capsys, shared_broker, "consume", topic, "--from-beginning", "--partition", "1", "--max-messages", "2"
    )
    assert (code, out, err) == (0, "value-1\nvalue-3\n", "consumed 2 records\n")

    # The default starts at the end: nothing old is printed, and the idle timeout ends the run.
    code, out, err = run_cli(capsys, shared_broker, "consume", topic, "--timeout-ms", "500")
    assert (code, out, err) == (0, "", "consumed 0 records\n")
