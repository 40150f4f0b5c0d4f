"""How long the server-side assignors take, at the sizes the coordinator must handle on its event
loop (a benchmark, not a test: no bound is asserted; pytest does not collect this file).

    PYTHONPATH=src:. python -m tests.unit.assignors.server.bench_server_assignors [--repeat N]

Every scenario runs ``repeat`` times and prints the median and the worst wall-clock time and the
median CPU time of the process, in milliseconds (on a busy machine the wall clock also counts the
time other processes held the CPU). The
"join", "leave" and "grow" scenarios start from the assignor's own result for the fresh group, as the
coordinator does (the current target is the previous assignment).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

from strom.assignors.server import (
    SERVER_ASSIGNORS,
    GroupSpec,
    MemberSpec,
    TargetAssignment,
    TopicSpec,
    get_server_assignor,
)

RACKS = ("rack-a", "rack-b", "rack-c")


def make_group(
    member_count: int, topic_count: int, partitions_per_topic: int, racks: bool, heterogeneous: bool
) -> GroupSpec:
    topic_ids = [uuid.UUID(int=index + 1) for index in range(topic_count)]
    topics = {
        topic_id: TopicSpec(
            topic_id,
            f"topic-{index}",
            partitions_per_topic,
            # Replication factor 2 over three racks: each member is local to two thirds of them.
            tuple(frozenset({RACKS[p % 3], RACKS[(p + 1) % 3]}) for p in range(partitions_per_topic))
            if racks
            else (),
        )
        for index, topic_id in enumerate(topic_ids)
    }
    members = {}
    for index in range(member_count):
        member_id = f"member-{index:05d}"
        # Heterogeneous: member i subscribes to the first (i mod topics) + 1 topics.
        subscribed = topic_ids[: index % topic_count + 1] if heterogeneous else topic_ids
        members[member_id] = MemberSpec(
            member_id, None, RACKS[index % 3] if racks else None, frozenset(subscribed)
        )
    return GroupSpec(members, topics)


def with_current(group: GroupSpec, result: dict[str, TargetAssignment]) -> GroupSpec:
    return replace(
        group,
        members={mid: replace(m, assigned=result.get(mid, {})) for mid, m in group.members.items()},
    )


def timed(run: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(repeat):
        wall_start, cpu_start = time.perf_counter(), time.process_time()
        run()
        cpu.append((time.process_time() - cpu_start) * 1000)
        wall.append((time.perf_counter() - wall_start) * 1000)
    return statistics.median(wall), max(wall), statistics.median(cpu)


def scenarios(group: GroupSpec, name: str) -> dict[str, GroupSpec]:
    fresh_result = get_server_assignor(name).assign(group)
    settled = with_current(group, fresh_result)
    first = next(iter(group.members.values()))
    joined = replace(
        settled,
        members={**settled.members, "joiner": replace(first, member_id="joiner", assigned={})},
    )
    left = replace(settled, members={mid: m for mid, m in settled.members.items() if mid != first.member_id})
    grown = replace(
        settled,
        topics={
            tid: replace(
                topic,
                partition_count=topic.partition_count + 10,
                partition_racks=topic.partition_racks
                + tuple(frozenset({RACKS[p % 3]}) for p in range(10)) * bool(topic.partition_racks),
            )
            for tid, topic in settled.topics.items()
        },
    )
    # The worst start: one member holds every partition (a group that grew from one member at once).
    hog = next(mid for mid, m in group.members.items() if len(m.subscribed_topic_ids) == len(group.topics))
    everything = {tid: frozenset(range(topic.partition_count)) for tid, topic in group.topics.items()}
    one_held_all = replace(
        group,
        members={
            mid: replace(m, assigned=everything if mid == hog else {}) for mid, m in group.members.items()
        },
    )
    return {
        "fresh": group,
        "join": joined,
        "leave": left,
        "grow+10/topic": grown,
        "one held all": one_held_all,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    sizes = [
        ("10 members x 900 partitions (1 topic)", 10, 1, 900),
        ("1,000 members x 10,000 partitions (10 topics)", 1000, 10, 1000),
    ]
    print(
        f"{'assignor':8} {'group':46} {'racks':5} {'subs':5} {'scenario':14} "
        f"{'wall median':>11} {'wall max':>8} {'cpu median':>10}"
    )
    for label, members, topics, partitions in sizes:
        for racks in (False, True):
            for heterogeneous in (False, True):
                if topics == 1 and heterogeneous:
                    continue
                group = make_group(members, topics, partitions, racks, heterogeneous)
                for name in sorted(SERVER_ASSIGNORS, reverse=True):
                    for scenario, spec in scenarios(group, name).items():
                        assignor = get_server_assignor(name)
                        median, worst, cpu = timed(lambda: assignor.assign(spec), args.repeat)  # noqa: B023
                        print(
                            f"{name:8} {label:46} {'yes' if racks else 'no':5} "
                            f"{'mixed' if heterogeneous else 'same':5} {scenario:14} "
                            f"{median:11.1f} {worst:8.1f} {cpu:10.1f}"
                        )


if __name__ == "__main__":
    main()
