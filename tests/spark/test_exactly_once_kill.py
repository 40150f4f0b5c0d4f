"""The exactly-once sink through driver crashes: a streaming query (``exactly_once_query.py``, its
own driver process on ``local[2]``) copies a topic with ``exactlyOnce=true``; the test kills the
driver and everything under it (the JVM, the Python workers) with SIGKILL in the middle of a
micro-batch, three times at seeded points, restarting it from its checkpoint each time, then lets
it finish. The output topic, read with read_committed, must hold every input record exactly once.

The kill points (``STROM_EOS_KILL_SEED`` replays another schedule) are of two kinds, each at or
after a chosen micro-batch: *open* — the batch's first write transactions are open and none has
committed; *partial* — some of the batch's tasks have committed their transaction and marker,
others not. A restart replays the batch: the committed tasks must skip it, the others must abort
what the killed run left open and write it. The test watches the checkpoint (``offsets/``,
``commits/``) and the markers and transactions on the broker, never the sink's own logs."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from strom.client.admin import Admin
from strom.client.cluster import TopicPartition
from strom.client.consumer import Consumer
from strom.spark.exactly_once import Marker, transactional_id
from tests.compat.conftest import BrokerProcess
from tests.spark.processes import descendants
from tests.spark.support import create_topic

pytestmark = pytest.mark.spark

SEED = int(os.environ.get("STROM_EOS_KILL_SEED", "20261127"))
QUERY_SCRIPT = Path(__file__).resolve().parent / "exactly_once_query.py"
SOURCE_PARTITIONS = 4
SINK_PARTITIONS = 2
RECORDS_PER_PARTITION = 1500
# 250 records of each source partition per micro-batch: six batches of four tasks each.
RECORDS_PER_TRIGGER = 1000
BATCHES = SOURCE_PARTITIONS * RECORDS_PER_PARTITION // RECORDS_PER_TRIGGER
KILLS = 3
# A driver starting on a loaded two-core machine (the JVM, the session, the first batch).
RUN_DEADLINE_S = 150.0
POLL_INTERVAL_S = 0.03


@dataclass(frozen=True)
class KillPoint:
    batch: int  # the first micro-batch at which the moment is looked for
    moment: str  # "open" or "partial"


def kill_points(seed: int) -> list[KillPoint]:
    rng = random.Random(seed)
    points: list[KillPoint] = []
    batch = 0
    for _ in range(KILLS):
        batch += 1 + rng.randrange(2)  # strictly later each time, and before the last batch
        points.append(KillPoint(min(batch, BATCHES - 2), rng.choice(["open", "partial"])))
    return points


@dataclass(frozen=True)
class Observed:
    batch: int | None  # the micro-batch in progress (in offsets/, not in commits/)
    tasks_committed: int  # tasks whose marker says that batch is written
    open_transactions: int  # the query's transactions in progress


class Watcher:
    """What the test can see of the query from outside: its checkpoint and the broker."""

    def __init__(self, admin: Admin, checkpoint: Path, sink: str) -> None:
        self.admin = admin
        self.checkpoint = checkpoint
        self.marker_partition = TopicPartition(sink, 0)

    def query_id(self) -> str | None:
        try:
            return str(json.loads((self.checkpoint / "metadata").read_text())["id"])
        except (OSError, ValueError, KeyError):
            return None  # not written yet (or being written)

    def _batches(self, log: str) -> set[int]:
        directory = self.checkpoint / log
        if not directory.is_dir():
            return set()
        return {int(entry.name) for entry in directory.iterdir() if entry.name.isdigit()}

    def batch_in_progress(self) -> int | None:
        planned = self._batches("offsets") - self._batches("commits")
        return max(planned) if planned else None

    def committed(self, batch: int) -> bool:
        return batch in self._batches("commits")

    def observe(self) -> Observed:
        query_id = self.query_id()
        batch = self.batch_in_progress()
        if query_id is None or batch is None:
            return Observed(batch, 0, 0)
        prefix = transactional_id(query_id, 0)[:-1]
        open_transactions = sum(
            1
            for listing in self.admin.list_transactions(states=["Ongoing"])
            if listing.transactional_id.startswith(prefix)
        )
        tasks_committed = 0
        for task in range(SOURCE_PARTITIONS):
            committed = self.admin.list_group_offsets(
                transactional_id(query_id, task), [self.marker_partition]
            ).get(self.marker_partition)
            if committed is not None and Marker.from_offset(committed).batch >= batch:
                tasks_committed += 1
        return Observed(batch, tasks_committed, open_transactions)


def reached(point: KillPoint, seen: Observed) -> bool:
    if seen.batch is None or seen.batch < point.batch:
        return False
    if point.moment == "open":
        return seen.tasks_committed == 0 and seen.open_transactions > 0
    return 0 < seen.tasks_committed < SOURCE_PARTITIONS


def start_query(
    bootstrap: str, source: str, sink: str, checkpoint: Path, log: Path
) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        str(QUERY_SCRIPT),
        bootstrap,
        source,
        sink,
        str(checkpoint),
        str(RECORDS_PER_TRIGGER),
    ]
    with log.open("ab") as output:
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, only not reaped yet


def kill_driver(driver: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver and every process under it (its JVM, Spark's Python workers) at once."""
    tree = descendants(driver.pid)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    driver.wait(30)
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in tree):
        assert time.monotonic() < deadline, (
            f"processes {sorted(p for p in tree if alive(p))} outlived SIGKILL"
        )
        time.sleep(0.05)


