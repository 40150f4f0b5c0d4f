"""Transactions on one broker, with real clients: what a transactional producer was told (committed,
aborted, fenced) against what read_committed and read_uncommitted consumers read back.

confluent-kafka (librdkafka): commit and abort, many transactions over several partitions, a zombie
producer fenced by a new instance of its transactional id (its open transaction aborted), a
transaction timeout aborting an open transaction and fencing its producer. kafka-python and
aiokafka's transactional producers, each a commit and an abort, read back by kcat with
``isolation.level=read_committed``. DescribeTransactions / ListTransactions through kafka-python's
admin client (confluent-kafka's Python AdminClient has neither).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tests.compat.conftest import BrokerProcess, StartBroker
from tests.compat.support import (
    CONSUME_TIMEOUT_S,
    SentRecord,
    confluent_produce,
    confluent_producer,
    create_topic,
    unique_topic,
)
from tests.compat.txn_support import (
    SENTINEL_KEY,
    TRANSACTION_TIMEOUT_S,
    by_partition,
    commit_or_abort,
    commit_sentinels,
    isolation_consumer,
    kafka_error,
    read_until_sentinels,
    transactional_producer,
    values,
)

# kafka-python 3 loads its protocol schemas with deprecated importlib.resources calls (see
# test_kafka_python_round_trip.py); the suite turns warnings into errors.
KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka import KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata

pytestmark = [
    pytest.mark.compat,
    pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning"),
]

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]

# Few partitions for both internal topics: they are created on first use, inside a test.
INTERNAL_TOPIC_SETTINGS = {
    "transaction.state.log.num.partitions": "5",
    "offsets.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    return dict(INTERNAL_TOPIC_SETTINGS)


def transactional_id(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_confluent_commit_is_read_and_abort_is_not(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("txn-commit-abort")
    create_topic(bootstrap, topic, 2)
    producer = transactional_producer(bootstrap, transactional_id("commit-abort"))
    producer.init_transactions(TRANSACTION_TIMEOUT_S)
    expected_committed: dict[int, list[bytes]] = defaultdict(list)
    expected_all: dict[int, list[bytes]] = defaultdict(list)

    def transaction(label: str, count: int, *, commit: bool) -> None:
        producer.begin_transaction()
        for sequence in range(count):
            value = f"{label}-{sequence}".encode()
            partition = sequence % 2
            producer.produce(topic, key=b"k", value=value, partition=partition)
            expected_all[partition].append(value)
            if commit:
                expected_committed[partition].append(value)
        if commit:
            producer.commit_transaction(TRANSACTION_TIMEOUT_S)
        else:
            assert producer.flush(TRANSACTION_TIMEOUT_S) == 0  # in the log, then aborted
            producer.abort_transaction(TRANSACTION_TIMEOUT_S)

    transaction("committed-first", 50, commit=True)
    transaction("aborted", 50, commit=False)
    transaction("committed-second", 50, commit=True)
    commit_sentinels(producer, topic, 2, "end")

    committed = read_until_sentinels(bootstrap, topic, 2, "end")
    assert by_partition(committed) == dict(expected_committed)
    uncommitted = read_until_sentinels(bootstrap, topic, 2, "end", isolation_level="read_uncommitted")
    assert by_partition(uncommitted) == dict(expected_all)


def test_confluent_many_transactions_over_partitions(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    partitions = 4
    topics = [unique_topic("txn-many-a"), unique_topic("txn-many-b")]
    for topic in topics:
        create_topic(bootstrap, topic, partitions)
    generator = random.Random(20_240_611)
    producer = transactional_producer(bootstrap, transactional_id("many"))
    producer.init_transactions(TRANSACTION_TIMEOUT_S)
    expected_committed: dict[str, dict[int, list[bytes]]] = {topic: defaultdict(list) for topic in topics}
    expected_all: dict[str, dict[int, list[bytes]]] = {topic: defaultdict(list) for topic in topics}
    outcomes = []
    for number in range(40):
        commit = generator.random() < 0.6
        outcomes.append(commit)
        producer.begin_transaction()
        for sequence in range(generator.randrange(1, 40)):
            topic = generator.choice(topics)
            partition = generator.randrange(partitions)
            value = f"txn{number}-{sequence}".encode()
            producer.produce(topic, value=value, partition=partition)
            expected_all[topic][partition].append(value)
            if commit:
                expected_committed[topic][partition].append(value)
        if commit:
            producer.commit_transaction(TRANSACTION_TIMEOUT_S)
        else:
            assert producer.flush(TRANSACTION_TIMEOUT_S) == 0
            producer.abort_transaction(TRANSACTION_TIMEOUT_S)
    assert any(outcomes) and not all(outcomes)
    for topic in topics:
        commit_sentinels(producer, topic, partitions, "end")

    for topic in topics:
        committed = read_until_sentinels(bootstrap, topic, partitions, "end")
        assert by_partition(committed) == {p: v for p, v in expected_committed[topic].items() if v}
        uncommitted = read_until_sentinels(
            bootstrap, topic, partitions, "end", isolation_level="read_uncommitted"
        )
        assert by_partition(uncommitted) == {p: v for p, v in expected_all[topic].items() if v}


FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def test_confluent_zombie_is_fenced_and_its_transaction_aborted(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("txn-zombie")
    create_topic(bootstrap, topic, 2)
    shared_id = transactional_id("zombie")
    zombie = transactional_producer(bootstrap, shared_id)
    zombie.init_transactions(TRANSACTION_TIMEOUT_S)
    zombie.begin_transaction()
    for sequence in range(20):
        zombie.produce(topic, value=b"zombie-%d" % sequence, partition=sequence % 2)
    assert zombie.flush(TRANSACTION_TIMEOUT_S) == 0  # written, in an open transaction

    successor = transactional_producer(bootstrap, shared_id)
    successor.init_transactions(TRANSACTION_TIMEOUT_S)  # fences the zombie, aborts its transaction

    zombie.produce(topic, value=b"zombie-late", partition=0)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(TRANSACTION_TIMEOUT_S)
    error = kafka_error(raised.value)
    assert error.code() in FENCED_CODES, error
    assert error.fatal(), error

    successor.begin_transaction()
    for sequence in range(10):
        successor.produce(topic, value=b"successor-%d" % sequence, partition=sequence % 2)
    successor.commit_transaction(TRANSACTION_TIMEOUT_S)
    commit_sentinels(successor, topic, 2, "end")

    committed = values(read_until_sentinels(bootstrap, topic, 2, "end"))
    assert sorted(committed) == sorted(b"successor-%d" % sequence for sequence in range(10))
    uncommitted = values(read_until_sentinels(bootstrap, topic, 2, "end", isolation_level="read_uncommitted"))
    zombie_written = {value for value in uncommitted if value.startswith(b"zombie-")}
    assert zombie_written >= {b"zombie-%d" % sequence for sequence in range(20)}


# -- consume-transform-produce, killed and restarted ------------------------------------------------

PIPELINE_PARTITIONS = 3
PIPELINE_RECORDS_PER_PARTITION = 400
PIPELINE_KILLS = 6
# The kill schedule; another seed replays another schedule (STROM_PIPELINE_SEED=n pytest ...).
PIPELINE_SEED = int(os.environ.get("STROM_PIPELINE_SEED", "447"))
PIPELINE_RUN_TIMEOUT_S = 30.0


class WorkerProcess:
    """``tests.compat.txn_pipeline_worker`` as a subprocess; its stdout lines read on a thread."""

    def __init__(self, arguments: list[str], log_path: Path) -> None:
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.compat.txn_pipeline_worker", *arguments],
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
            cwd=REPOSITORY_ROOT,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.decode().strip())
        self.lines.put(None)

    def next_line(self, timeout_s: float) -> str | None:
        """The worker's next stdout line; None once it exited."""
        try:
            return self.lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"the worker printed nothing for {timeout_s} s") from None

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.close()

    def close(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(PIPELINE_RUN_TIMEOUT_S)
        self._reader.join(PIPELINE_RUN_TIMEOUT_S)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self._log.close()


def test_consume_transform_produce_killed_and_restarted_is_exactly_once(
    shared_broker: BrokerProcess, tmp_path: Path
) -> None:
    """A worker killed with kill -9 after a seeded number of commits and a seeded delay (so inside a
    transaction, inside a commit, or between two), six times, then run to the end: the output read
    with read_committed holds every input record exactly once, and the group's committed offsets
    are the input's ends."""
    bootstrap = shared_broker.bootstrap
    input_topic = unique_topic("pipeline-in")
    output_topic = unique_topic("pipeline-out")
    group = f"pipeline-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, input_topic, PIPELINE_PARTITIONS)
    create_topic(bootstrap, output_topic, PIPELINE_PARTITIONS)
    producer = confluent_producer(bootstrap, enable_idempotence=True)
    for partition in range(PIPELINE_PARTITIONS):
        confluent_produce(
            producer,
            input_topic,
            [
                SentRecord(sequence, None, b"in-%d-%d" % (partition, sequence), [])
                for sequence in range(PIPELINE_RECORDS_PER_PARTITION)
            ],
            partition=partition,
        )
    ends = [PIPELINE_RECORDS_PER_PARTITION] * PIPELINE_PARTITIONS
    arguments = [bootstrap, input_topic, output_topic, group, f"{group}-txn", ",".join(map(str, ends))]
    generator = random.Random(PIPELINE_SEED)
    log_path = tmp_path / "worker.log"
    for _ in range(PIPELINE_KILLS):
        commits_before_kill = generator.randrange(1, 6)
        # At most a few transactions more before the kill lands: the killed runs together can never
        # reach the input's end (at most 6 x 8 transactions of 20 records, of 1,200).
        worker = WorkerProcess([*arguments, str(commits_before_kill + 3)], log_path)
        try:
            seen = 0
            while seen < commits_before_kill:
                line = worker.next_line(PIPELINE_RUN_TIMEOUT_S)
                assert line is not None and line != "done", f"the worker ended early ({line!r})"
                seen += line.startswith("committed ")
            time.sleep(generator.uniform(0.0, 0.03))  # where in the next transaction it dies
        finally:
            worker.kill()
    worker = WorkerProcess(arguments, log_path)
    try:
        lines = []
        while (line := worker.next_line(PIPELINE_RUN_TIMEOUT_S)) is not None:
            lines.append(line)
        assert worker.process.wait(PIPELINE_RUN_TIMEOUT_S) == 0, log_path.read_text()
        assert lines[-1] == "done"
    finally:
        worker.close()

    sentinel_producer = transactional_producer(bootstrap, transactional_id("pipeline-check"))
    sentinel_producer.init_transactions(TRANSACTION_TIMEOUT_S)
    commit_sentinels(sentinel_producer, output_topic, PIPELINE_PARTITIONS, "end")
    output = read_until_sentinels(bootstrap, output_topic, PIPELINE_PARTITIONS, "end")
    keys = Counter((record.key or b"").decode() for record in output)
    expected = {
        f"{partition}:{offset}"
        for partition in range(PIPELINE_PARTITIONS)
        for offset in range(PIPELINE_RECORDS_PER_PARTITION)
    }
    assert set(keys) == expected, (
        f"missing {sorted(expected - set(keys))[:5]}, extra {sorted(set(keys) - expected)[:5]}"
    )
    assert [key for key, count in keys.items() if count > 1] == []
    for record in output:
        partition, offset = (record.key or b"").decode().split(":")
        assert record.partition == int(partition)
        assert record.value == b"in-%s-%s" % (partition.encode(), offset.encode())

    checker = isolation_consumer(bootstrap, "read_committed", group_id=group)
    try:
        committed = checker.committed(
            [TopicPartition(input_topic, partition) for partition in range(PIPELINE_PARTITIONS)],
            TRANSACTION_TIMEOUT_S,
        )
    finally:
        checker.close()
    assert {found.partition: found.offset for found in committed} == dict(enumerate(ends))


# -- kafka-python, aiokafka, read back by kcat ------------------------------------------------------

KCAT = shutil.which("kcat") or "/usr/bin/kcat"


def kcat_read_committed(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes]]:
    """(partition, key, value) of every record kcat reads with isolation.level=read_committed, to
    the end of every partition (``-e``), in (partition, offset) order."""
    command = [KCAT, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-J", "-q"]
    command += ["-X", "broker.address.family=v4", "-X", "isolation.level=read_committed"]
    completed = subprocess.run(command, capture_output=True, timeout=CONSUME_TIMEOUT_S, check=False)
    assert completed.returncode == 0, completed.stderr.decode(errors="replace")
    read = []
    for line in completed.stdout.decode().splitlines():
        envelope = json.loads(line)
        read.append(
            (
                envelope["partition"],
                envelope["offset"],
                (envelope["key"] or "").encode(),
                (envelope["payload"] or "").encode(),
            )
        )
    read.sort()
    return [(partition, key, value) for partition, _, key, value in read]


def assert_kcat_reads(bootstrap: str, topic: str, partitions: int, expected: dict[int, list[bytes]]) -> None:
    """After a sentinel transaction (so every marker before it is in, confluent-kafka read it), kcat
    with read_committed reads exactly ``expected`` per partition, in order, then the sentinels."""
    sentinel_producer = transactional_producer(bootstrap, transactional_id("kcat-check"))
    sentinel_producer.init_transactions(TRANSACTION_TIMEOUT_S)
    commit_sentinels(sentinel_producer, topic, partitions, "end")
    read_until_sentinels(bootstrap, topic, partitions, "end")
    read: dict[int, list[bytes]] = defaultdict(list)
    for partition, key, value in kcat_read_committed(bootstrap, topic):
        if key != SENTINEL_KEY:
            read[partition].append(value)
    assert dict(read) == {partition: values for partition, values in expected.items() if values}


def test_kafka_python_commit_and_abort_read_by_kcat(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("txn-kafka-python")
    create_topic(bootstrap, topic, 2)
    group = f"kafka-python-txn-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=transactional_id("kafka-python"), linger_ms=5
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for sequence in range(20):
            producer.send(topic, value=b"committed-%d" % sequence, partition=sequence % 2)
        producer.send_offsets_to_transaction(
            {KafkaTopicPartition(topic, 0): OffsetAndMetadata(7, "", -1)}, group
        )
        producer.commit_transaction()

        producer.begin_transaction()
        for sequence in range(20):
            producer.send(topic, value=b"aborted-%d" % sequence, partition=sequence % 2)
        producer.send_offsets_to_transaction(
            {KafkaTopicPartition(topic, 0): OffsetAndMetadata(99, "", -1)}, group
        )
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close()

    assert_kcat_reads(
        bootstrap,
        topic,
        2,
        {p: [b"committed-%d" % s for s in range(20) if s % 2 == p] for p in range(2)},
    )
    assert committed_offsets(bootstrap, group, topic, 1) == {0: 7}


def test_aiokafka_commit_and_abort_read_by_kcat(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("txn-aiokafka")
    create_topic(bootstrap, topic, 2)
    group = f"aiokafka-txn-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, transactional_id=transactional_id("aiokafka")
        )
        await producer.start()
        try:
            async with producer.transaction():
                for sequence in range(20):
                    await producer.send(topic, value=b"committed-%d" % sequence, partition=sequence % 2)
                await producer.send_offsets_to_transaction({AioTopicPartition(topic, 1): 5}, group)
            await producer.begin_transaction()
            for sequence in range(20):
                await producer.send(topic, value=b"aborted-%d" % sequence, partition=sequence % 2)
            await producer.send_offsets_to_transaction({AioTopicPartition(topic, 1): 50}, group)
            await producer.flush()
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(run())
    assert_kcat_reads(
        bootstrap,
        topic,
        2,
        {p: [b"committed-%d" % s for s in range(20) if s % 2 == p] for p in range(2)},
    )
    assert committed_offsets(bootstrap, group, topic, 2) == {0: -1001, 1: 5}


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as a read_committed consumer is told them (OffsetFetch with
    require_stable: a transaction's offsets count once its marker is in)."""
    consumer = isolation_consumer(bootstrap, "read_committed", group_id=group)
    try:
        found = consumer.committed(
            [TopicPartition(topic, partition) for partition in range(partitions)], TRANSACTION_TIMEOUT_S
        )
    finally:
        consumer.close()
    return {partition.partition: partition.offset for partition in found}


# -- a transaction timeout; DescribeTransactions and ListTransactions -------------------------------


def kafka_python_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)


def wait_for_state(admin: KafkaAdminClient, transactional_id: str, state: str) -> Any:
    """The id's description once DescribeTransactions says ``state`` (polled: the coordinator
    acts on its own timer; what is waited for is what the admin client is told)."""
    deadline = time.monotonic() + TRANSACTION_TIMEOUT_S
    while True:
        description = admin.describe_transactions([transactional_id])[transactional_id]
        if description.state == state:
            return description
        assert time.monotonic() < deadline, f"{transactional_id} still {description.state}, not {state}"
        time.sleep(0.05)


def test_transaction_timeout_aborts_and_fences(start_broker: StartBroker) -> None:
    """A producer that leaves its transaction open past transaction.timeout.ms: the coordinator
    aborts it (DescribeTransactions says CompleteAbort, with the epoch bumped), read_committed
    never sees its records, and the producer's next call fails fenced."""
    broker = start_broker(
        {**INTERNAL_TOPIC_SETTINGS, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"}
    )
    bootstrap = broker.bootstrap
    topic = unique_topic("txn-timeout")
    create_topic(bootstrap, topic, 2)
    slow_id = transactional_id("timeout")
    producer = transactional_producer(bootstrap, slow_id, transaction_timeout_ms=1_500)
    producer.init_transactions(TRANSACTION_TIMEOUT_S)
    producer.begin_transaction()
    for sequence in range(10):
        producer.produce(topic, value=b"timed-out-%d" % sequence, partition=sequence % 2)
    assert producer.flush(TRANSACTION_TIMEOUT_S) == 0

    admin = kafka_python_admin(bootstrap)
    try:
        ongoing = admin.describe_transactions([slow_id])[slow_id]
        assert ongoing.state == "Ongoing"
        assert ongoing.transaction_timeout_ms == 1_500
        assert sorted(ongoing.topic_partitions) == [
            KafkaTopicPartition(topic, 0),
            KafkaTopicPartition(topic, 1),
        ]
        listed = [listing for listings in admin.list_transactions().values() for listing in listings]
        assert any(listing.transactional_id == slow_id and listing.state == "Ongoing" for listing in listed)
        aborted = wait_for_state(admin, slow_id, "CompleteAbort")
        assert aborted.producer_id == ongoing.producer_id
        assert aborted.producer_epoch == ongoing.producer_epoch + 1
    finally:
        admin.close()

    with pytest.raises(KafkaException) as raised:
        producer.commit_transaction(TRANSACTION_TIMEOUT_S)
    error = kafka_error(raised.value)
    assert error.code() in FENCED_CODES, error
    assert error.fatal(), error

    checker = transactional_producer(bootstrap, transactional_id("timeout-check"))
    checker.init_transactions(TRANSACTION_TIMEOUT_S)
    commit_sentinels(checker, topic, 2, "end")
    assert read_until_sentinels(bootstrap, topic, 2, "end") == []
    uncommitted = values(read_until_sentinels(bootstrap, topic, 2, "end", isolation_level="read_uncommitted"))
    assert sorted(uncommitted) == sorted(b"timed-out-%d" % sequence for sequence in range(10))


def test_describe_and_list_transactions(shared_broker: BrokerProcess) -> None:
    """kafka-python's admin client (confluent-kafka's Python AdminClient has no transaction calls):
    an open transaction is Ongoing with its partitions, a committed one CompleteCommit with none;
    the listing filters by state and producer id."""
    bootstrap = shared_broker.bootstrap
    topic = unique_topic("txn-describe")
    create_topic(bootstrap, topic, 3)
    open_id = transactional_id("describe-open")
    done_id = transactional_id("describe-done")
    open_producer = transactional_producer(bootstrap, open_id, transaction_timeout_ms=45_000)
    open_producer.init_transactions(TRANSACTION_TIMEOUT_S)
    open_producer.begin_transaction()
    for partition in (0, 2):
        open_producer.produce(topic, value=b"open", partition=partition)
    assert open_producer.flush(TRANSACTION_TIMEOUT_S) == 0
    done_producer = transactional_producer(bootstrap, done_id)
    done_producer.init_transactions(TRANSACTION_TIMEOUT_S)
    done_producer.begin_transaction()
    done_producer.produce(topic, value=b"done", partition=1)
    done_producer.commit_transaction(TRANSACTION_TIMEOUT_S)

    admin = kafka_python_admin(bootstrap)
    try:
        described = admin.describe_transactions([open_id])[open_id]
        assert described.state == "Ongoing"
        assert described.transaction_timeout_ms == 45_000
        assert described.transaction_start_time_ms > 0
        assert sorted(described.topic_partitions) == [
            KafkaTopicPartition(topic, 0),
            KafkaTopicPartition(topic, 2),
        ]
        completed = wait_for_state(admin, done_id, "CompleteCommit")
        assert list(completed.topic_partitions) == []
        assert completed.producer_id != described.producer_id

        def listed(**filters: Any) -> dict[str, str]:
            return {
                listing.transactional_id: listing.state
                for listings in admin.list_transactions(**filters).values()
                for listing in listings
                if listing.transactional_id in (open_id, done_id)
            }

        assert listed() == {open_id: "Ongoing", done_id: "CompleteCommit"}
        assert listed(state_filters=["Ongoing"]) == {open_id: "Ongoing"}
        assert listed(producer_id_filters=[completed.producer_id]) == {done_id: "CompleteCommit"}
        assert listed(duration_filter_ms=3_600_000) == {}
    finally:
        admin.close()
    open_producer.abort_transaction(TRANSACTION_TIMEOUT_S)


# -- the broker restarted mid-transaction -----------------------------------------------------------


@pytest.mark.parametrize("stop", ["sigterm", "kill-9"])
def test_transactions_survive_broker_restart(start_broker: StartBroker, stop: str) -> None:
    """Before the restart: a committed transaction, an aborted one, and one left open. The broker is
    stopped (SIGTERM, or kill -9 with every message flushed) and started again; the open
    transaction carries on and commits (or, if the producer is told to abort, is aborted). Then a
    transaction committed just before a kill -9 (EndTxn answered, its markers maybe not written):
    its records are read after the restart. read_committed reads exactly what was committed."""
    broker = start_broker({**INTERNAL_TOPIC_SETTINGS, "log.flush.interval.messages": "1"})
    bootstrap = broker.bootstrap
    topic = unique_topic(f"txn-restart-{stop}")
    create_topic(bootstrap, topic, 2)
    producer = transactional_producer(bootstrap, transactional_id("restart"))
    producer.init_transactions(TRANSACTION_TIMEOUT_S)
    committed: dict[int, list[bytes]] = defaultdict(list)

    def produce(label: str, count: int) -> list[tuple[int, bytes]]:
        written = [(sequence % 2, b"%s-%d" % (label.encode(), sequence)) for sequence in range(count)]
        for partition, value in written:
            producer.produce(topic, value=value, partition=partition)
        assert producer.flush(TRANSACTION_TIMEOUT_S) == 0
        return written

    def remember(written: list[tuple[int, bytes]]) -> None:
        for partition, value in written:
            committed[partition].append(value)

    producer.begin_transaction()
    remember(produce("committed-before", 20))
    producer.commit_transaction(TRANSACTION_TIMEOUT_S)
    producer.begin_transaction()
    produce("aborted-before", 20)
    producer.abort_transaction(TRANSACTION_TIMEOUT_S)
    producer.begin_transaction()
    spanning = produce("open-before", 20)

    if stop == "sigterm":
        broker.restart()
    else:
        broker.kill()
        broker.start()

    spanning += produce("open-after", 20)
    if commit_or_abort(producer):
        remember(spanning)

    producer.begin_transaction()
    last = produce("committed-then-killed", 20)
    producer.commit_transaction(TRANSACTION_TIMEOUT_S)  # EndTxn answered: the outcome is decided
    remember(last)
    broker.kill()
    broker.start()

    commit_sentinels(producer, topic, 2, "end")
    assert by_partition(read_until_sentinels(bootstrap, topic, 2, "end")) == dict(committed)


@pytest.mark.parametrize(("made_with", "restarted_with"), [("5", "50"), ("50", "5")])
def test_transactions_survive_a_restart_with_another_partition_count(
    start_broker: StartBroker, made_with: str, restarted_with: str
) -> None:
    """__transaction_state made with one transaction.state.log.num.partitions, the broker restarted
    with another: the transactions left open commit, and read_committed reads them."""
    broker = start_broker({**INTERNAL_TOPIC_SETTINGS, "transaction.state.log.num.partitions": made_with})
    bootstrap = broker.bootstrap
    topic = unique_topic("txn-partition-count")
    create_topic(bootstrap, topic, 1)
    producers = []
    for number in range(4):
        producer = transactional_producer(bootstrap, transactional_id(f"count-{number}"))
        producer.init_transactions(TRANSACTION_TIMEOUT_S)
        producer.begin_transaction()
        producer.produce(topic, value=b"open-%d" % number, partition=0)
        assert producer.flush(TRANSACTION_TIMEOUT_S) == 0
        producers.append(producer)
    broker.stop()
    broker.settings["transaction.state.log.num.partitions"] = restarted_with
    broker.start()

    committed = []
    for number, producer in enumerate(producers):
        if commit_or_abort(producer):
            committed.append(b"open-%d" % number)
    assert committed, "no transaction committed after the restart"
    commit_sentinels(producers[0], topic, 1, "end")
    assert values(read_until_sentinels(bootstrap, topic, 1, "end")) == committed
