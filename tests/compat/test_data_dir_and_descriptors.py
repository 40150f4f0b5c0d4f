"""A broker's data directory and file descriptors against real ``strom broker`` processes.

* Two brokers on one data directory: the second exits at once with a message naming the directory
  and the first broker's PID, and the first keeps serving its acknowledged records.
* A broker run with a low open-files limit (``prlimit``, soft = hard, so it cannot raise it) and
  driven out of descriptors by connections that hog them keeps serving (a produce that needs a new
  segment gets KAFKA_STORAGE_ERROR or succeeds, never a closed connection or a traceback), is
  killed while exhausted, and restarts on its own data with every acknowledged record.
* A data directory holding more partitions than a low limit's budget still starts and serves every
  partition through a bounded number of descriptors; creating more is refused with
  POLICY_VIOLATION, and nothing of the refused topic is left on disk.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]  # re-exported untyped

from strom.base import limits
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from strom.protocol.messages.delete_topics import DeleteTopicsRequest
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.records import build_batch
from strom.protocol.records.batch import Record
from strom.storage.budget import FileBudget

from .conftest import BrokerProcess, BrokerStartError
from .support import (
    ADMIN_TIMEOUT_S,
    admin_client,
    confluent_produce,
    confluent_producer,
    confluent_read_all,
    create_topic,
    make_records,
    unique_topic,
)
from .wire import WireClient

pytestmark = pytest.mark.compat

LOW_OPEN_FILES = 256
SEGMENT_BYTES = 16 * 1024
ROLLING_VALUE = b"r" * (SEGMENT_BYTES - 1024)
EXHAUSTION_TIMEOUT_S = 30.0
SOCKETS_TO_HOG = LOW_OPEN_FILES + 64


class LimitedBroker(BrokerProcess):
    """A broker whose soft and hard open-files limits are both ``open_files`` (prlimit execs the
    broker, so the PID is the broker's)."""

    def __init__(self, work_dir: Path, open_files: int, settings: dict[str, str] | None = None) -> None:
        super().__init__(work_dir, settings)
        self.open_files = open_files

    def command(self) -> list[str]:
        return ["prlimit", f"--nofile={self.open_files}:{self.open_files}", "--", *super().command()]


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    """Brokers a test starts itself; each is stopped by its PID at the end, whatever happened."""
    started: list[BrokerProcess] = []
    yield started
    for broker in started:
        broker.close()


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def produce_one(client: WireClient, topic: str, partition: int, value: bytes) -> ErrorCode:
    records = build_batch([Record(offset_delta=0, timestamp_delta=0, key=b"k", value=value)])
    request = ProduceRequest(
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=records)],
            )
        ],
    )
    response = client.round_trip(request, ProduceResponse, 9)
    return ErrorCode(response.responses[0].partition_responses[0].error_code)


def create_via_wire(
    client: WireClient, topic: str, partitions: int
) -> CreateTopicsResponse.CreatableTopicResult:
    request = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=1)
        ],
        timeout_ms=10_000,
    )
    result: CreateTopicsResponse.CreatableTopicResult = client.round_trip(
        request, CreateTopicsResponse, 7
    ).topics[0]
    return result


def partition_count(client: WireClient, topic: str) -> int | None:
    """The topic's partitions per Metadata (without creating it), None if it does not exist."""
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False
    )
    found = client.round_trip(request, MetadataResponse, 4).topics[0]
    if found.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return None
    assert found.error_code == ErrorCode.NONE, found
    return len(found.partitions)


