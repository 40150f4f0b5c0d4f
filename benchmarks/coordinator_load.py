"""How fast a broker takes over groups: loading ``__consumer_offsets`` into the group coordinator.

``python -m benchmarks.coordinator_load [--groups 10000] [--offsets 10] [--commits 1] [--output BENCHMARKS.md] [--no-write]``

A broker that becomes leader of an offsets partition replays it into its coordinator before it
answers the partition's groups (COORDINATOR_LOAD_IN_PROGRESS meanwhile). This measures that replay
with the broker's own code (``GroupService.become_coordinator`` on an event loop, the partition
logs on disk in a temporary directory), for:

- 10,000 groups (``--groups``), each Stable with 3 members (consumer protocol, range, real
  subscription and assignment bytes) and ``--offsets`` committed partitions, written as the
  coordinator writes them (one batch per group record, one batch per commit);
- all of them in one partition (one broker taking over one busy partition), and spread over the
  default 50 partitions with this broker becoming leader of all 50 at once (a broker left alone
  after the others died);
- ``--commits`` commits of every offset (1: a compacted log; more: the log before compaction,
  where only the latest commit of each key counts).

The time is from the first ``become_coordinator`` to the last partition answering its groups
again; each case is run ``--rounds`` times on a fresh coordinator over the same files, the median
reported, and every loaded group is checked (members, generation, offsets) against what was written.
The results replace the section between ``<!-- coordinator-load:start -->`` and
``<!-- coordinator-load:end -->`` in the output file.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from benchmarks.report import replace_section
from strom.assignors import Assignment, Subscription, encode_assignment, encode_subscription
from strom.base.clock import SystemClock
from strom.broker.group_topics import BrokerTopics
from strom.broker.groups import OFFSETS_TOPIC_CONFIG, GroupService
from strom.broker.replication import Replication
from strom.coordinator import OFFSETS_TOPIC, CoordinatorConfig, GroupState, partition_for_group
from strom.coordinator.records import (
    CommittedOffset,
    group_key_bytes,
    group_value_bytes,
    offset_key_bytes,
    offset_value_bytes,
)
from strom.protocol.coordinator_records.group_metadata import GroupMetadataValue
from strom.protocol.records import BatchBuilder, parse_batch_header
from strom.storage import LogConfig, LogManager

MEMBERS = 3
TOPIC = "events"
BAR_S = 2.0


@dataclass
class LoadResult:
    groups: int
    partitions: int
    offsets_per_group: int
    commits: int
    records: int
    log_bytes: int
    seconds: list[float]
    cpu_seconds: list[float]

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def median_cpu_s(self) -> float:
        return statistics.median(self.cpu_seconds)


def group_value(group_id: str, offsets: int) -> GroupMetadataValue:
    members = []
    for index in range(MEMBERS):
        member_id = f"consumer-{index}-{group_id}-0b6f6c1e-7b57-4d38-9a55-{index:012d}"
        owned = [(TOPIC, partition) for partition in range(index, offsets, MEMBERS)]
        members.append(
            GroupMetadataValue.MemberMetadata(
                member_id=member_id,
                group_instance_id=None,
                client_id=f"consumer-{index}",
                client_host="/127.0.0.1",
                rebalance_timeout=300_000,
                session_timeout=45_000,
                subscription=encode_subscription(Subscription([TOPIC])),
                assignment=encode_assignment(Assignment(owned)),
            )
        )
    return GroupMetadataValue(
        protocol_type="consumer",
        generation=7,
        protocol="range",
        leader=members[0].member_id,
        current_state_timestamp=1_700_000_000_000,
        members=members,
    )


def write_log(data_dir: Path, groups: int, partitions: int, offsets: int, commits: int) -> tuple[int, int]:
    """Write the groups' records into ``__consumer_offsets`` (``partitions`` partitions); the
    records written and the bytes of the log."""
    clock = SystemClock()
    logs = LogManager(data_dir, LogConfig(), clock)
    logs.load()
    logs.create_topic(OFFSETS_TOPIC, partitions, OFFSETS_TOPIC_CONFIG, internal=True)
    records = 0
    now_ms = clock.wall_ms()

    def append(partition: int, batch: list[tuple[bytes, bytes | None]]) -> None:
        builder = BatchBuilder()
        for key, value in batch:
            builder.append(now_ms, key, value)
        data = bytearray(builder.build())
        partition_log = logs.log(OFFSETS_TOPIC, partition)
        assert partition_log is not None
        partition_log.append(data, [parse_batch_header(data)], now_ms)

    for index in range(groups):
        group_id = f"group-{index}"
        partition = partition_for_group(group_id, partitions)
        append(partition, [(group_key_bytes(group_id), group_value_bytes(group_value(group_id, offsets)))])
        records += 1
        for commit in range(commits):
            batch: list[tuple[bytes, bytes | None]] = [
                (
                    offset_key_bytes(group_id, TOPIC, topic_partition),
                    offset_value_bytes(CommittedOffset(1000 * commit + topic_partition, 3, "", now_ms, -1)),
                )
                for topic_partition in range(offsets)
            ]
            append(partition, batch)
            records += len(batch)
    log_bytes = sum(
        partition_log.size_bytes
        for partition in range(partitions)
        if (partition_log := logs.log(OFFSETS_TOPIC, partition)) is not None
    )
    logs.close()
    return records, log_bytes


async def load_once(
    data_dir: Path, groups: int, partitions: int, offsets: int, commits: int
) -> tuple[float, float]:
    """The load's wall-clock and CPU seconds."""
    clock = SystemClock()
    logs = LogManager(data_dir, LogConfig(), clock)
    logs.load()
    config = CoordinatorConfig(offsets_topic_num_partitions=partitions)
    # Classic groups only: the consumer-protocol groups' view of the topics is never asked.
    topics = BrokerTopics(lambda: cast(Replication, None), dict)
    service = GroupService(config, logs, clock, lambda topic, partition: None, lambda partition: None, topics)
    service.start(load=False)
    started = time.perf_counter()
    started_cpu = time.process_time()
    for partition in range(partitions):
        service.become_coordinator(partition)
    while service.loading_partitions():
        await asyncio.sleep(0)
    elapsed = time.perf_counter() - started
    elapsed_cpu = time.process_time() - started_cpu
    coordinator = service.coordinator
    for index in range(groups):
        group = coordinator.group(f"group-{index}")
        assert group is not None, f"group-{index} not loaded"
        assert group.state is GroupState.STABLE and group.generation_id == 7 and len(group.members) == MEMBERS
        assert len(group.offsets) == offsets
        assert group.offsets[(TOPIC, offsets - 1)].offset == 1000 * (commits - 1) + offsets - 1
    service.shutdown()
    logs.close()
    return elapsed, elapsed_cpu


