"""Reading one offset range on an executor: pipelined Fetch requests (``fetching``) decoded into
Arrow record batches (``columnar``), one batch per Fetch response, no Row per record.

Data loss is checked where it can be seen: the range starts below the partition's log start
offset (retention, DeleteRecords), or the broker answers OFFSET_OUT_OF_RANGE while the range is
read. With ``failOnDataLoss`` true that fails the task with ``DataLossError``; with false the
missing records are skipped and a warning is logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa

from strom.protocol.errors import ErrorCode
from strom.spark.fetching import PartitionFetcher, chunk_to_arrow
from strom.spark.options import OffsetRange
from strom.spark.planning import consumer_config

__all__ = ["SPARK_HEADERS_DDL", "SPARK_SCHEMA_DDL", "DataLossError", "read_range"]

log = logging.getLogger(__name__)

# The read schema of Spark's Kafka source (headers only with includeHeaders=true).
SPARK_SCHEMA_DDL = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
SPARK_HEADERS_DDL = ", headers array<struct<key: string, value: binary>>"

# Bytes per Fetch (and so per Arrow batch handed to Spark): large enough that per-request and
# per-batch costs vanish, small enough that a worker holds a few MB at a time (two in flight).
FETCH_PARTITION_BYTES = 4 * 1024 * 1024


class DataLossError(RuntimeError):
    """Offsets a query was to read no longer exist (deleted by retention, DeleteRecords or compaction
    of the whole range). Set ``failOnDataLoss`` to false to skip them instead."""


def _lost(offset_range: OffsetRange, expected: int, log_start: int, fail_on_data_loss: bool) -> None:
    message = (
        f"{offset_range.topic}-{offset_range.partition}: offsets {expected}-{min(log_start, offset_range.until_offset) - 1}"
        f" were deleted before they were read (log start offset is now {log_start})"
    )
    if fail_on_data_loss:
        raise DataLossError(
            message + "; set failOnDataLoss=false to skip missing records instead of failing the query"
        )
    log.warning("%s; skipping them (failOnDataLoss=false)", message)


def read_range(
    offset_range: OffsetRange,
    client_config: dict[str, str],
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    """The records of ``offset_range`` as Arrow batches, in offset order (one per Fetch response)."""
    if offset_range.size == 0:
        return
    topic, partition, until = offset_range.topic, offset_range.partition, offset_range.until_offset
    config = consumer_config(
        client_config,
        **{
            "max.partition.fetch.bytes": str(FETCH_PARTITION_BYTES),
            "fetch.max.bytes": str(FETCH_PARTITION_BYTES),
            "fetch.max.wait.ms": "100",
        },
    )
    fetcher = PartitionFetcher(config, topic, partition)
    try:
        expected = offset_range.from_offset
        log_start = fetcher.log_start_offset()
        if expected < log_start:
            _lost(offset_range, expected, log_start, fail_on_data_loss)
            expected = log_start
        pending = fetcher.submit(expected) if expected < until else None
        idle_since = time.monotonic()
        wait_s = (poll_timeout_ms + fetcher.config.request_timeout_ms) / 1000
        while pending is not None and expected < until:
            chunk = pending.result(wait_s)
            pending = None
            if chunk.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
                log_start = fetcher.log_start_offset()
                if log_start > expected:
                    _lost(offset_range, expected, log_start, fail_on_data_loss)
                    expected = log_start
                elif time.monotonic() - idle_since > poll_timeout_ms / 1000:
                    raise TimeoutError(f"{topic}-{partition}: offset {expected} stays out of range")
                if expected < until:
                    pending = fetcher.submit(expected)
                continue
            next_offset = chunk.next_offset()
            if expected < next_offset < until:
                pending = fetcher.submit(next_offset)  # on the wire while this one is decoded
            batch, after = chunk_to_arrow(chunk, topic, partition, expected, until, include_headers)
            if batch is not None:
                first_offset = batch.column(4)[0].as_py()
                if first_offset > expected:
                    # A gap: compaction (not a loss) or deletion racing the read (a loss).
                    log_start = fetcher.log_start_offset()
                    if log_start > expected:
                        _lost(offset_range, expected, log_start, fail_on_data_loss)
                yield batch
            advanced = max(after, next_offset)
            if advanced > expected:
                expected = advanced
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > poll_timeout_ms / 1000:
                raise TimeoutError(
                    f"{topic}-{partition}: no records at offset {expected} within {poll_timeout_ms} ms"
                    f" (reading up to {until}; high watermark {chunk.high_watermark})"
                )
            if pending is None and expected < until:
                pending = fetcher.submit(expected)
    finally:
        fetcher.close()
