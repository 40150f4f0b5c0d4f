"""The pure half of the archive's start-up check: which state a directory is in, and the
checkpoint files written when a lost checkpoint is rebuilt (no Spark, no broker). The rebuilt
checkpoint running on a real Spark is in test_pipelines."""

from __future__ import annotations

import json

import pytest

from strom.spark.archive_state import (
    ArchiveStart,
    ArchiveStateError,
    batch_ids,
    checkpoint_files,
    plan_archive_start,
)


def test_batch_ids_are_read_from_spark_log_file_names() -> None:
    names = ["0", "1", ".1.crc", "9.compact", "10", ".10.tmp", "_temporary", "11.compact.crc"]
    assert batch_ids(names) == [0, 1, 9, 10]


def test_an_empty_directory_starts_fresh_and_a_checkpoint_in_step_resumes() -> None:
    assert plan_archive_start("p", [], [], []) == ArchiveStart("fresh")
    # A first run that died before its first batch was committed: Spark redoes batch 0.
    assert plan_archive_start("p", [], [0], []) == ArchiveStart("resume")
    assert plan_archive_start("p", [0, 1, 2], [0, 1, 2], ["topic=a"]) == ArchiveStart("resume")
    # offsets/N is written before the sink commits batch N: one ahead is a crash mid-batch.
    assert plan_archive_start("p", [0, 1, 2], [1, 2, 3], ["topic=a"]) == ArchiveStart("resume")


def test_a_checkpoint_missing_or_behind_its_sink_is_rebuilt_at_the_sinks_last_batch() -> None:
    assert plan_archive_start("p", [0, 4, 9], [], ["topic=a"]) == ArchiveStart("rebuild", 9)
    assert plan_archive_start("p", [0, 4, 9], [3, 4, 5], ["topic=a"]) == ArchiveStart("rebuild", 9)


def test_files_without_the_sinks_log_are_refused() -> None:
    with pytest.raises(ArchiveStateError, match=r"/data/x holds files \(topic=a\) but no _spark_metadata"):
        plan_archive_start("/data/x", [], [], ["topic=a"])
    with pytest.raises(ArchiveStateError, match="new, empty directory"):
        plan_archive_start("/data/x", [], [3], ["part-0.parquet"])


def test_rebuilt_checkpoint_files_are_sparks_v1_format() -> None:
    files = checkpoint_files(
        7, {("orders", 1): 30, ("orders", 0): 50}, {"spark.sql.shuffle.partitions": "4"}, 1_000, "q-id"
    )
    # Spark restarts from the latest batch and reads the one before it: both are there, the
    # latest offsets file last.
    assert [name for name, _ in files] == ["metadata", "commits/6", "offsets/6", "commits/7", "offsets/7"]
    contents = dict(files)
    assert json.loads(contents["metadata"]) == {"id": "q-id"}
    assert contents["commits/7"].splitlines() == ["v1", '{"nextBatchWatermarkMs": 0}']
    assert contents["offsets/6"] == contents["offsets/7"]
    version, metadata, source = contents["offsets/7"].splitlines()
    assert version == "v1"
    assert json.loads(metadata) == {
        "batchWatermarkMs": 0,
        "batchTimestampMs": 1_000,
        "conf": {"spark.sql.shuffle.partitions": "4"},
    }
    assert json.loads(source) == {"orders": {"0": 50, "1": 30}}
    assert [name for name, _ in checkpoint_files(0, {}, {}, 1, "q")] == ["metadata", "commits/0", "offsets/0"]
