"""The executor's hot path: one partition's offset range fetched with pipelined Fetch requests and
decoded straight into Arrow columns.

Why not the Consumer: its background fetcher holds one fetch per partition and decodes every
record into a ``ConsumerRecord`` on its loop thread, which then competes for the GIL with the task
thread; measured here it read ~50,000 100-byte records/s. A Spark task knows its exact range, so
this reader keeps the next Fetch in flight while it decodes the current response (the next offset
comes from the batch headers alone) and builds column lists from the decoded batches with no
per-record object beyond the decoder's own. Built on the client's ``Transport`` (connections,
metadata, version negotiation) and the protocol's record-batch decoder.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from strom.base import limits
from strom.client.cluster import TopicPartition
from strom.client.config import ConsumerConfig
from strom.client.errors import KafkaError, error_for_code
from strom.client.offsets import EARLIEST_TIMESTAMP, ISOLATION_LEVELS, list_offsets
from strom.client.transport import LoopThread, Transport
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.fetch import FetchRequest
from strom.protocol.records import iter_batches
from strom.protocol.records.header import (
    COMPRESSION_MASK,
    BatchHeader,
    iter_batch_headers,
    parse_batch_header_lenient,
)
from strom.spark.columnar import BatchColumns, decode_batches_columns

__all__ = ["FetchedChunk", "PartitionFetcher", "chunk_to_arrow"]

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_TIMESTAMP_MS = pa.timestamp("ms", tz="UTC")
_TIMESTAMP_US = pa.timestamp("us", tz="UTC")
# Byte 16 of a batch (and of a legacy message) is the magic.
MAGIC_OFFSET = 16
DECOMPRESSED_BYTES_MAX = limits.decompressed_batch_bytes_max


@dataclass(frozen=True)
class FetchedChunk:
    """One Fetch response for the partition: ``records`` (whole batches, possibly starting before
    the offset asked for), or an error code, and the partition's watermarks."""

    fetch_offset: int
    error_code: int
    records: bytes
    high_watermark: int
    log_start_offset: int

    def next_offset(self) -> int:
        """Where the following fetch starts: after the last whole batch (from headers alone)."""
        headers = iter_batch_headers(self.records) if self.records else []
        if not headers:
            return self.fetch_offset
        return max(self.fetch_offset, headers[-1].last_offset + 1)


class PartitionFetcher:
    """Fetches one partition on a private loop thread; ``submit`` returns a future, so the caller
    can decode one response while the next is on the wire."""

    def __init__(self, client_config: Mapping[str, str], topic: str, partition: int) -> None:
        self.config = ConsumerConfig.from_settings(dict(client_config))
        self.topic_partition = TopicPartition(topic, partition)
        self._loop_thread = LoopThread(f"strom-spark-fetch-{topic}-{partition}")
        self._transport: Transport | None = None

    async def _transport_ready(self) -> Transport:
        if self._transport is None:
            self._transport = Transport(self.config)
        return self._transport

    async def _leader(self) -> int:
        transport = await self._transport_ready()
        leader = transport.metadata.leader_for(self.topic_partition)
        if leader is None:
            await transport.refresh_metadata([self.topic_partition.topic])
            leader = transport.metadata.leader_for(self.topic_partition)
        if leader is None:
            raise error_for_code(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, context=str(self.topic_partition))
        return leader

    async def _fetch(self, offset: int) -> FetchedChunk:
        config = self.config
        transport = await self._transport_ready()
        leader = await self._leader()
        tp = self.topic_partition
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=config.fetch_max_wait_ms,
            min_bytes=1,
            max_bytes=config.fetch_max_bytes,
            isolation_level=ISOLATION_LEVELS[config.isolation_level],
            session_id=0,
            session_epoch=-1,
            topics=[
                FetchRequest.FetchTopic(
                    topic=tp.topic,
                    partitions=[
                        FetchRequest.FetchPartition(
                            partition=tp.partition,
                            current_leader_epoch=-1,
                            fetch_offset=offset,
                            log_start_offset=-1,
                            partition_max_bytes=config.max_partition_fetch_bytes,
                        )
                    ],
                )
            ],
            rack_id=config.client_rack,
        )
        response: Any = await transport.send(
            leader, request, timeout_ms=config.request_timeout_ms + config.fetch_max_wait_ms
        )
        if response.error_code != ErrorCode.NONE:
            raise error_for_code(response.error_code, context=f"fetch {tp}")
        for topic_response in response.responses:
            for data in topic_response.partitions:
                if data.partition_index == tp.partition:
                    code = data.error_code
                    if code != ErrorCode.NONE and code != ErrorCode.OFFSET_OUT_OF_RANGE:
                        if ErrorCode(code).invalid_metadata:
                            transport.metadata.request_refresh()
                        raise error_for_code(code, context=f"fetch {tp} at {offset}")
                    return FetchedChunk(
                        offset, code, bytes(data.records or b""), data.high_watermark, data.log_start_offset
                    )
        raise KafkaError(f"fetch response did not include {tp}")

    def submit(self, offset: int) -> concurrent.futures.Future[FetchedChunk]:
        return self._loop_thread.submit(self._fetch(offset))

    def log_start_offset(self) -> int:
        async def earliest() -> int:
            transport = await self._transport_ready()
            found = await list_offsets(
                transport, {self.topic_partition: EARLIEST_TIMESTAMP}, isolation_level=0
            )
            answer = found.get(self.topic_partition)
            return 0 if answer is None else answer.offset

        return self._loop_thread.run(earliest(), timeout_s=self.config.request_timeout_ms / 1000 + 5)

    def close(self) -> None:
        async def shutdown() -> None:
            if self._transport is not None:
                await self._transport.close()

        # Closing is best effort: the task's result does not depend on it.
        with contextlib.suppress(Exception):
            self._loop_thread.run(shutdown(), timeout_s=5)
        self._loop_thread.stop()


