"""A replicated cluster beside one broker: acks=all on RF=3 against acks=1, and how long writes stop
when a leader fails.

``python -m benchmarks.cluster [--quick] [--producers N] [--rounds R] [--tries T] [--output BENCHMARKS.md] [--no-write]``

Everything runs on 127.0.0.1: a real ZooKeeper (Debian's jar run with java,
``strom.cli.local_zookeeper``), three ``strom broker --zookeeper ... --node-id N`` processes
(``strom.cli.dev_cluster.LocalCluster``, what ``strom cluster up`` runs) and one single-node
``strom broker`` (``benchmarks.harness.Broker``), all alive for the whole run.

- Throughput: N producer processes (confluent-kafka, 100-byte values, no compression, linger 5 ms,
  1 MiB batches; ``benchmarks.run``'s producer) send their share of the records round-robin over
  6 partitions of a fresh topic; the time runs from the moment all start until the last one's
  ``flush()`` returns (every record acknowledged). Three cases with the same client settings apart
  from ``acks``: the single broker with acks=1 (replication factor 1), the cluster with acks=all
  (replication factor 3, each broker leading 2 partitions and following 4) and, to separate the
  cost of copying from the cost of waiting for the copies, the cluster with acks=1 on an RF=3 topic.
  Each round runs every case once, in an order that rotates from round to round; the table shows
  the median of the rounds. Broker CPU is the user + system time of the broker processes during
  the case (all three for the cluster), per record.
- Unavailability after a leader's ``kill -9``: a probe producer (acks=all, idempotent, one record
  at a time: each is sent once the previous one is acknowledged) writes to an RF=3 partition; its
  leader's process is sent SIGKILL; unavailability is the time from the kill until the first
  acknowledgement of a record *sent after the kill* (so written by the new leader). The killed
  broker is restarted and the partition's ISR is whole again before the next try.
- Unavailability after a controlled shutdown: the same probe, the leader is sent SIGTERM (it moves
  its leaderships to the others, then exits); unavailability is the longest the probe waited for
  an acknowledgement from the SIGTERM until the first acknowledgement of a record sent after the
  process exited. The steady-state figure beside it is the same probe's longest wait over as many
  records before the signal.

The probe's client settings are named in the section (librdkafka backs off before resending a
record the old leader refused, and refreshes metadata at its own pace: these are the client's
share of the figure). The results replace the section between ``<!-- cluster:start -->`` and
``<!-- cluster:end -->`` in the output file (appended when the markers are absent).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import itertools
import multiprocessing
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported untyped

from benchmarks.harness import Broker, cpu_seconds
from benchmarks.report import replace_section
from benchmarks.run import CASE_TIMEOUT_S, _produce_worker, machine_description
from strom.cli.dev_cluster import BrokerProcess, LocalCluster, wait_until

RECORD_BYTES = 100
PARTITIONS = 6
BROKERS = 3
# What the bar is measured against: Kafka's published figure for 3x synchronous replication (2014,
# three 6-core machines, 100-byte records), and half of one broker's acks=1 in the same run.
KAFKA_BAR_RECORDS_PER_S = 421_823
SINGLE_BROKER_SHARE_BAR = 0.5
CONTROLLED_SHUTDOWN_BAR_MS = 100
SESSION_TIMEOUT_MS = 6_000  # as `strom cluster up` sets it
CLUSTER_SETTINGS = {
    "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "zookeeper.connection.timeout.ms": "30000",
    # No leadership moves but the ones a try makes (a preferred election would be one).
    "auto.leader.rebalance.enable": "false",
}
SETTLE_TIMEOUT_S = 120.0
# Over benchmarks.run's producer settings, for every case: at most 5 requests in flight per
# connection, the default of Kafka's Java producer (the one Kafka's figure was measured with).
# librdkafka's own default (1,000,000) sends a request every linger.ms whatever is in flight; a
# broker answers a connection's requests one at a time (as Kafka does), so with acks=all the
# requests queue up linger-sized, each waiting for its own round of replication. With 5 in flight
# a request carries what accumulated while the earlier ones were answered, as with the Java client.
THROUGHPUT_CONFIG: dict[str, object] = {"max.in.flight.requests.per.connection": 5}
# The probe: acks=all, one record at a time. Its librdkafka settings keep the client's own waits
# short, so the figures are the cluster's: it resends what the old leader refused after
# retry.backoff.ms (default 100, growing to retry.backoff.max.ms 1000), asks for metadata every
# topic.metadata.refresh.fast.interval.ms (default 100) while a leader is unknown, and tries a dead
# broker again after reconnect.backoff.ms growing to reconnect.backoff.max.ms (default 10000). A
# leader that died stays the known leader until metadata says otherwise, and librdkafka asks for
# metadata about it only now and then (its partition scan runs every second), so the probe asks
# every topic.metadata.refresh.interval.ms (default 300000) as well. And librdkafka connects to a
# broker only once it needs it (enable.sparse.connections): a new leader it had no connection to
# was reached about a second after it was named, so the probe keeps a connection to every broker.
PROBE_CONFIG: dict[str, object] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 0,
    "message.timeout.ms": 120_000,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 100,
    "topic.metadata.refresh.fast.interval.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "topic.metadata.refresh.interval.ms": 100,
    "enable.sparse.connections": False,
}
PROBE_WARM_ACKS = 50  # acknowledgements before each try, so the probe is in its steady state
TRY_TIMEOUT_S = 60.0


def partition_state(cluster: LocalCluster, topic: str, partition: int) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, ISR) of a partition as a client is told."""
    client = AdminClient({"bootstrap.servers": cluster.live_bootstrap, "socket.timeout.ms": 5000})
    found = client.list_topics(topic, timeout=10).topics[topic].partitions[partition]
    return found.leader, list(found.replicas), list(found.isrs)


