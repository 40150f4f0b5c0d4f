"""The fuzz campaign's canary, a process of its own: produce one record and fetch it back, again
and again, until its standard input closes; then print what it saw as one JSON line.

It runs apart from the fuzzer so that no lock of the fuzzer's interpreter sits between the canary
and the broker. Each round trip is timed twice: as the clock saw it, and less the time the
canary's thread and the broker's threads spent runnable but waiting for a CPU meanwhile
(``/proc/.../schedstat``). On a machine with spare CPUs the two agree; beside CPU burners the
second is what the broker's own work cost the canary — the figure its stall bound is about.

Usage: ``python -m tests.fuzz.canary PORT TOPIC BROKER_PID``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.fetch import FetchRequest, FetchResponse
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.records import Record, build_batch, iter_records
from tests.compat.run_queue import OWN_THREAD, ProcessRunQueueWait, RunQueueWait
from tests.compat.wire import WireClient


def round_trip(client: WireClient, topic: str, sequence: int) -> str | None:
    value = b"canary-%d" % sequence
    batch = build_batch([Record(0, 0, b"canary", value, [])], base_timestamp=int(time.time() * 1000))
    produce = ProduceRequest(
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    [partition] = client.round_trip(produce, ProduceResponse, 9).responses[0].partition_responses
    if partition.error_code != ErrorCode.NONE:
        return f"produce {sequence}: error {partition.error_code}"
    fetch = FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0, fetch_offset=partition.base_offset, partition_max_bytes=1 << 16
                    )
                ],
            )
        ],
    )
    [fetched] = client.round_trip(fetch, FetchResponse, 12).responses[0].partitions
    if fetched.error_code != ErrorCode.NONE:
        return f"fetch {sequence}: error {fetched.error_code}"
    if value not in [record.value for record in iter_records(fetched.records or b"")]:
        return f"fetch {sequence} at offset {partition.base_offset}: record not there"
    return None


@dataclass
class Figures:
    round_trips: int = 0
    longest_s: float = 0.0
    longest_charged_s: float = 0.0
    failures: list[str] = field(default_factory=list)


def run(port: int, topic: str, broker_pid: int, stop: threading.Event) -> Figures:
    own_wait = RunQueueWait(OWN_THREAD)
    broker_wait = ProcessRunQueueWait(broker_pid)
    figures = Figures()
    try:
        with WireClient(port, timeout_s=30.0) as client:
            while not stop.is_set():
                started, own_at, broker_at = time.monotonic(), own_wait(), broker_wait()
                problem = round_trip(client, topic, figures.round_trips)
                took = time.monotonic() - started
                charged = took - (own_wait() - own_at) - (broker_wait() - broker_at)
                figures.longest_s = max(figures.longest_s, took)
                figures.longest_charged_s = max(figures.longest_charged_s, charged)
                if problem:
                    figures.failures.append(problem)
                    break
                figures.round_trips += 1
    except Exception as error:  # the canary's own socket failing is a finding, not a crash
        figures.failures.append(f"canary connection failed: {error!r}")
    return figures


def main() -> None:
    port, topic, broker_pid = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    stop = threading.Event()

    def wait_for_stdin_to_close() -> None:
        sys.stdin.buffer.read()
        stop.set()

    threading.Thread(target=wait_for_stdin_to_close, daemon=True).start()
    print(json.dumps(asdict(run(port, topic, broker_pid, stop))), flush=True)


if __name__ == "__main__":
    main()
