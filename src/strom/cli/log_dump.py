"""``strom log dump FILE ...``: what a partition's files on disk hold, like Kafka's kafka-dump-log.

A ``.log`` segment is read batch by batch (one batch in memory at a time): every batch header
with its position, size and whether its CRC holds; with ``--print-data`` every record (offset,
timestamp, key, value, headers). ``.index`` and ``.timeindex`` files list their entries. The files
are read only, so a live broker's segments can be dumped. Reading stops at a tail that is not a
whole batch (a write a crash cut short), which the dump reports.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from strom.base import limits
from strom.cli.common import add_command, add_command_group
from strom.cli.output import CliError, UsageError
from strom.cli.record_format import ENCODINGS, Encoding, encode_bytes
from strom.protocol.records.batch import decode_batch
from strom.protocol.records.compression import CompressionType
from strom.protocol.records.header import (
    HEADER_BYTES,
    LOG_OVERHEAD_BYTES,
    MAGIC_OFFSET,
    BatchHeader,
    CorruptBatchError,
    compute_crc,
    parse_batch_header,
)

__all__ = ["DumpedBatch", "TornTail", "read_segment", "register"]

# The part of a batch read first: base offset, length, leader epoch and magic.
_PREFIX_BYTES = MAGIC_OFFSET + 1
# A batch larger than any request the broker takes cannot have been appended: the file is corrupt
# there, and nothing that large is read into memory.
_BATCH_BYTES_MAX = limits.frame_bytes_max
# Index entries, as the storage layer writes them (see strom.storage.segment).
_OFFSET_INDEX_ENTRY_BYTES = 8
_TIME_INDEX_ENTRY_BYTES = 12


def register(commands: Any) -> None:
    subcommands = add_command_group(commands, "log", help_text="look at a partition's files on disk")
    dump = add_command(
        subcommands,
        "dump",
        help_text="print the batches of a segment file (or the entries of an index), like kafka-dump-log",
        description=(
            "Print what a partition's files hold: for a .log segment every batch (offsets, count, "
            "producer id and sequence, leader epoch, position, timestamp, size, compression, CRC "
            "valid or not) and with --print-data every record; for .index and .timeindex files "
            "their entries. Reads the files only, so a running broker's files can be dumped."
        ),
        run=_dump,
        connects=False,
    )
    dump.add_argument("files", nargs="+", type=Path, metavar="FILE", help=".log, .index or .timeindex files")
    dump.add_argument("--print-data", action="store_true", help="print every record of every batch too")
    dump.add_argument(
        "--encoding",
        choices=ENCODINGS,
        default="text",
        help="how keys, values and header values are shown with --print-data (default text)",
    )


@dataclass
class DumpedRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass
class DumpedBatch:
    position: int
    header: BatchHeader
    crc_valid: bool
    records: list[DumpedRecord] | None = None  # decoded with --print-data (None: not asked, or corrupt)
    error: str | None = None  # why the records could not be decoded


@dataclass(frozen=True)
class TornTail:
    """Bytes at the end of a segment that are not a whole, well-formed batch."""

    position: int
    size_bytes: int
    reason: str


@dataclass
class SegmentDump:
    base_offset: int | None
    batches: list[DumpedBatch] = field(default_factory=list)
    tail: TornTail | None = None


def _base_offset_of(path: Path) -> int | None:
    return int(path.stem) if path.stem.isdigit() else None


def read_segment(stream: IO[bytes], print_data: bool) -> Iterator[DumpedBatch | TornTail]:
    """The batches of a segment file, in order; a ``TornTail`` last if the file ends in one."""
    position = 0
    while True:
        prefix = stream.read(_PREFIX_BYTES)
        if not prefix:
            return
        if len(prefix) < _PREFIX_BYTES:
            yield TornTail(position, len(prefix), "shorter than a batch header")
            return
        batch_length = int.from_bytes(prefix[8:12], "big", signed=True)
        size_bytes = batch_length + LOG_OVERHEAD_BYTES
        if prefix[MAGIC_OFFSET] != 2:
            rest = len(stream.read())
            yield TornTail(position, len(prefix) + rest, f"magic {prefix[MAGIC_OFFSET]} is not 2")
            return
        if size_bytes < HEADER_BYTES or size_bytes > _BATCH_BYTES_MAX:
            rest = len(stream.read())
            yield TornTail(
                position, len(prefix) + rest, f"a batch length of {batch_length} bytes is impossible"
            )
            return
        body = stream.read(size_bytes - _PREFIX_BYTES)
        data = prefix + body
        if len(data) < size_bytes:
            yield TornTail(
                position, len(data), f"the batch declares {size_bytes} bytes, {len(data)} are there"
            )
            return
        try:
            header = parse_batch_header(data)
        except CorruptBatchError as error:
            rest = len(stream.read())
            yield TornTail(position, len(data) + rest, str(error))
            return
        crc_valid = compute_crc(data, 0, size_bytes) == header.crc
        dumped = DumpedBatch(position, header, crc_valid)
        if print_data:
            try:
                decoded = decode_batch(data)
            except CorruptBatchError as error:
                dumped.error = str(error)
            else:
                dumped.records = [
                    DumpedRecord(
                        record.offset, record.timestamp, record.key, record.value, list(record.headers)
                    )
                    for record in decoded.absolute_records()
                ]
        yield dumped
        position += size_bytes


def _compression_name(header: BatchHeader) -> str:
    try:
        return CompressionType(header.compression).name.lower()
    except ValueError:
        return f"unknown({header.compression})"


def _batch_line(batch: DumpedBatch) -> str:
    header = batch.header
    timestamp_kind = "LogAppendTime" if header.timestamp_type else "CreateTime"
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} count: {header.record_count} "
        f"baseSequence: {header.base_sequence} lastSequence: {header.last_sequence} "
        f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {str(header.is_transactional).lower()} isControl: {str(header.is_control).lower()} "
        f"position: {batch.position} {timestamp_kind}: {header.max_timestamp} size: {header.size_bytes} "
        f"magic: {header.magic} compresscodec: {_compression_name(header)} crc: {header.crc} "
        f"isvalid: {str(batch.crc_valid).lower()}"
    )


def _or_null(text: str | None) -> str:
    return "null" if text is None else text


def _record_line(record: DumpedRecord, batch: DumpedBatch, encoding: Encoding) -> str:
    header = batch.header
    timestamp_kind = "LogAppendTime" if header.timestamp_type else "CreateTime"
    sequence = -1 if header.base_sequence < 0 else header.base_sequence + record.offset - header.base_offset
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    headers = ",".join(f"{name}={encode_bytes(value, encoding) or ''}" for name, value in record.headers)
    return (
        f"| offset: {record.offset} {timestamp_kind}: {record.timestamp} keySize: {key_size} "
        f"valueSize: {value_size} sequence: {sequence} headers: [{headers}] "
        f"key: {_or_null(encode_bytes(record.key, encoding))} "
        f"payload: {_or_null(encode_bytes(record.value, encoding))}"
    )


def _batch_json(batch: DumpedBatch, encoding: Encoding) -> dict[str, Any]:
    header = batch.header
    value: dict[str, Any] = {
        "position": batch.position,
        "base_offset": header.base_offset,
        "last_offset": header.last_offset,
        "count": header.record_count,
        "base_sequence": header.base_sequence,
        "last_sequence": header.last_sequence,
        "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch,
        "partition_leader_epoch": header.partition_leader_epoch,
        "transactional": header.is_transactional,
        "control": header.is_control,
        "timestamp_type": "LogAppendTime" if header.timestamp_type else "CreateTime",
        "max_timestamp": header.max_timestamp,
        "size_bytes": header.size_bytes,
        "magic": header.magic,
        "compression": _compression_name(header),
        "crc": header.crc,
        "crc_valid": batch.crc_valid,
    }
    if batch.records is not None:
        value["records"] = [
            {
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": encode_bytes(record.key, encoding),
                "value": encode_bytes(record.value, encoding),
                "headers": [
                    {"key": name, "value": encode_bytes(data, encoding)} for name, data in record.headers
                ],
            }
            for record in batch.records
        ]
    if batch.error is not None:
        value["error"] = batch.error
    return value


def _index_entries(path: Path, data: bytes) -> tuple[list[dict[str, int]], int]:
    """The entries of an offset or time index (absolute offsets), and the bytes left over."""
    base_offset = _base_offset_of(path) or 0
    entries: list[dict[str, int]] = []
    if path.suffix == ".index":
        size = _OFFSET_INDEX_ENTRY_BYTES
        for start in range(0, len(data) - size + 1, size):
            relative = int.from_bytes(data[start : start + 4], "big", signed=True)
            position = int.from_bytes(data[start + 4 : start + 8], "big", signed=True)
            entries.append({"offset": base_offset + relative, "position": position})
    else:
        size = _TIME_INDEX_ENTRY_BYTES
        for start in range(0, len(data) - size + 1, size):
            timestamp = int.from_bytes(data[start : start + 8], "big", signed=True)
            relative = int.from_bytes(data[start + 8 : start + 12], "big", signed=True)
            entries.append({"timestamp": timestamp, "offset": base_offset + relative})
    return entries, len(data) % size


def _dump_index(path: Path, out: IO[str], as_json: bool) -> dict[str, Any]:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}") from None
    entries, left_over = _index_entries(path, data)
    if not as_json:
        out.write(f"Dumping {path}\n")
        for entry in entries:
            out.write(" ".join(f"{name}: {value}" for name, value in entry.items()) + "\n")
        if not entries and not left_over:
            out.write("no entries (the segment is smaller than index.interval.bytes, or empty)\n")
        if left_over:
            out.write(f"{left_over} bytes at the end are not a whole entry\n")
    return {"file": str(path), "entries": entries, "left_over_bytes": left_over}


def _dump_log(
    path: Path, out: IO[str], as_json: bool, print_data: bool, encoding: Encoding
) -> dict[str, Any]:
    try:
        stream = path.open("rb")
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}") from None
    batches: list[dict[str, Any]] = []
    tail: dict[str, Any] | None = None
    with stream:
        if not as_json:
            out.write(f"Dumping {path}\n")
            base_offset = _base_offset_of(path)
            if base_offset is not None:
                out.write(f"Log starting offset: {base_offset}\n")
        for item in read_segment(stream, print_data):
            if isinstance(item, TornTail):
                tail = {"position": item.position, "size_bytes": item.size_bytes, "reason": item.reason}
                if not as_json:
                    out.write(
                        f"{item.size_bytes} bytes at position {item.position} are not a whole batch "
                        f"({item.reason}): a write cut short, which recovery truncates\n"
                    )
                break
            if as_json:
                batches.append(_batch_json(item, encoding))
                continue
            out.write(_batch_line(item) + "\n")
            if item.error is not None:
                out.write(f"| records not readable: {item.error}\n")
            for record in item.records or []:
                out.write(_record_line(record, item, encoding) + "\n")
    return {"file": str(path), "batches": batches, "torn_tail": tail}


def _dump(arguments: argparse.Namespace) -> int:
    out = sys.stdout
    as_json = arguments.output == "json"
    for path in arguments.files:
        if path.suffix not in (".log", ".index", ".timeindex"):
            raise UsageError(f"{path}: a segment (.log) or an index (.index, .timeindex) is needed")
    dumped: list[dict[str, Any]] = []
    for path in arguments.files:
        if path.suffix == ".log":
            dumped.append(_dump_log(path, out, as_json, arguments.print_data, arguments.encoding))
        else:
            dumped.append(_dump_index(path, out, as_json))
    if as_json:
        out.write(json.dumps(dumped, indent=2) + "\n")
    return 0
