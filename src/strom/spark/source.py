"""``format("strom")``: the PySpark data source (batch and streaming read, batch and streaming write).

Driver-side objects (the readers' ``partitions``/``latestOffset``, the writers' checks) plan with
an ``OffsetPlanner``; executors run ``read_range`` and ``write_batches``. Readers are pickled to
executors, so their clients are opened lazily and never pickled.

Streaming offsets are ``{topic: {partition: next offset}}``, as Spark's Kafka source checkpoints
them. With ``groupId`` the consumed offsets are committed to that consumer group: Spark calls the
reader's ``commit(end)`` one micro-batch late and never for the last one, so the source also
commits ``start`` whenever ``latestOffset(start, limit)`` is asked, which Spark does only once the
micro-batch ending at ``start`` has completed (its commit-log entry is written); an
``AvailableNow`` query asks once more after its last batch before it stops.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from strom.client.config import AdminConfig, ConsumerConfig, ProducerConfig
from strom.spark.exactly_once import (
    BATCH_ID_PROPERTY,
    QUERY_ID_PROPERTY,
    TaskIdentity,
    TaskOutcome,
    stream_task_identity,
    summarize,
)
from strom.spark.group_offsets import commit_group_offsets
from strom.spark.options import (
    OffsetRange,
    OffsetSpec,
    ReadOptions,
    SourceOptionsError,
    TopicPartitionKey,
    WriteOptions,
    client_setting_names,
    limit_offsets,
    offsets_from_checkpoint,
    offsets_to_json,
    option_warnings,
    parse_read_options,
    parse_write_options,
    split_ranges,
)
from strom.spark.planning import OffsetPlanner
from strom.spark.reading import SPARK_HEADERS_DDL, SPARK_SCHEMA_DDL, read_range
from strom.spark.writing import (
    check_producer_config,
    check_write_schema,
    write_batches,
    write_batches_exactly_once,
)

__all__ = ["StromDataSource"]

log = logging.getLogger(__name__)


@dataclass
class RangePartition(InputPartition):
    """One Spark task: one offset range of one topic-partition."""

    offset_range: OffsetRange

    def __post_init__(self) -> None:
        super().__init__(self.offset_range)


@dataclass
class WrittenCount(WriterCommitMessage):
    records: int


@dataclass
class WrittenOnce(WriterCommitMessage):
    """An exactly-once task's report: written, or skipped (and whether its rows matched)."""

    outcome: TaskOutcome


def _task_context() -> TaskContext:
    context = TaskContext.get()
    assert context is not None, "write() runs in a Spark task"
    return context


def _read(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):
        return iter(())  # Spark's placeholder task when there is nothing to read
    return read_range(
        partition.offset_range,
        options.client_config,
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
    )


class _Planned:
    """Lazily opened planner that is dropped when pickled (it holds client threads and sockets)."""

    options: ReadOptions
    _planner: OffsetPlanner | None

    @property
    def planner(self) -> OffsetPlanner:
        if self._planner is None:
            self._planner = OffsetPlanner(self.options)
        return self._planner

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None
        return state


