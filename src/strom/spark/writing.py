"""Writing on an executor: Arrow batches of rows produced with strom's producer.

Columns as Spark's Kafka sink takes them: ``value`` (required, binary or string), ``key``,
``topic`` (unless the ``topic`` option names one, which then wins), ``partition`` and ``headers``
(array of struct<key: string, value: binary>). Every record must be acknowledged before the task
reports success; any delivery failure fails the task, so Spark retries or fails the job.

At least once by default (the idempotent producer: a retried task writes its rows again); with
``exactlyOnce`` each task writes in one transaction with a marker (``strom.spark.exactly_once``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any

import pyarrow as pa

from strom.client.admin import Admin
from strom.client.cluster import TopicPartition
from strom.client.config import ProducerConfig
from strom.client.errors import ConfigError
from strom.client.group_metadata import OffsetAndMetadata
from strom.client.producer import Producer
from strom.spark.exactly_once import OutgoingRecord, TaskIdentity, TaskOutcome, write_exactly_once
from strom.spark.options import SourceOptionsError, WriteOptions, client_setting_names
from strom.spark.planning import admin_config

__all__ = [
    "WRITABLE_COLUMNS",
    "StromSinkClients",
    "check_producer_config",
    "check_write_schema",
    "outgoing_records",
    "producer_config",
    "write_batches",
    "write_batches_exactly_once",
]

WRITABLE_COLUMNS = ("value", "key", "topic", "partition", "headers")

# Futures checked in rounds of this many, so memory stays bounded on a long partition while the
# producer still keeps a deep pipeline of batches in flight.
PENDING_FUTURES_MAX = 50_000


def check_write_schema(column_types: Mapping[str, str], options: WriteOptions) -> None:
    """Refuse a DataFrame the sink cannot write, on the driver, before any task starts.
    ``column_types`` maps column names to Spark simple type names (``binary``, ``string``...)."""
    if "value" not in column_types:
        raise SourceOptionsError("format('strom') needs a 'value' column (binary or string)")
    for name in ("value", "key"):
        if name in column_types and column_types[name] not in ("binary", "string"):
            raise SourceOptionsError(f"column {name!r} must be binary or string, not {column_types[name]}")
    if options.topic is None and "topic" not in column_types:
        raise SourceOptionsError("name the topic with the 'topic' option or a 'topic' column")
    if "topic" in column_types and column_types["topic"] != "string":
        raise SourceOptionsError(f"column 'topic' must be a string, not {column_types['topic']}")
    if "partition" in column_types and column_types["partition"] not in (
        "int",
        "bigint",
        "smallint",
        "tinyint",
    ):
        raise SourceOptionsError(f"column 'partition' must be an integer, not {column_types['partition']}")


def producer_config(client_config: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options the producer takes (others were warned about on the driver)."""
    known = client_setting_names(ProducerConfig)
    return {key: value for key, value in client_config.items() if key in known}


def check_producer_config(options: WriteOptions) -> None:
    """Refuse a bad ``kafka.*`` value on the driver, before any task starts (with exactlyOnce, as
    a transactional producer: ``enable.idempotence=false`` is refused, for one)."""
    try:
        _producer_settings(options, "strom-spark-check")
    except ConfigError as error:
        raise SourceOptionsError(f"format('strom'): {error}") from None


def _producer_settings(options: WriteOptions, transactional_id: str | None) -> ProducerConfig:
    settings = producer_config(options.client_config)
    if options.exactly_once:
        settings["transactional.id"] = transactional_id or ""
    return ProducerConfig.from_settings(settings)


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    index = batch.schema.get_field_index(name)
    if index < 0:
        return None
    return batch.column(index).to_pylist()  # type: ignore[no-any-return]


def _headers(value: Any) -> list[tuple[str, bytes | None]] | None:
    if not value:
        return None
    return [(header["key"], header["value"]) for header in value]


def outgoing_records(batches: Iterable[pa.RecordBatch], options: WriteOptions) -> Iterator[OutgoingRecord]:
    """The rows of ``batches`` as records to send."""
    for batch in batches:
        count = batch.num_rows
        values = _column(batch, "value")
        assert values is not None, "schema was checked on the driver"
        keys = _column(batch, "key") or [None] * count
        topics = [options.topic] * count if options.topic else (_column(batch, "topic") or [None] * count)
        partitions = _column(batch, "partition") or [None] * count
        headers = _column(batch, "headers") or [None] * count
        for value, key, topic, partition, record_headers in zip(
            values, keys, topics, partitions, headers, strict=True
        ):
            if topic is None:
                raise ValueError("a row has a null topic and no 'topic' option is set")
            yield OutgoingRecord(topic, value, key, partition, _headers(record_headers))


def write_batches(batches: Iterable[pa.RecordBatch], options: WriteOptions) -> int:
    """Produce every row (at least once); returns how many were written (all acknowledged)."""
    producer = Producer(producer_config(options.client_config))
    written = 0
    pending: list[Future[Any]] = []
    try:
        for record in outgoing_records(batches, options):
            pending.append(
                producer.send(
                    record.topic,
                    value=record.value,
                    key=record.key,
                    partition=record.partition,
                    headers=record.headers,
                )
            )
            written += 1
            if len(pending) >= PENDING_FUTURES_MAX:
                _wait(pending)
                pending = []
        producer.flush()
        _wait(pending)
    finally:
        producer.close()
    return written


def _wait(futures: list[Future[Any]]) -> None:
    for future in futures:
        future.result()  # raises the delivery error: the task fails


def write_batches_exactly_once(
    batches: Iterable[pa.RecordBatch], options: WriteOptions, task: TaskIdentity
) -> TaskOutcome:
    """Produce every row as batch ``task.batch`` of task ``task.partition``, exactly once."""
    return write_exactly_once(outgoing_records(batches, options), task, StromSinkClients(options))


class StromSinkClients:
    """``SinkClients`` over strom's client: a transactional Producer per task and an Admin (opened
    on first use) to read markers."""

    def __init__(self, options: WriteOptions) -> None:
        self._options = options
        self.transaction_timeout_ms = _producer_settings(options, "strom-spark").transaction_timeout_ms
        self._admin: Admin | None = None

    def transactional_producer(self, transactional_id: str) -> Producer:
        settings = producer_config(self._options.client_config)
        settings["transactional.id"] = transactional_id
        return Producer(settings)

    def read_marker(self, group_id: str, partition: TopicPartition) -> OffsetAndMetadata | None:
        if self._admin is None:
            self._admin = Admin(admin_config(self._options.client_config))
        return self._admin.list_group_offsets(group_id, [partition], require_stable=True).get(partition)

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
