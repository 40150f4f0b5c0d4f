"""Admin file work runs in the broker's worker threads, never on the event loop's thread, with the
answers it always gave (the handlers await the worker, the loop swaps the result in); running out
of file descriptors costs one request a KAFKA_STORAGE_ERROR, never the connection."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.broker.server import BrokerServer
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.create_partitions import CreatePartitionsRequest
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.delete_records import DeleteRecordsRequest
from strom.protocol.messages.delete_topics import DeleteTopicsRequest
from strom.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from strom.storage import LogManager, PartitionLog
from strom.storage import compaction as compaction_module
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import batch, create_topic, fetch, produce

Threads = dict[str, set[str]]


@pytest.fixture
def threads_of(monkeypatch: pytest.MonkeyPatch) -> Iterator[Threads]:
    """Which threads ran each piece of file work (name -> thread names)."""
    seen: Threads = {}

    def spy(owner: Any, name: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            seen.setdefault(name, set()).add(threading.current_thread().name)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, recorded)

    for name in ("build_create", "remove_topic_files", "write_topic_file"):
        spy(LogManager, name)
    spy(PartitionLog, "flush")
    yield seen


def test_create_grow_alter_and_delete_do_their_file_work_in_worker_threads(
    broker: InProcessBroker, threads_of: Threads
) -> None:
    create_topic(broker, "t", 3)
    grow = CreatePartitionsRequest(
        topics=[CreatePartitionsRequest.CreatePartitionsTopic(name="t", count=5, assignments=None)],
        timeout_ms=1000,
    )
    assert broker.call(grow, 3).results[0].error_code == ErrorCode.NONE
    alter = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=2,
                resource_name="t",
                configs=[
                    IncrementalAlterConfigsRequest.AlterableConfig(
                        name="retention.ms", config_operation=0, value="1000"
                    )
                ],
            )
        ]
    )
    assert broker.call(alter, 1).responses[0].error_code == ErrorCode.NONE
    assert broker.server.state.logs.topic("t").config.retention_ms == 1000  # type: ignore[union-attr]
    deleted = broker.call(DeleteTopicsRequest(topic_names=["t"], timeout_ms=1000), 4)
    assert deleted.responses[0].error_code == ErrorCode.NONE
    assert broker.server.state.logs.topic("t") is None
    assert threads_of["build_create"] == {"strom-admin_0"}
    assert threads_of["write_topic_file"] == {"strom-admin_0"}
    assert threads_of["remove_topic_files"] == {"strom-admin_0"}


def test_delete_records_writes_the_new_start_in_the_fsync_thread(
    broker: InProcessBroker, threads_of: Threads
) -> None:
    create_topic(broker, "r", 1, **{"segment.bytes": "200"})
    for _ in range(3):
        assert produce(broker, "r", batch([b"x" * 40])).error_code == ErrorCode.NONE
    request = DeleteRecordsRequest(
        topics=[
            DeleteRecordsRequest.DeleteRecordsTopic(
                name="r",
                partitions=[DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=2)],
            )
        ],
        timeout_ms=1000,
    )
    assert broker.call(request, 2).topics[0].partitions[0].low_watermark == 2
    assert broker.server.state.logs.log("r", 0).segment_base_offsets == [2]  # type: ignore[union-attr]
    assert threads_of["flush"] == {"strom-fsync_0"}


def test_budget_refusals_are_policy_violations_with_the_reason(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path / "data")
    try:
        budget = broker.server.state.logs.budget
        request = CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(
                    name="huge", num_partitions=min(budget.partitions_max + 1, 10_000), replication_factor=1
                )
            ],
            timeout_ms=1000,
        )
        if budget.partitions_max >= 10_000:
            pytest.fail("the test process's open files limit is too high for this test")
        result = broker.call(request, 7).topics[0]
        assert result.error_code == ErrorCode.POLICY_VIOLATION
        assert "accepts at most" in (result.error_message or "")
        assert not (tmp_path / "data" / "huge-0").exists()
    finally:
        broker.close()


def test_housekeeping_compacts_in_the_background_thread(
    broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran_in: set[str] = set()
    original = compaction_module.run_compaction

    def recorded(job: Any) -> Any:
        ran_in.add(threading.current_thread().name)
        return original(job)

    monkeypatch.setattr("strom.broker.state.run_compaction", recorded)
    create_topic(broker, "c", 1, **{"cleanup.policy": "compact", "segment.bytes": "80"})
    for value in (b"1", b"2", b"3"):
        assert produce(broker, "c", batch([value])).error_code == ErrorCode.NONE
    assert broker.server.state.logs.log("c", 0).segment_count == 3  # type: ignore[union-attr]
    server: BrokerServer = broker.server
    broker.loop.run_until_complete(server.state.run_housekeeping())
    assert ran_in == {"strom-background_0"}


def test_out_of_descriptors_at_a_roll_answers_kafka_storage_error_then_recovers(
    broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_topic(broker, "roll", 1, **{"segment.bytes": "200"})
    assert produce(broker, "roll", batch([b"x" * 40])).error_code == ErrorCode.NONE
    real_open = os.open

    def exhausted(path: Any, flags: int, mode: int = 0o777) -> int:
        if str(path).endswith(f"{1:020d}.log"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", exhausted)
    refused = produce(broker, "roll", batch([b"y" * 40]))  # needs the segment at offset 1
    assert refused.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert "Too many open files" in (refused.error_message or "")
    monkeypatch.undo()
    accepted = produce(broker, "roll", batch([b"z" * 40]))
    assert accepted.error_code == ErrorCode.NONE and accepted.base_offset == 1


def test_a_fetch_that_cannot_open_its_segment_answers_kafka_storage_error(
    broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_topic(broker, "read")
    assert produce(broker, "read", batch([b"a"])).error_code == ErrorCode.NONE
    broker.server.state.logs.files.close_all()  # nothing cached: the fetch must open the file
    real_open = os.open

    def exhausted(path: Any, flags: int, mode: int = 0o777) -> int:
        if str(path).endswith(".log"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", exhausted)
    refused = fetch(broker, "read", 0).responses[0].partitions[0]
    assert refused.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    monkeypatch.undo()
    served = fetch(broker, "read", 0).responses[0].partitions[0]
    assert served.error_code == ErrorCode.NONE and served.records