class StromBatchReader(_Planned, DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._planner = None

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        try:
            partitions = self.planner.topic_partitions()
            starting = options.starting or OffsetSpec("earliest")
            if starting.kind == "latest" or -1 in starting.offsets.values():
                raise SourceOptionsError(
                    "startingOffsets latest (-1) is for streams; a batch query would read nothing"
                )
            self.planner.check_exists()
            start = self.planner.resolve(starting, partitions, ending=False)
            end = self.planner.resolve(options.ending, partitions, ending=True)
            self.planner.check_range(start, end)
        finally:
            self.planner.close()
        ranges = [
            OffsetRange(topic, partition, start[(topic, partition)], end[(topic, partition)])
            for topic, partition in partitions
        ]
        return [RangePartition(offset_range) for offset_range in split_ranges(ranges, options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class StromStreamReader(_Planned, DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._planner = None
        self._available_now_target: dict[TopicPartitionKey, int] | None = None
        self._last_group_commit: dict[TopicPartitionKey, int] | None = None

    def initialOffset(self) -> dict[str, dict[str, int]]:
        # Asked only when the query starts without a checkpoint: where the options are checked.
        self.planner.check_exists()
        partitions = self.planner.topic_partitions()
        starting = self.options.starting or OffsetSpec("latest")
        start = self.planner.resolve(starting, partitions, ending=False)
        self.planner.check_range(start, None)
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        partitions = self.planner.topic_partitions()
        self._available_now_target = self.planner.latest(partitions)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, dict[str, int]]:
        start_offsets = offsets_from_checkpoint(start)
        # The micro-batch that ended at ``start`` has completed: its progress is the group's.
        self._commit_to_group(start_offsets)
        if self._available_now_target is not None:
            latest = dict(self._available_now_target)
        else:
            latest = self.planner.latest(self.planner.topic_partitions())
        gone = sorted(tp for tp in start_offsets if tp not in latest)
        if gone:
            self._data_loss(f"partitions {gone} no longer exist")
        planning_start = dict(start_offsets)
        new = [tp for tp in latest if tp not in start_offsets]
        if new:
            # Partitions that appeared since the last batch are read from their beginning.
            planning_start.update(self.planner.earliest(new))
        for tp, offset in list(latest.items()):
            if offset < planning_start[tp]:
                self._data_loss(
                    f"{tp[0]}-{tp[1]}: latest offset {offset} is below {planning_start[tp]} (topic recreated?)"
                )
                latest[tp] = planning_start[tp]
        if isinstance(limit, ReadMaxRows):
            end = limit_offsets(planning_start, latest, limit.max_rows)
        else:
            end = latest
        for tp in new:
            # A new partition with nothing to read yet still joins the offsets only when it has records,
            # so "no new data" stays exactly ``start`` and AvailableNow can finish.
            if end[tp] <= planning_start[tp]:
                del end[tp]
        for tp in gone:
            end[tp] = start_offsets[tp]
        return offsets_to_json(end)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        start_offsets = offsets_from_checkpoint(start)
        end_offsets = offsets_from_checkpoint(end)
        new = [tp for tp in end_offsets if tp not in start_offsets]
        if new:
            start_offsets.update(self.planner.earliest(new))
        ranges = [
            OffsetRange(topic, partition, start_offsets[(topic, partition)], until)
            for (topic, partition), until in sorted(end_offsets.items())
        ]
        return [
            RangePartition(offset_range) for offset_range in split_ranges(ranges, self.options.min_partitions)
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        self._commit_to_group(offsets_from_checkpoint(end))

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None

    def _commit_to_group(self, offsets: dict[TopicPartitionKey, int]) -> None:
        group_id = self.options.group_id
        if group_id is None or not offsets or offsets == self._last_group_commit:
            return
        try:
            commit_group_offsets(self.options.client_config, group_id, offsets)
            self._last_group_commit = dict(offsets)
        except Exception:
            # Lag reporting must not stop the pipeline; the next batch commits again.
            log.warning("committing offsets to group %r failed", group_id, exc_info=True)

    def _data_loss(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            from strom.spark.reading import DataLossError

            raise DataLossError(message + "; set failOnDataLoss=false to continue without them")
        log.warning("%s; continuing (failOnDataLoss=false)", message)


class StromBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        # Made once on the driver and pickled to every task: all attempts of a task, and a stage
        # run again, share it. Without exactlyOnce.id, a new write is a new identity.
        self.write_id = options.exactly_once_id or f"write-{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if not self.options.exactly_once:
            return WrittenCount(write_batches(iterator, self.options))
        task = TaskIdentity(self.write_id, self.options.exactly_once_batch, _task_context().partitionId())
        return WrittenOnce(write_batches_exactly_once(iterator, self.options, task))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _warn_about_replays(messages, self.options.exactly_once_batch)


class StromStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if not self.options.exactly_once:
            return WrittenCount(write_batches(iterator, self.options))
        context = _task_context()
        properties = {name: context.getLocalProperty(name) for name in (QUERY_ID_PROPERTY, BATCH_ID_PROPERTY)}
        task = stream_task_identity(properties, context.partitionId())
        return WrittenOnce(write_batches_exactly_once(iterator, self.options, task))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every record was acknowledged (exactlyOnce: every task's transaction committed) before
        its task finished; nothing is left to do but report replays that did not match."""
        _warn_about_replays(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records already acknowledged stay written (at-least-once, as Spark's Kafka sink). With
        exactlyOnce, the tasks that committed stay committed; the batch's replay skips them."""


def _warn_about_replays(messages: list[WriterCommitMessage | None], batch: int) -> None:
    outcomes = [message.outcome for message in messages if isinstance(message, WrittenOnce)]
    warning = summarize(outcomes, batch)
    if warning is not None:
        log.warning("%s", warning)


class StromDataSource(DataSource):
    """``spark.read.format("strom")`` and friends; register with ``strom.spark.register(spark)``."""

    @classmethod
    def name(cls) -> str:
        return "strom"

    def _options(self) -> Mapping[str, str]:
        return dict(self.options)

    def _warn_about_options(self, side: str) -> None:
        # Planning runs in a Python worker on the driver: an unconfigured logger there writes
        # warnings to stderr, which Spark passes on to the driver's console.
        client_keys = (
            client_setting_names(AdminConfig, ConsumerConfig)
            if side == "read"
            else client_setting_names(ProducerConfig)
        )
        for warning in option_warnings(self._options(), side=side, client_keys=client_keys):
            log.warning("%s", warning)

    def schema(self) -> str:
        include_headers = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return SPARK_SCHEMA_DDL + (SPARK_HEADERS_DDL if include_headers else "")

    def reader(self, schema: StructType) -> DataSourceReader:
        self._warn_about_options("read")
        return StromBatchReader(parse_read_options(self._options(), streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._warn_about_options("read")
        return StromStreamReader(parse_read_options(self._options(), streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> StromBatchWriter:
        self._warn_about_options("write")
        options = parse_write_options(self._options(), streaming=False)
        check_write_schema(_column_types(schema), options)
        check_producer_config(options)
        return StromBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StromStreamWriter:
        self._warn_about_options("write")
        options = parse_write_options(self._options(), streaming=True)
        check_write_schema(_column_types(schema), options)
        check_producer_config(options)
        return StromStreamWriter(options)


def _column_types(schema: StructType) -> dict[str, str]:
    return {field.name: field.dataType.simpleString() for field in schema.fields}