def chunk_to_arrow(
    chunk: FetchedChunk,
    topic: str,
    partition: int,
    from_offset: int,
    until_offset: int,
    include_headers: bool,
) -> tuple[pa.RecordBatch | None, int]:
    """The records of ``chunk`` in ``[from_offset, until_offset)`` as one Arrow batch (None if none),
    and the offset of the last record taken + 1 (``from_offset`` if none)."""
    buffer = chunk.records
    pieces: list[BatchColumns] = []
    plain_run: list[tuple[int, BatchHeader]] = []

    def decode(batches: list[tuple[int, BatchHeader]]) -> None:
        columns = decode_batches_columns(
            buffer, batches, want_headers=include_headers, decompressed_bytes_max=DECOMPRESSED_BYTES_MAX
        )
        if columns is not None:
            pieces.append(columns)
            return
        for pos, header in batches:  # one by one through the protocol decoder
            generic = _decode_generic(buffer[pos : pos + header.size_bytes], include_headers)
            if generic is not None:
                pieces.append(generic)

    for pos, header in _whole_batches(buffer):
        if header is None:
            # Legacy message sets: the protocol decoder handles them; rare enough not to optimise.
            if plain_run:
                decode(plain_run)
                plain_run = []
            generic = _decode_generic(buffer[pos:], include_headers)
            if generic is not None:
                pieces.append(generic)
            break
        if header.is_control or header.last_offset < from_offset or header.base_offset >= until_offset:
            continue
        if header.attributes & COMPRESSION_MASK:
            if plain_run:
                decode(plain_run)
                plain_run = []
            decode([(pos, header)])
        else:
            plain_run.append((pos, header))
    if plain_run:
        decode(plain_run)
    if not pieces:
        return None, from_offset
    offsets = np.concatenate([piece.offsets for piece in pieces])
    low = int(np.searchsorted(offsets, from_offset))
    high = int(np.searchsorted(offsets, until_offset))
    if low >= high:
        return None, from_offset
    count = high - low
    columns: list[Any] = [
        pa.concat_arrays([piece.keys for piece in pieces]).slice(low, count),
        pa.concat_arrays([piece.values for piece in pieces]).slice(low, count),
        pa.array([topic] * count, pa.string()),
        pa.array(np.full(count, partition, np.int32)),
        pa.array(offsets[low:high]),
        pa.array(np.concatenate([piece.timestamps_ms for piece in pieces])[low:high], _TIMESTAMP_MS).cast(
            _TIMESTAMP_US
        ),
        pa.array(np.concatenate([piece.timestamp_types for piece in pieces])[low:high]),
    ]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if include_headers:
        headers = [header for piece in pieces for header in piece.headers or []]
        columns.append(pa.array(headers[low:high], HEADER_TYPE))
        names.append("headers")
    return pa.RecordBatch.from_arrays(columns, names=names), int(offsets[high - 1]) + 1


def _whole_batches(buffer: bytes) -> list[tuple[int, BatchHeader | None]]:
    """(position, header) of each whole v2 batch; a legacy message gets header None (and ends the
    scan: the generic decoder takes the rest). A partial batch at the end is left out."""
    found: list[tuple[int, BatchHeader | None]] = []
    pos = 0
    end = len(buffer)
    while end - pos > MAGIC_OFFSET:
        if buffer[pos + MAGIC_OFFSET] != 2:
            found.append((pos, None))
            break
        header = parse_batch_header_lenient(buffer, pos)
        if header is None or pos + header.size_bytes > end:
            break
        found.append((pos, header))
        pos += header.size_bytes
    return found


def _decode_generic(buffer: bytes, include_headers: bool) -> BatchColumns | None:
    """The protocol decoder's way (legacy formats, headers, anything the columnar path declined);
    raises ``CorruptBatchError`` for a corrupt batch."""
    records = [
        (record, batch.header.timestamp_type)
        for batch in iter_batches(buffer)
        if not batch.header.is_control
        for record in batch.absolute_records()
    ]
    if not records:
        return None
    return BatchColumns(
        offsets=np.array([record.offset for record, _ in records], np.int64),
        timestamps_ms=np.array([record.timestamp for record, _ in records], np.int64),
        timestamp_types=np.array([timestamp_type for _, timestamp_type in records], np.int32),
        keys=pa.array([record.key for record, _ in records], pa.binary()),
        values=pa.array([record.value for record, _ in records], pa.binary()),
        headers=[[{"key": key, "value": value} for key, value in record.headers] for record, _ in records]
        if include_headers
        else None,
    )
