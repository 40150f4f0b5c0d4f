"""A produced batch that decompresses to hundreds of MiB stalls nobody: a few KiB on the wire (zstd
or gzip of zeros) that decompress to exactly ``limits.decompressed_batch_bytes_max`` are checked
in a worker thread while a probe connection doing ApiVersions round trips every few milliseconds
keeps being answered (the probe and the bounds of ``test_admin_stalls``). Before the check moved
off the event loop such a batch held every client for seconds (zstd ~1.5 s, gzip ~10 s on the
loaded test machine).

The same partition's next produce, sent from another connection while the large batch is being
checked, is appended after it; one byte more than the cap is refused with CORRUPT_MESSAGE (strom's
bound: Kafka decompresses without one) and leaves nothing behind.
"""

from __future__ import annotations

import fcntl
import struct
import termios
import time

import pytest

from strom.base import limits
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.records import CompressionType, compress
from tests.poison_batches import assemble, record

from .conftest import StartBroker
from .support import unique_topic
from .test_admin_stalls import (
    LOOP_STALL_BOUND_MS,
    PROBE_ROUND_TRIPS_MIN,
    PROBE_STALL_BOUND_MS,
    Probe,
    broker_stalls_ms,
    log_stamp_now,
)
from .wire import WireClient

pytestmark = [pytest.mark.compat, pytest.mark.slow]

CAP_BYTES = limits.decompressed_batch_bytes_max
VALUE_BYTES = 1 << 20
PRODUCE_VERSION = 9
# Decompressing and checking 256 MiB takes seconds on a loaded machine; the answer may take that.
PRODUCE_TIMEOUT_S = 120.0


def records_filling(size: int) -> tuple[bytes, int]:
    """Records with values of zeros filling exactly ``size`` bytes; and how many there are."""
    parts: list[bytes] = []
    total = 0
    full = len(record(1000, value=bytes(VALUE_BYTES)))
    while size - total > 2 * full:
        part = record(len(parts), value=bytes(VALUE_BYTES))
        parts.append(part)
        total += len(part)
    rest = size - total
    value_bytes = rest - 16
    while (last := len(record(len(parts), value=bytes(value_bytes)))) != rest:
        value_bytes += rest - last
    parts.append(record(len(parts), value=bytes(value_bytes)))
    return b"".join(parts), len(parts)


def bomb(codec: CompressionType, size: int) -> tuple[bytes, int]:
    payload, count = records_filling(size)
    assert len(payload) == size
    return assemble(compress(codec, payload), count=count, attributes=int(codec)), count


def produce_request(topic: str, batch: bytes) -> ProduceRequest:
    return ProduceRequest(
        acks=1,
        timeout_ms=int(PRODUCE_TIMEOUT_S * 1000),
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )


def wait_until_delivered(client: WireClient) -> None:
    """Until every byte sent on ``client`` has reached the broker's host (none left unacknowledged
    in the socket's send queue): a frame sent on another connection after that arrives later."""
    deadline = time.monotonic() + PRODUCE_TIMEOUT_S
    while struct.unpack("i", fcntl.ioctl(client.sock.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]:
        assert time.monotonic() < deadline, "the broker does not read the request"
        time.sleep(0.005)


def answer(client: WireClient, correlation_id: int) -> ProduceResponse.PartitionProduceResponse:
    response: ProduceResponse = client.read_response(ProduceResponse, 0, PRODUCE_VERSION, correlation_id)
    return response.responses[0].partition_responses[0]


@pytest.mark.parametrize("codec", [CompressionType.ZSTD, CompressionType.GZIP], ids=["zstd", "gzip"])
def test_a_batch_decompressing_to_the_cap_stalls_no_client(
    start_broker: StartBroker, codec: CompressionType
) -> None:
    at_cap, count = bomb(codec, CAP_BYTES)
    beyond_cap, _ = bomb(codec, CAP_BYTES + 1)
    assert len(at_cap) < limits.batch_bytes_max, "small on the wire: within max.message.bytes"
    small = assemble(record(0, value=b"after"), count=1)
    broker = start_broker()
    topic = unique_topic("bomb")
    with (
        Probe(broker.port, broker.pid) as probe,
        WireClient(broker.port, timeout_s=PRODUCE_TIMEOUT_S) as producer,
        WireClient(broker.port, timeout_s=PRODUCE_TIMEOUT_S) as other,
    ):
        created = producer.round_trip(
            CreateTopicsRequest(
                topics=[
                    CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1, replication_factor=1)
                ],
                timeout_ms=30_000,
            ),
            CreateTopicsResponse,
            7,
        ).topics[0]
        assert created.error_code == ErrorCode.NONE, created
        time.sleep(0.2)  # the probe is connected and answered
        since = log_stamp_now()
        probe.measure()
        started = time.perf_counter()
        large_id = producer.send(produce_request(topic, at_cap), PRODUCE_VERSION)
        wait_until_delivered(producer)
        # The same partition from another connection while the large batch is being checked.
        small_id = other.send(produce_request(topic, small), PRODUCE_VERSION)
        large = answer(producer, large_id)
        at_cap_s = time.perf_counter() - started
        after = answer(other, small_id)
        started = time.perf_counter()
        refused = producer.round_trip(produce_request(topic, beyond_cap), ProduceResponse, PRODUCE_VERSION)
        beyond_cap_s = time.perf_counter() - started
        end = other.round_trip(produce_request(topic, small), ProduceResponse, PRODUCE_VERSION)
    assert probe.error is None, probe.error
    assert (large.error_code, large.base_offset) == (ErrorCode.NONE, 0), large
    assert (after.error_code, after.base_offset) == (ErrorCode.NONE, count), "appended after the large batch"
    [refused_partition] = refused.responses[0].partition_responses
    assert refused_partition.error_code == ErrorCode.CORRUPT_MESSAGE, refused_partition
    assert f"exceeds {CAP_BYTES} bytes" in (refused_partition.error_message or "")
    [end_partition] = end.responses[0].partition_responses
    assert end_partition.base_offset == count + 1, "the refused batch left nothing behind"
    stalls = broker_stalls_ms(broker.log_text(), since)
    probe_ms, charged_ms = probe.longest_gap_s * 1000, probe.longest_charged_gap_s * 1000
    print(
        f"\n{codec.name}: {len(at_cap):,} B on the wire -> {CAP_BYTES:,} B of {count} records, appended in "
        f"{at_cap_s:.2f} s; one byte more refused in {beyond_cap_s:.2f} s; probe: {probe.round_trips} "
        f"round trips, longest gap {probe_ms:.0f} ms ({charged_ms:.0f} ms less CPU waits); broker loop: worst logged stall {max(stalls, default=0)} ms"
    )
    assert probe.round_trips >= PROBE_ROUND_TRIPS_MIN
    assert max(stalls, default=0) < LOOP_STALL_BOUND_MS, f"the broker's event loop stalled {stalls} ms"
    assert charged_ms < PROBE_STALL_BOUND_MS, (
        f"the probe waited {probe_ms:.0f} ms ({charged_ms:.0f} ms less CPU waits)"
    )