def whole(cluster: LocalCluster, topic: str, partitions: int) -> bool:
    """Every broker registered and every partition of ``topic`` led with its whole ISR."""
    client = AdminClient({"bootstrap.servers": cluster.live_bootstrap, "socket.timeout.ms": 5000})
    metadata = client.list_topics(topic, timeout=10)
    if len(metadata.brokers) != BROKERS or metadata.controller_id < 0:
        return False
    found = metadata.topics[topic].partitions
    return len(found) == partitions and all(
        p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas) for p in found.values()
    )


def create_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int) -> None:
    client = AdminClient({"bootstrap.servers": bootstrap})
    futures = client.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor)]
    )
    futures[topic].result(60)


# -- throughput ------------------------------------------------------------------------------------


@dataclass
class Throughput:
    case: str
    records: int
    seconds: float
    broker_cpu_s: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def broker_cpu_us_per_record(self) -> float:
        return self.broker_cpu_s / self.records * 1e6


def measure_produce(
    case: str,
    bootstrap: str,
    broker_pids: Sequence[int],
    topic: str,
    count: int,
    producers: int,
    acks: object,
) -> Throughput:
    context = multiprocessing.get_context("fork")
    start = context.Event()
    out = context.Queue()
    share = count // producers
    config = {"acks": acks, **THROUGHPUT_CONFIG}
    workers = [
        context.Process(
            target=_produce_worker,
            args=(bootstrap, topic, PARTITIONS, share, RECORD_BYTES, start, out, config),
        )
        for _ in range(producers)
    ]
    for worker in workers:
        worker.start()
    time.sleep(1.0)  # every worker connected and holding metadata
    cpu_before = sum(cpu_seconds(pid) for pid in broker_pids)
    start.set()
    reports = [out.get(timeout=CASE_TIMEOUT_S) for _ in workers]
    cpu_used = sum(cpu_seconds(pid) for pid in broker_pids) - cpu_before
    for worker in workers:
        worker.join(30)
    assert all(remaining == 0 for _, _, remaining in reports), f"undelivered records: {reports}"
    seconds = max(end for _, end, _ in reports) - min(begin for begin, _, _ in reports)
    return Throughput(case, share * producers, seconds, cpu_used)


SINGLE = "one broker, acks=1, RF=1"
CLUSTER_ALL = "3 brokers, acks=all, RF=3"
CLUSTER_ONE = "3 brokers, acks=1, RF=3"
CASES = (SINGLE, CLUSTER_ALL, CLUSTER_ONE)


