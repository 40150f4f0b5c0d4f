"""What state an archive directory is in before ``strom pipeline archive`` runs on it, and how a
lost checkpoint is rebuilt from what the archive holds.

The archive is Spark's file sink with a streaming checkpoint: ``PATH/_spark_metadata`` logs the
files each micro-batch committed (readers of PATH see only those), ``PATH/_checkpoint`` logs each
micro-batch's offsets (``offsets/N``) and its completion (``commits/N``). The sink skips a batch
whose id it has already committed; so when the checkpoint is gone (or restored from an older
copy), a new query numbers its batches from 0 again and the sink drops them all, silently, until
the numbers pass the sink's last one. A data engineer expects a re-run to archive what is not in
the archive yet, once; so the checkpoint is rebuilt at the sink's last batch id, with the offsets
after the last record the archive holds for each partition, and the next batch continues from there.

A directory that holds files but no sink log was not written by this pipeline (or lost its log):
which files are whole is unknown, and a new log would hide the old files from readers, so it is
refused.

``plan_archive_start`` decides from listings alone (unit-tested); the rest reads and writes through
Hadoop's FileSystem API (so PATH may be any Hadoop path), in the driver.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from strom.spark.options import TopicPartitionKey, offsets_to_json

__all__ = [
    "ArchiveStart",
    "ArchiveStateError",
    "checkpoint_files",
    "plan_archive_start",
    "prepare_archive",
]

log = logging.getLogger(__name__)

SINK_LOG_DIRECTORY = "_spark_metadata"
CHECKPOINT_DIRECTORY = "_checkpoint"
# Files in Spark's metadata logs are named by batch id; every tenth is compacted (``19.compact``).
_BATCH_FILE = re.compile(r"^(\d+)(\.compact)?$")


class ArchiveStateError(RuntimeError):
    """The archive directory is in a state the pipeline cannot continue from safely."""


@dataclass(frozen=True)
class ArchiveStart:
    """How the next run starts: ``"fresh"`` (nothing archived yet), ``"resume"`` (from the
    checkpoint), or ``"rebuild"`` (the checkpoint is missing or behind the sink's log: rebuilt at
    ``sink_batch_id``)."""

    how: str
    sink_batch_id: int | None = None


def batch_ids(names: Iterable[str]) -> list[int]:
    return sorted({int(match.group(1)) for name in names if (match := _BATCH_FILE.match(name))})


def plan_archive_start(
    path: str,
    sink_batch_ids: list[int],
    offset_batch_ids: list[int],
    data_entries: list[str],
) -> ArchiveStart:
    """``sink_batch_ids``: batches in ``_spark_metadata``; ``offset_batch_ids``: batches in
    ``_checkpoint/offsets``; ``data_entries``: names at the top of PATH other than Spark's own
    (``_*``, ``.*``)."""
    if not sink_batch_ids:
        if data_entries:
            shown = ", ".join(sorted(data_entries)[:5]) + (", ..." if len(data_entries) > 5 else "")
            raise ArchiveStateError(
                f"{path} holds files ({shown}) but no {SINK_LOG_DIRECTORY}, the log of the files the "
                "archive committed: it was not written by strom pipeline archive, or its log was deleted. "
                "Which of those files are whole is unknown, and a new log would hide them from readers. "
                "Archive into a new, empty directory (or move those files away)"
            )
        return ArchiveStart("resume" if offset_batch_ids else "fresh")
    sink_latest = max(sink_batch_ids)
    # Spark writes offsets/N before the sink commits batch N: a checkpoint in step with its sink
    # is never behind it.
    if offset_batch_ids and max(offset_batch_ids) >= sink_latest:
        return ArchiveStart("resume")
    return ArchiveStart("rebuild", sink_latest)


def checkpoint_files(
    batch_id: int,
    offsets: Mapping[TopicPartitionKey, int],
    conf: Mapping[str, str],
    timestamp_ms: int,
    query_id: str,
) -> list[tuple[str, str]]:
    """The files of a checkpoint whose batch ``batch_id`` ended at ``offsets`` and completed:
    (path under the checkpoint, text), in the order to write them (the last offsets file last: a
    checkpoint counts as rebuilt only once it is there).

    Spark's checkpoint format "v1" (the one Spark keeps readable across versions): the query id;
    per batch its commit, and its offsets (a metadata line, then one line per source with that
    source's offset JSON). Spark restarts from the latest batch and reads the one before it too,
    so batch ``batch_id - 1`` is written as well, ending at the same offsets (batch ``batch_id``
    then read nothing)."""
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": timestamp_ms, "conf": dict(conf)}
    offsets_text = "v1\n" + json.dumps(metadata) + "\n" + json.dumps(offsets_to_json(offsets))
    commit_text = "v1\n" + json.dumps({"nextBatchWatermarkMs": 0})
    files = [("metadata", json.dumps({"id": query_id}))]
    for batch in ([batch_id - 1] if batch_id > 0 else []) + [batch_id]:
        files += [(f"commits/{batch}", commit_text), (f"offsets/{batch}", offsets_text)]
    return files


class _HadoopDirectory:
    """A directory through Hadoop's FileSystem API (local paths, HDFS, S3...), from the driver."""

    def __init__(self, spark: Any, path: str) -> None:
        jvm = spark.sparkContext._jvm
        self._jvm = jvm
        self.path = jvm.org.apache.hadoop.fs.Path(path)
        self.fs = self.path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def child(self, *names: str) -> Any:
        path = self.path
        for name in names:
            path = self._jvm.org.apache.hadoop.fs.Path(path, name)
        return path

    def exists(self, *names: str) -> bool:
        return bool(self.fs.exists(self.child(*names)))

    def list_names(self, *names: str) -> list[str]:
        directory = self.child(*names)
        if not self.fs.exists(directory):
            return []
        return [status.getPath().getName() for status in self.fs.listStatus(directory)]

    def write_text(self, relative: str, text: str) -> None:
        """Write via a temporary file and a rename, so a crash never leaves half a file there."""
        target = self.child(*relative.split("/"))
        self.fs.mkdirs(target.getParent())
        temporary = self._jvm.org.apache.hadoop.fs.Path(target.getParent(), f".{target.getName()}.tmp")
        stream = self.fs.create(temporary, True)
        try:
            stream.write(bytearray(text.encode()))
        finally:
            stream.close()
        if not self.fs.rename(temporary, target):
            raise ArchiveStateError(f"cannot write {target.toString()}")

    def rename(self, source: str, target: str) -> None:
        if not self.fs.rename(self.child(source), self.child(target)):
            raise ArchiveStateError(f"cannot rename {self.child(source).toString()} to {target}")


def archived_ends(spark: Any, path: str, topics: list[str]) -> dict[TopicPartitionKey, int]:
    """For each partition of ``topics`` the archive holds records of: the offset after its last
    one. Read through the sink's log, so only committed files count."""
    from pyspark.sql import functions

    frame = spark.read.schema("topic string, partition int, offset long").parquet(path)
    rows = (
        frame.where(functions.col("topic").isin(topics))
        .groupBy("topic", "partition")
        .agg(functions.max("offset").alias("last"))
        .collect()
    )
    return {(row.topic, row.partition): row["last"] + 1 for row in rows}


def prepare_archive(spark: Any, path: str, topics: list[str]) -> ArchiveStart:
    """Check PATH before the archive query starts; rebuild its checkpoint when that is needed."""
    directory = _HadoopDirectory(spark, path)
    data_entries = [name for name in directory.list_names() if not name.startswith(("_", "."))]
    start = plan_archive_start(
        path,
        batch_ids(directory.list_names(SINK_LOG_DIRECTORY)),
        batch_ids(directory.list_names(CHECKPOINT_DIRECTORY, "offsets")),
        data_entries,
    )
    if start.how != "rebuild":
        return start
    assert start.sink_batch_id is not None
    now = datetime.datetime.now(tz=datetime.UTC)
    checkpoint = f"{path.rstrip('/')}/{CHECKPOINT_DIRECTORY}"
    state = "was missing"
    if directory.exists(CHECKPOINT_DIRECTORY):
        # Behind the sink (an old copy, or what is left of one): kept aside, never deleted.
        kept = f"{CHECKPOINT_DIRECTORY}.behind-{now.strftime('%Y%m%dT%H%M%SZ')}"
        directory.rename(CHECKPOINT_DIRECTORY, kept)
        state = f"was behind the archive's log of committed files (moved to {kept})"
    ends = archived_ends(spark, path, topics)
    conf = {"spark.sql.shuffle.partitions": spark.conf.get("spark.sql.shuffle.partitions")}
    for relative, text in checkpoint_files(
        start.sink_batch_id, ends, conf, int(now.timestamp() * 1000), str(uuid.uuid4())
    ):
        directory.write_text(f"{CHECKPOINT_DIRECTORY}/{relative}", text)
    held = ", ".join(
        f"{topic}-{partition} up to {end - 1}" for (topic, partition), end in sorted(ends.items())
    )
    log.warning(
        "%s %s: rebuilt it from what the archive holds (%s); this run archives the records after "
        "those, and the partitions it holds nothing of from their earliest offset",
        checkpoint,
        state,
        held or "no records",
    )
    return start