def measure(groups: int, partitions: int, offsets: int, commits: int, rounds: int) -> LoadResult:
    with tempfile.TemporaryDirectory(prefix="strom-coordinator-load-") as work_dir:
        data_dir = Path(work_dir) / "data"
        records, log_bytes = write_log(data_dir, groups, partitions, offsets, commits)
        timings = [
            asyncio.run(load_once(data_dir, groups, partitions, offsets, commits)) for _ in range(rounds)
        ]
    return LoadResult(
        groups,
        partitions,
        offsets,
        commits,
        records,
        log_bytes,
        [wall for wall, _ in timings],
        [cpu for _, cpu in timings],
    )


def render(results: list[LoadResult], rounds: int, load_before: float, load_after: float) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "## Coordinator load (`python -m benchmarks.coordinator_load`)",
        "",
        f"Run: {now}. Python {platform.python_version()} on {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {load_before:.1f} before and {load_after:.1f} after "
        f"(the machine is shared); median of {rounds} rounds, one process's event loop doing the load.",
        "",
        "| groups | offsets partitions led | offsets per group | commits per offset | records replayed "
        "| log MiB | load time, s | CPU, s | records/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        lines.append(
            f"| {result.groups:,} | {result.partitions} | {result.offsets_per_group} | {result.commits} "
            f"| {result.records:,} | {result.log_bytes / 2**20:.1f} | {result.median_s:.2f} "
            f"| {result.median_cpu_s:.2f} | {result.records / result.median_s:,.0f} |"
        )
    lines += [
        "",
        f"Bar: 10,000 groups with offsets loaded in ≤ {BAR_S:.0f} s. Each group: 3 members (range, "
        "subscription and assignment as the Java client writes them), generation 7; every loaded "
        "group checked against what was written. Load time is from `become_coordinator` to the "
        "last partition answering its groups (COORDINATOR_LOAD_IN_PROGRESS until then); CPU is the "
        "process's CPU time over the same span (the figure a busy shared machine disturbs least).",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--offsets", type=int, default=10, help="committed partitions per group")
    parser.add_argument("--commits", default="1,5", help="commits of every offset, one case per value")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default="BENCHMARKS.md")
    parser.add_argument("--no-write", action="store_true", help="print only")
    arguments = parser.parse_args()
    results = []
    load_before = os.getloadavg()[0]
    for commits in (int(value) for value in arguments.commits.split(",")):
        for partitions in (1, 50):
            result = measure(arguments.groups, partitions, arguments.offsets, commits, arguments.rounds)
            print(
                f"{result.groups} groups in {partitions} partition(s), {commits} commit(s) per offset: "
                f"{result.records} records, load {result.median_s:.3f} s, CPU {result.median_cpu_s:.3f} s "
                f"(rounds {', '.join(f'{s:.3f}' for s in result.seconds)})",
                flush=True,
            )
            results.append(result)
    section = render(results, arguments.rounds, load_before, os.getloadavg()[0])
    print(section)
    if not arguments.no_write:
        replace_section(Path(arguments.output), "coordinator-load", section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