def run_throughput(
    single: Broker, cluster: LocalCluster, count: int, producers: int, rounds: int
) -> dict[str, list[Throughput]]:
    cluster_pids = [broker.pid for broker in cluster.brokers.values()]
    targets: dict[str, tuple[str, list[int], int, object]] = {
        SINGLE: (single.bootstrap, [single.process.pid], 1, 1),
        CLUSTER_ALL: (cluster.bootstrap, cluster_pids, BROKERS, "all"),
        CLUSTER_ONE: (cluster.bootstrap, cluster_pids, BROKERS, 1),
    }
    results: dict[str, list[Throughput]] = {case: [] for case in CASES}
    for case, (bootstrap, pids, factor, acks) in targets.items():  # warm-up
        topic = f"warmup-{len(case)}-{factor}-{acks}"
        create_topic(bootstrap, topic, PARTITIONS, factor)
        measure_produce(case, bootstrap, pids, topic, max(count // 10, 100_000), producers, acks)
    for round_index in range(rounds):
        order = CASES[round_index % len(CASES) :] + CASES[: round_index % len(CASES)]
        for case in order:
            bootstrap, pids, factor, acks = targets[case]
            topic = f"bench-{CASES.index(case)}-{round_index}"
            create_topic(bootstrap, topic, PARTITIONS, factor)
            if factor > 1:
                wait_until(
                    functools.partial(whole, cluster, topic, PARTITIONS), f"{topic} led", SETTLE_TIMEOUT_S
                )
            result = measure_produce(case, bootstrap, pids, topic, count, producers, acks)
            results[case].append(result)
            print(
                f"round {round_index + 1} {case:<26} {result.records_per_s:>10,.0f} rec/s"
                f"  broker CPU {result.broker_cpu_us_per_record:.2f} µs/record",
                flush=True,
            )
    return results


# -- unavailability --------------------------------------------------------------------------------


@dataclass
class Probe:
    """One record at a time, each sent once the previous one was acknowledged (or failed)."""

    bootstrap: str
    topic: str
    # (sent, answered, ok) per record, monotonic seconds
    outcomes: list[tuple[float, float, bool]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    errors: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="probe", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, **PROBE_CONFIG, "log_level": 0})
        value = b"p" * RECORD_BYTES
        answers: list[KafkaError | None] = []

        def delivered(error: KafkaError | None, _message: object) -> None:
            answers.append(error)

        while not self.stopping.is_set():
            answers.clear()
            sent = time.monotonic()
            producer.produce(self.topic, value, partition=0, on_delivery=delivered)
            while not answers:
                producer.poll(0.05)
            answered = time.monotonic()
            with self.lock:
                self.outcomes.append((sent, answered, answers[0] is None))
                if answers[0] is not None:
                    self.errors.append(str(answers[0]))
        producer.flush(30)

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(60)

    def snapshot(self) -> list[tuple[float, float, bool]]:
        with self.lock:
            return list(self.outcomes)

    def acknowledged_since(self, moment: float) -> int:
        return sum(1 for sent, _, ok in self.snapshot() if ok and sent >= moment)

    def first_ack_of_record_sent_after(self, moment: float) -> float | None:
        for sent, answered, ok in self.snapshot():
            if ok and sent >= moment:
                return answered
        return None

    def longest_wait(self, start: float, end: float) -> float:
        """The longest time without an acknowledgement between ``start`` and ``end``."""
        longest = 0.0
        previous = start
        for _, answered, ok in self.snapshot():
            if not ok or answered <= start:
                continue
            if answered > end:
                break
            longest = max(longest, answered - previous)
            previous = answered
        return longest

    def steady_longest_wait(self, before: float, records: int) -> float:
        """The longest wait between the ``records`` acknowledgements before ``before``."""
        answered = [a for _, a, ok in self.snapshot() if ok and a < before][-records:]
        return max((b - a for a, b in itertools.pairwise(answered)), default=0.0)


@dataclass
class Try:
    ms: float
    steady_ms: float
    leader: int
    was_controller: bool
    elected_ms: float | None = None  # kill -9: until a surviving broker's metadata names a new leader


def controller_of(cluster: LocalCluster) -> int:
    client = AdminClient({"bootstrap.servers": cluster.live_bootstrap, "socket.timeout.ms": 5000})
    return int(client.list_topics(timeout=10).controller_id)


def heal(cluster: LocalCluster, topic: str) -> None:
    cluster.restart_stopped()
    wait_until(lambda: whole(cluster, topic, 1), "every broker back and the ISR whole", SETTLE_TIMEOUT_S)


def one_try(cluster: LocalCluster, probe: Probe, topic: str, kill: bool) -> Try:
    heal(cluster, topic)
    settled = time.monotonic()
    wait_until(
        lambda: probe.acknowledged_since(settled) >= PROBE_WARM_ACKS,
        "the probe's steady state",
        SETTLE_TIMEOUT_S,
    )
    leader, _, _ = partition_state(cluster, topic, 0)
    was_controller = controller_of(cluster) == leader
    broker: BrokerProcess = cluster.brokers[leader]
    process = broker.process
    assert process is not None
    survivors = AdminClient(
        {
            "bootstrap.servers": ",".join(b.address for n, b in cluster.brokers.items() if n != leader),
            "socket.timeout.ms": 2000,
        }
    )
    elected_ms: float | None = None
    signalled = time.monotonic()
    if kill:
        broker.kill()  # SIGKILL by PID, and reaped
        gone = signalled

        def elected() -> bool:
            found = survivors.list_topics(topic, timeout=2).topics[topic].partitions[0]
            return found.leader not in (leader, -1)

        wait_until(elected, "a new leader in the survivors' metadata", TRY_TIMEOUT_S)
        elected_ms = (time.monotonic() - signalled) * 1000
    else:
        broker.signal(signal.SIGTERM)
        process.wait(TRY_TIMEOUT_S)
        broker.process = None
        gone = time.monotonic()
    wait_until(
        lambda: probe.first_ack_of_record_sent_after(gone) is not None,
        "an acknowledgement from the new leader",
        TRY_TIMEOUT_S,
    )
    first = probe.first_ack_of_record_sent_after(gone)
    assert first is not None
    steady = probe.steady_longest_wait(signalled, PROBE_WARM_ACKS)
    if kill:
        ms = (first - signalled) * 1000
    else:
        ms = probe.longest_wait(signalled, first) * 1000
    print(
        f"{'kill -9' if kill else 'SIGTERM'} of leader {leader}{' (controller)' if was_controller else ''}:"
        f" {ms:,.0f} ms"
        + (f" (new leader in metadata after {elected_ms:,.0f} ms)" if elected_ms is not None else "")
        + f"; steady-state longest wait {steady * 1000:.1f} ms",
        flush=True,
    )
    return Try(ms, steady * 1000, leader, was_controller, elected_ms)


def run_unavailability(cluster: LocalCluster, tries: int) -> tuple[list[Try], list[Try], list[str]]:
    topic = "probe"
    create_topic(cluster.bootstrap, topic, 1, BROKERS)
    heal(cluster, topic)
    probe = Probe(cluster.bootstrap, topic)
    probe.start()
    try:
        killed = [one_try(cluster, probe, topic, kill=True) for _ in range(tries)]
        stopped = [one_try(cluster, probe, topic, kill=False) for _ in range(tries)]
    finally:
        probe.stop()
    return killed, stopped, probe.errors


# -- the report -------------------------------------------------------------------------------------


def machine_load() -> str:
    """How busy the machine is (others' work included): load average, CPU pressure."""
    load = os.getloadavg()
    text = f"load average {load[0]:.1f}"
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()
        text += f", tasks waiting for a CPU {some[2].split('=')[1]}% of the last minute"
    except (OSError, IndexError):
        pass
    return text


def distribution(values: Sequence[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"{ordered[0]:,.0f} / {statistics.median(ordered):,.0f} / {p90:,.0f} / {ordered[-1]:,.0f}"


def render(
    throughput: dict[str, list[Throughput]],
    killed: list[Try],
    stopped: list[Try],
    probe_errors: list[str],
    producers: int,
    rounds: int,
    quick: bool,
    loads: tuple[str, str],
) -> str:
    versions = f"confluent-kafka {confluent_kafka.version()}, librdkafka {confluent_kafka.libversion()[0]}"
    command = "python -m benchmarks.cluster" + (" --quick" if quick else "")
    medians = {
        case: statistics.median(r.records_per_s for r in results) for case, results in throughput.items()
    }
    cpu = {
        case: statistics.median(r.broker_cpu_us_per_record for r in results)
        for case, results in throughput.items()
    }
    records = throughput[SINGLE][0].records
    lines = [
        "## Replicated cluster (`python -m benchmarks.cluster`)",
        "",
        f"Run: {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z} with `{command}`.",
        f"Machine: {machine_description()}. **Two cores shared by everything**: ZooKeeper, the three",
        "brokers of the cluster, the single broker, the producer processes, and whatever else the",
        "machine's other users run at the same time; the cases are compared within this one run.",
        f"Machine load at the start: {loads[0]}; at the end: {loads[1]} (2 would be both cores busy).",
        f"Clients: {versions}; {producers} producer process(es), {records:,} records of"
        f" {RECORD_BYTES} B per case, {PARTITIONS} partitions, linger 5 ms, 1 MiB batches, no"
        " compression, at most 5 requests in flight per connection (Kafka's Java producer's"
        f" default); median of {rounds} round(s), each running every case once.",
        "",
        "| case | records/s (median) | every round | broker CPU µs/record (all brokers) | vs one broker acks=1 |",
        "|---|---:|---|---:|---:|",
    ]
    for case in CASES:
        rounds_text = ", ".join(f"{r.records_per_s:,.0f}" for r in throughput[case])
        lines.append(
            f"| {case} | {medians[case]:,.0f} | {rounds_text} | {cpu[case]:.2f}"
            f" | {medians[case] / medians[SINGLE]:.2f} |"
        )
    acks_all = medians[CLUSTER_ALL]
    share = acks_all / medians[SINGLE]
    kill_bar_ms = SESSION_TIMEOUT_MS + 1000

    def met(ok: bool) -> str:
        return "**met**" if ok else "**not met**"

    kill_ms = [t.ms for t in killed]
    stop_ms = [t.ms for t in stopped]
    lines += [
        "",
        f"Bars: acks=all RF=3 ≥ {KAFKA_BAR_RECORDS_PER_S:,} records/s: {acks_all:,.0f}, {met(acks_all >= KAFKA_BAR_RECORDS_PER_S)};"
        f" ≥ {SINGLE_BROKER_SHARE_BAR:.0%} of one broker's acks=1 in the same run: {share:.0%},"
        f" {met(share >= SINGLE_BROKER_SHARE_BAR)}.",
        "",
        f"Unavailability over {len(killed)} tries each (min / median / p90 / max, ms), RF=3, one partition,"
        f" `zookeeper.session.timeout.ms` {SESSION_TIMEOUT_MS}:",
        "",
        "| event | unavailability, ms | bar | steady-state longest wait, ms (median of tries) | leader was the controller |",
        "|---|---:|---|---:|---:|",
        f"| leader `kill -9`: kill → a surviving broker's metadata names the new leader | {distribution([t.elected_ms or 0.0 for t in killed])}"
        f" | | | |",
        f"| leader `kill -9`: kill → first acks=all write acknowledged by the new leader | {distribution(kill_ms)}"
        f" | ≤ {kill_bar_ms:,} ms: {met(max(kill_ms) <= kill_bar_ms)} | {statistics.median(t.steady_ms for t in killed):.1f}"
        f" | {sum(t.was_controller for t in killed)} of {len(killed)} |",
        f"| leader SIGTERM (controlled shutdown; longest wait for an acknowledgement) | {distribution(stop_ms)}"
        f" | ≤ {CONTROLLED_SHUTDOWN_BAR_MS} ms: {met(max(stop_ms) <= CONTROLLED_SHUTDOWN_BAR_MS)}"
        f" | {statistics.median(t.steady_ms for t in stopped):.1f} | {sum(t.was_controller for t in stopped)} of {len(stopped)} |",
        "",
        "The probe: " + ", ".join(f"`{key}` {value}" for key, value in PROBE_CONFIG.items()) + ";"
        f" {len(probe_errors)} delivery error(s) over all tries"
        + (f" (first: {probe_errors[0]})" if probe_errors else "")
        + ".",
        "",
        "How measured: see the docstring of `benchmarks/cluster.py`.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer records and tries (a smoke run)")
    parser.add_argument("--producers", type=int, default=2, help="producer processes (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the throughput cases (default 3)")
    parser.add_argument("--tries", type=int, default=20, help="tries of each failure (default 20)")
    parser.add_argument("--output", default="BENCHMARKS.md", help="where to write (default BENCHMARKS.md)")
    parser.add_argument("--no-write", action="store_true", help="print only, do not write the output file")
    arguments = parser.parse_args()
    count = 300_000 if arguments.quick else 2_000_000
    rounds = 1 if arguments.quick else arguments.rounds
    tries = 3 if arguments.quick else arguments.tries
    load_at_start = machine_load()
    with tempfile.TemporaryDirectory(prefix="strom-bench-cluster-") as temp:
        work_dir = Path(temp)
        (work_dir / "single").mkdir()
        single = Broker(work_dir / "single")
        cluster = LocalCluster(work_dir / "cluster", BROKERS, settings=CLUSTER_SETTINGS)
        try:
            cluster.start()
            wait_until(
                lambda: (
                    controller_of(cluster) >= 0
                    and len(
                        AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=10).brokers
                    )
                    == BROKERS
                ),
                "every broker registered",
                SETTLE_TIMEOUT_S,
            )
            throughput = run_throughput(single, cluster, count, arguments.producers, rounds)
            killed, stopped, errors = run_unavailability(cluster, tries)
        finally:
            cluster.stop()
            single.stop()
    loads = (load_at_start, machine_load())
    text = render(throughput, killed, stopped, errors, arguments.producers, rounds, arguments.quick, loads)
    print(text)
    if not arguments.no_write:
        replace_section(Path(arguments.output), "cluster", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