def read_all(bootstrap: str, topic: str, isolation_level: str) -> list[bytes | None]:
    with Consumer(
        {"bootstrap.servers": bootstrap, "isolation.level": isolation_level, "auto.offset.reset": "earliest"}
    ) as consumer:
        partitions = [TopicPartition(topic, partition) for partition in range(SINK_PARTITIONS)]
        consumer.assign(partitions)
        ends = consumer.end_offsets(partitions)
        values: list[bytes | None] = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            assert time.monotonic() < deadline, f"{topic} not read to {ends} in time ({len(values)} read)"
            values.extend(record.value for record in consumer.poll(timeout_ms=200))
    return values


def log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


# Four driver starts (about 30 s each on a loaded two-core machine, most of it the JVM and Spark's
# first Python workers) and about a dozen micro-batches: ~3 minutes, more than the default bound.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_query_killed_three_times_mid_batch_writes_every_record_exactly_once(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    bootstrap = shared_broker.bootstrap
    source, sink = "eos-kill-in", "eos-kill-out"
    create_topic(bootstrap, source, SOURCE_PARTITIONS)
    create_topic(bootstrap, sink, SINK_PARTITIONS)
    from strom.client.producer import Producer

    sent: list[bytes] = []
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 20}) as producer:
        for index in range(SOURCE_PARTITIONS * RECORDS_PER_PARTITION):
            value = f"record-{index:05d}".encode()
            producer.send(source, value, key=f"key-{index % 97}", partition=index % SOURCE_PARTITIONS)
            sent.append(value)
        producer.flush(60)

    checkpoint = tmp_path / "checkpoint"
    log = tmp_path / "query.log"
    points = kill_points(SEED)
    post_mortems: list[tuple[KillPoint, Observed, bool]] = []
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        watcher = Watcher(admin, checkpoint, sink)
        for point in points:
            driver = start_query(bootstrap, source, sink, checkpoint, log)
            try:
                deadline = time.monotonic() + RUN_DEADLINE_S
                while not reached(point, watcher.observe()):
                    assert driver.poll() is None, (
                        f"seed {SEED}: the query ended ({driver.returncode}) before {point}:\n{log_tail(log)}"
                    )
                    assert time.monotonic() < deadline, f"seed {SEED}: {point} not reached:\n{log_tail(log)}"
                    time.sleep(POLL_INTERVAL_S)
            finally:
                kill_driver(driver)
            # Everything is dead now: what it left behind no longer moves.
            after = watcher.observe()
            assert after.batch is not None and after.batch >= point.batch
            post_mortems.append((point, after, watcher.committed(after.batch)))

        finished = start_query(bootstrap, source, sink, checkpoint, log)
        try:
            assert finished.wait(RUN_DEADLINE_S) == 0, f"seed {SEED}: the last run failed:\n{log_tail(log)}"
        finally:
            if finished.poll() is None:
                kill_driver(finished)
        query_id = watcher.query_id()
        assert query_id is not None
        assert watcher.committed(BATCHES - 1) and watcher.batch_in_progress() is None
        prefix = transactional_id(query_id, 0)[:-1]
        left_open = [
            listing.transactional_id
            for listing in admin.list_transactions(states=["Ongoing"])
            if listing.transactional_id.startswith(prefix)
        ]
        assert left_open == []

    summary = "; ".join(
        f"{point.moment} at batch >= {point.batch}: killed in batch {seen.batch} with "
        f"{seen.tasks_committed}/{SOURCE_PARTITIONS} tasks committed, {seen.open_transactions} open"
        for point, seen, _ in post_mortems
    )
    print(f"seed {SEED}: {summary}")  # shown with -s, and in the report of a failure
    # Each kill landed inside a micro-batch (Spark had not recorded it as done), and at least one
    # with some of its tasks committed: the restart had to skip those and write only the others.
    assert not any(batch_done for _, _, batch_done in post_mortems), f"seed {SEED}: {summary}"
    assert any(0 < seen.tasks_committed < SOURCE_PARTITIONS for _, seen, _ in post_mortems), (
        f"seed {SEED}: {summary}"
    )

    committed = read_all(bootstrap, sink, "read_committed")
    assert len(committed) == len(sent), f"seed {SEED}: {summary}"
    assert Counter(committed) == Counter(sent), f"seed {SEED}: {summary}"
    # Read uncommitted, the log holds nothing else: whatever a kill left in an open transaction
    # (records, if its tasks had written any before the kill; a transaction is open from its first
    # AddPartitionsToTxn on) are copies of the input, which the abort took back above.
    everything = read_all(bootstrap, sink, "read_uncommitted")
    assert set(everything) == set(sent), f"seed {SEED}: {summary}"
    assert len(everything) >= len(committed), f"seed {SEED}: {summary}"
