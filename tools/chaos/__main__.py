"""``python -m tools.chaos [--seed N] [--duration S] [--faults kill,pause,...] [--output DIR] [--reassign]``

Starts a ZooKeeper and three strom brokers on 127.0.0.1 (every link between brokers, clients and
ZooKeeper through one fault proxy), runs an idempotent acks=all workload, a consumer group
committing after processing and admin operations, injects the faults the seed schedules for
``--duration`` seconds, heals everything, and checks from what the clients were told: nothing
acknowledged lost, no duplicate, consumption contiguous, committed offsets never backwards, no
partition owned twice in a generation, the cluster converged with identical replicas. With
``--reassign`` the admin work also moves replicas of the topic between the brokers (a partition
shrinks to two replicas, or grows back to three) while the faults run, and every partition goes
back to every broker before the convergence check. Prints a
summary table; writes the timeline (JSON, and PNG with matplotlib) to ``--output``. Exit status 1
on any violation. See docs/chaos.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from .campaign import Settings, run, summary
from .schedule import FAULT_KINDS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--seed", type=int, default=1, help="the fault schedule's seed (default 1)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of faults (default 60)")
    parser.add_argument(
        "--faults",
        default=",".join(FAULT_KINDS),
        help=f"kinds of fault to draw from (default all: {','.join(FAULT_KINDS)})",
    )
    parser.add_argument("--output", type=Path, default=Path("chaos-output"), help="where the timeline goes")
    parser.add_argument(
        "--work-dir", type=Path, help="the cluster's data and logs (default: a temporary directory)"
    )
    parser.add_argument(
        "--reassign",
        action="store_true",
        help="also move replicas of the topic while the faults run (AlterPartitionReassignments), "
        "and every partition back to every broker before the convergence check",
    )
    arguments = parser.parse_args(argv)
    kinds = tuple(kind.strip() for kind in arguments.faults.split(",") if kind.strip())
    unknown = sorted(set(kinds) - set(FAULT_KINDS))
    if unknown:
        parser.error(f"unknown fault kind(s) {unknown}; known: {', '.join(FAULT_KINDS)}")
    with tempfile.TemporaryDirectory(prefix="strom-chaos-") as scratch:
        work_dir = arguments.work_dir or Path(scratch) / "cluster"
        outcome = run(
            Settings(
                arguments.seed,
                arguments.duration,
                work_dir,
                arguments.output,
                kinds=kinds,
                reassign=arguments.reassign,
            )
        )
    print(summary(outcome))
    return 1 if outcome.violations else 0


if __name__ == "__main__":
    sys.exit(main())
