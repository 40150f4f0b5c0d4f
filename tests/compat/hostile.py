"""Connections that misbehave on purpose, for the resource-bound tests: a partition filled with tens
of MB over the wire, sockets that pipeline Fetches and never read, a peer that sends a frame a byte
at a time, and the broker's resident memory read from /proc."""

from __future__ import annotations

import socket
from pathlib import Path

from strom.protocol.headers import encode_request
from strom.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from strom.protocol.messages.fetch import FetchRequest
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.records import build_batch
from strom.protocol.records.batch import Record
from tests.compat.wire import WireClient

MIB = 1024 * 1024
# Records of 1000 bytes, 900 to a batch: just under Kafka's default message.max.bytes.
RECORD_VALUE_BYTES = 1000
RECORDS_PER_BATCH = 900
FETCH_VERSION = 12
PRODUCE_VERSION = 9
CREATE_TOPICS_VERSION = 7


def rss_bytes(pid: int) -> int:
    """Resident memory of a process now (VmRSS in /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS line for process {pid}")


def create_topic(client: WireClient, topic: str, partitions: int = 1) -> None:
    request = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=1)
        ],
        timeout_ms=10_000,
    )
    response = client.round_trip(request, CreateTopicsResponse, CREATE_TOPICS_VERSION)
    assert response.topics[0].error_code == 0, response


def fill_partition(port: int, topic: str, total_bytes: int) -> int:
    """Create ``topic`` (one partition) and append batches of about 0.9 MB until it holds
    ``total_bytes``; returns the number of records written."""
    value = b"v" * RECORD_VALUE_BYTES
    records = [
        Record(offset_delta=i, timestamp_delta=0, key=None, value=value) for i in range(RECORDS_PER_BATCH)
    ]
    batch = build_batch(records, base_timestamp=1_700_000_000_000)
    written = 0
    with WireClient(port, timeout_s=60) as client:
        create_topic(client, topic)
        while written * RECORD_VALUE_BYTES < total_bytes:
            request = ProduceRequest(
                acks=1,
                timeout_ms=30_000,
                topic_data=[
                    ProduceRequest.TopicProduceData(
                        name=topic,
                        partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)],
                    )
                ],
            )
            response = client.round_trip(request, ProduceResponse, PRODUCE_VERSION)
            assert response.responses[0].partition_responses[0].error_code == 0, response
            written += RECORDS_PER_BATCH
    return written


def fetch_frame(topic: str, correlation_id: int, fetch_bytes: int) -> bytes:
    """A Fetch from offset 0 that asks for up to ``fetch_bytes`` of the partition at once."""
    request = FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=fetch_bytes,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=fetch_bytes)
                ],
            )
        ],
    )
    return encode_request(
        FetchRequest.API_KEY, FETCH_VERSION, correlation_id, "never-reads", request.encode(FETCH_VERSION)
    )


class NeverReadingFetcher:
    """A connection that pipelines Fetch requests for a big partition and never reads an answer.

    Its receive buffer is kept small so the broker's answers pile up on the broker's side, not in
    this process's kernel buffers. ``pump()`` sends as much of the remaining requests as the socket
    takes without blocking; call it repeatedly.
    """

    def __init__(self, port: int, topic: str, requests: int, fetch_bytes: int) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setblocking(False)
        self._pending = b"".join(fetch_frame(topic, index + 1, fetch_bytes) for index in range(requests))
        self.sent_bytes = 0

    @property
    def total_bytes(self) -> int:
        return len(self._pending)

    def pump(self) -> None:
        while self.sent_bytes < len(self._pending):
            try:
                sent = self.sock.send(memoryview(self._pending)[self.sent_bytes : self.sent_bytes + 65536])
            except BlockingIOError:
                return
            self.sent_bytes += sent

    def close(self) -> None:
        self.sock.close()