def test_a_second_broker_on_the_same_data_directory_is_refused(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    first = BrokerProcess(tmp_path / "first")
    first.work_dir.mkdir()
    brokers.append(first)
    first.start()
    topic = unique_topic("locked")
    create_topic(first.bootstrap, topic)
    records = make_records(500)
    acknowledged = confluent_produce(confluent_producer(first.bootstrap), topic, records)

    second = BrokerProcess(tmp_path / "second")
    second.work_dir.mkdir()
    second.data_dir = first.data_dir  # the operator's slip: the same --data-dir twice
    brokers.append(second)
    with pytest.raises(BrokerStartError):
        second.start()
    assert second.stop() == 1
    log = second.log_text()
    assert f"data directory {first.data_dir} is in use by process {first.pid}" in log
    assert "Traceback" not in log
    # It did not touch the live directory: no recovery ran, and the first broker still serves.
    assert "recover" not in log
    assert first.running
    assert len(confluent_read_all(first.bootstrap, topic, 1)) == len(acknowledged)
    first.restart()  # and its data survives its own restart
    assert len(confluent_read_all(first.bootstrap, topic, 1)) == len(acknowledged)


@contextlib.contextmanager
def hogging_descriptors(broker: BrokerProcess) -> Iterator[list[socket.socket]]:
    """Connections that take every descriptor the broker has left (it accepts each one)."""
    hogs: list[socket.socket] = []
    try:
        deadline = time.monotonic() + EXHAUSTION_TIMEOUT_S
        for _ in range(SOCKETS_TO_HOG):
            hogs.append(socket.create_connection(("127.0.0.1", broker.port), timeout=5))
        while open_descriptors(broker.pid) < LOW_OPEN_FILES - 2:
            assert time.monotonic() < deadline, (
                f"broker holds {open_descriptors(broker.pid)} descriptors, expected about {LOW_OPEN_FILES}"
            )
            time.sleep(0.05)
        yield hogs
    finally:
        for hog in hogs:
            hog.close()


def test_a_broker_out_of_descriptors_keeps_serving_and_restarts_on_its_data(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = LimitedBroker(tmp_path / "limited", LOW_OPEN_FILES)
    broker.work_dir.mkdir()
    brokers.append(broker)
    broker.start()
    topic = unique_topic("fd")
    partitions = 8
    # 16 KiB segments: every 15 KiB produce below needs a new segment file.
    create_topic(broker.bootstrap, topic, partitions, {"segment.bytes": str(SEGMENT_BYTES)})
    records = make_records(2000)
    producer = confluent_producer(broker.bootstrap, batch_size=SEGMENT_BYTES // 2)
    acknowledged = confluent_produce(producer, topic, records)
    del producer  # no client left reconnecting while the broker is down
    with WireClient(broker.port) as client:
        with hogging_descriptors(broker):
            outcomes = {
                produce_one(client, topic, partition % partitions, ROLLING_VALUE) for partition in range(32)
            }
            assert outcomes <= {ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR}, outcomes
            extra = unique_topic("fd-extra")
            created = create_via_wire(client, extra, 4)
            assert created.error_code in (ErrorCode.NONE, ErrorCode.KAFKA_STORAGE_ERROR), created
            if created.error_code != ErrorCode.NONE:
                assert not list(broker.data_dir.glob(f"{extra}-*")), "a refused create left directories"
            extra_created = created.error_code == ErrorCode.NONE
        # Descriptors back: every partition takes appends again (no half-rolled segment).
        deadline = time.monotonic() + EXHAUSTION_TIMEOUT_S
        while open_descriptors(broker.pid) > LOW_OPEN_FILES // 2:
            assert time.monotonic() < deadline, "the broker kept the hogs' descriptors"
            time.sleep(0.05)
        for partition in range(partitions):
            assert produce_one(client, topic, partition, b"after") == ErrorCode.NONE
        # Exhausted again, then killed: the restart must find its data usable.
        with hogging_descriptors(broker):
            broker.kill()
    broker.start()
    read = confluent_read_all(broker.bootstrap, topic, partitions)
    read_at = {(record.partition, record.offset): record.value for record in read}
    for sent in acknowledged:
        assert read_at.get((sent.partition, sent.offset)) == sent.value, f"acknowledged record {sent} lost"
    with WireClient(broker.port) as client:
        for partition in range(partitions):
            assert produce_one(client, topic, partition, b"after restart") == ErrorCode.NONE
        assert partition_count(client, extra) == (4 if extra_created else None)
    assert "Traceback" not in broker.log_text()


def test_more_partitions_than_the_budget_still_start_and_creates_beyond_it_are_refused(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    budget = FileBudget.from_open_files_limit(LOW_OPEN_FILES)
    partitions = budget.partitions_max * 3
    roomy = BrokerProcess(tmp_path / "roomy")
    roomy.work_dir.mkdir()
    brokers.append(roomy)
    roomy.start()
    topic = unique_topic("many")
    create_topic(roomy.bootstrap, topic, partitions)
    with WireClient(roomy.port) as client:
        for partition in range(partitions):
            assert produce_one(client, topic, partition, f"p{partition}".encode()) == ErrorCode.NONE
    roomy.stop()

    limited = LimitedBroker(tmp_path / "limited", LOW_OPEN_FILES)
    limited.work_dir.mkdir()
    limited.data_dir = roomy.data_dir
    brokers.append(limited)
    limited.start()
    assert f"partitions exceed this broker's budget of {budget.partitions_max}" in limited.log_text()
    read = confluent_read_all(limited.bootstrap, topic, partitions)
    assert [(r.partition, r.offset, r.value) for r in read] == [
        (partition, 0, f"p{partition}".encode()) for partition in range(partitions)
    ]
    # Every partition was read, through at most the budget's segment files.
    assert open_descriptors(limited.pid) <= budget.segment_files_max + limits.process_reserved_fds
    refused = unique_topic("refused")
    admin = admin_client(limited.bootstrap)
    futures = admin.create_topics([NewTopic(refused, num_partitions=10_000, replication_factor=1)])
    with pytest.raises(KafkaException) as raised:
        futures[refused].result(ADMIN_TIMEOUT_S)
    error = raised.value.args[0]
    assert error.code() == ErrorCode.POLICY_VIOLATION
    assert f"accepts at most {budget.partitions_max}" in error.str()
    assert not list(limited.data_dir.glob(f"{refused}-*"))
    with WireClient(limited.port) as client:
        assert partition_count(client, refused) is None


def _partition_directories(broker: BrokerProcess, topic: str) -> int:
    return sum(1 for path in broker.data_dir.glob(f"{topic}-*") if path.name.rpartition("-")[2].isdigit())


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + EXHAUSTION_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_create_or_delete_killed_half_way_leaves_all_or_nothing(
    tmp_path: Path, brokers: list[BrokerProcess]
) -> None:
    broker = BrokerProcess(tmp_path / "crashing")
    broker.work_dir.mkdir()
    brokers.append(broker)
    broker.start()
    partitions = 3000
    topic = unique_topic("half")
    with WireClient(broker.port) as client:
        client.send(
            CreateTopicsRequest(
                topics=[
                    CreateTopicsRequest.CreatableTopic(
                        name=topic, num_partitions=partitions, replication_factor=1
                    )
                ],
                timeout_ms=60_000,
            ),
            7,
        )
        _wait_for(lambda: _partition_directories(broker, topic) > partitions // 3, "the create did not start")
        broker.kill()
    broker.start()
    with WireClient(broker.port) as client:
        # Killed before the topic file was written (nearly always: it comes after every
        # directory), the topic does not exist and its directories go; killed after, it is whole.
        committed = partition_count(client, topic)
    assert committed in (None, partitions)
    expected = 0 if committed is None else partitions
    _wait_for(lambda: _partition_directories(broker, topic) == expected, "half-made directories stayed")

    with WireClient(broker.port, timeout_s=60) as client:
        if committed is None:
            assert create_via_wire(client, topic, partitions).error_code == ErrorCode.NONE
        assert produce_one(client, topic, partitions - 1, b"last") == ErrorCode.NONE
        client.send(DeleteTopicsRequest(topic_names=[topic], timeout_ms=60_000), 4)
        _wait_for(lambda: _partition_directories(broker, topic) < partitions, "the delete did not start")
        broker.kill()
    broker.start()
    with WireClient(broker.port) as client:
        assert partition_count(client, topic) is None  # the delete was committed before the renames
    _wait_for(lambda: _partition_directories(broker, topic) == 0, "the deleted directories stayed")
    assert "Traceback" not in broker.log_text()
