"""Seeded random runs of producers against one coordinator whose log, marker deliveries and
producer id allocations are delayed, fail, and whose partitions move away and back.

Invariants, checked as the run goes (from what was written and what clients were told):
- every record an id gets in __transaction_state is a move the transition table allows from its
  previous record (a new or expired id starts with Empty) — so at most one transaction per id is
  open, and a new one begins only once the previous one is complete;
- (producer id, epoch) never goes backwards in an id's records, nor in what InitProducerId answers;
- the coordinator aborts a transaction on its own (timeout, a new instance) only with the
  producer's epoch bumped, so that producer is fenced;
- markers are written only while the id's last record is the matching PrepareCommit/PrepareAbort
  (so a committed transaction's markers are all COMMIT and an aborted one's all ABORT), and
  Complete* is written only once every partition of the transaction has its marker (or is gone);
- no request is answered NONE unless the id's durable record holds the producer id and epoch the
  request used (nobody is told NONE with a fenced epoch);
- every request is answered exactly once.
At the end, with the faults turned off and everything delivered, a coordinator loading the log
holds exactly what the live one holds (replay equals live).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from strom.base.clock import ManualClock
from strom.coordinator import ManualTimer
from strom.coordinator.transactions import (
    ALLOWED_PREVIOUS,
    InitProducerIdResult,
    TopicPartition,
    TransactionCoordinator,
    TransactionCoordinatorConfig,
    TransactionMarkers,
    TransactionSnapshot,
    TransactionState,
)
from strom.coordinator.transactions.records import decode_key, decode_value
from strom.coordinator.transactions.state import COMPLETED_STATES
from strom.protocol.errors import ErrorCode
from tests.unit.coordinator.transactions.harness import FakeAllocator, Harness, offsets_partition_for

Record = tuple[bytes, bytes | None]

CONFIG = TransactionCoordinatorConfig(
    transaction_state_log_num_partitions=2,
    transaction_max_timeout_ms=6_000,
    transactional_id_expiration_ms=20_000,
    transaction_abort_timed_out_transaction_cleanup_interval_ms=1_000,
    transaction_remove_expired_transaction_cleanup_interval_ms=5_000,
    transaction_marker_retry_backoff_ms=50,
)
TRANSACTIONAL_IDS = ("t0", "t1", "t2", "t3")
TOPIC_PARTITIONS = [TopicPartition(topic, partition) for topic in ("a", "b") for partition in range(3)]
WRITE_ERRORS = [ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT]
MARKER_ERRORS = [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NETWORK_EXCEPTION]


class InvariantBroken(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise InvariantBroken(message)


@dataclass
class PendingAppend:
    records: list[Record]
    on_complete: Callable[[ErrorCode], None]
    error: ErrorCode
    landed: bool = False


@dataclass
class World:
    """What was written and what clients were told, per transactional id."""

    last: dict[str, TransactionSnapshot | None] = field(default_factory=dict)
    highest: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Since the id's last Prepare record: partitions whose marker of that decision is written.
    marked: dict[str, set[TopicPartition]] = field(default_factory=dict)
    answered_init: dict[str, tuple[int, int]] = field(default_factory=dict)
    records_landed: int = 0
    markers_landed: int = 0
    fences: int = 0
    # EndTxn(abort) requests sent: (transactional id, producer id, epoch).
    aborts_asked: set[tuple[str, int, int]] = field(default_factory=set)

    def on_record(self, key: bytes, value: bytes | None) -> None:
        transactional_id = decode_key(key)
        previous = self.last.get(transactional_id)
        self.records_landed += 1
        if value is None:
            check(
                previous is not None and previous.state in COMPLETED_STATES,
                f"{transactional_id}: tombstone after {previous}",
            )
            self.last[transactional_id] = None
            return
        snapshot = decode_value(value)
        if previous is None:
            check(
                snapshot.state is TransactionState.EMPTY and snapshot.producer_epoch == 0,
                f"{transactional_id}: first record {snapshot}",
            )
        else:
            check(
                previous.state in ALLOWED_PREVIOUS[snapshot.state],
                f"{transactional_id}: {previous.state.value} -> {snapshot.state.value}",
            )
        now = (snapshot.producer_id, snapshot.producer_epoch)
        check(
            now >= self.highest.get(transactional_id, (-1, -1)),
            f"{transactional_id}: epoch went back to {now}",
        )
        self.highest[transactional_id] = now
        if snapshot.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
            self.marked[transactional_id] = set()
        if previous is not None and snapshot.state is TransactionState.PREPARE_ABORT:
            self.fences += snapshot.producer_epoch - previous.producer_epoch
            asked = (transactional_id, snapshot.producer_id, snapshot.producer_epoch) in self.aborts_asked
            check(
                asked or snapshot.producer_epoch == previous.producer_epoch + 1,
                f"{transactional_id}: aborted by the coordinator without fencing its producer: {snapshot}",
            )
        if snapshot.state in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT):
            assert previous is not None
            missing = previous.partitions - self.marked.get(transactional_id, set())
            check(not missing, f"{transactional_id}: {snapshot.state.value} without markers on {missing}")
        self.last[transactional_id] = snapshot

    def on_markers_issued(self, markers: TransactionMarkers) -> None:
        last = self.last.get(markers.transactional_id)
        decided = TransactionState.PREPARE_COMMIT if markers.commit else TransactionState.PREPARE_ABORT
        check(
            last is not None
            and last.state is decided
            and (last.producer_id, last.producer_epoch) == (markers.producer_id, markers.producer_epoch),
            f"markers {markers} while the last record is {last}",
        )
        check(set(markers.partitions) <= last.partitions, f"markers for partitions outside {last}")  # type: ignore[union-attr]

    def on_marker_landed(self, markers: TransactionMarkers, partition: TopicPartition) -> None:
        self.markers_landed += 1
        last = self.last.get(markers.transactional_id)
        if (
            last is not None
            and (last.producer_id, last.producer_epoch) == (markers.producer_id, markers.producer_epoch)
            and last.state
            is (TransactionState.PREPARE_COMMIT if markers.commit else TransactionState.PREPARE_ABORT)
        ):
            self.marked.setdefault(markers.transactional_id, set()).add(partition)

    def check_none_answer(
        self, transactional_id: str, producer_id: int, epoch: int, what: str
    ) -> TransactionSnapshot:
        last = self.last.get(transactional_id)
        check(
            last is not None and (last.producer_id, last.producer_epoch) == (producer_id, epoch),
            f"{what} of {transactional_id} ({producer_id}, {epoch}) answered NONE; the log holds {last}",
        )
        assert last is not None
        return last


class ChaosLog:
    """__transaction_state: appends land at once, later (in order per partition), or fail."""

    def __init__(self, rng: random.Random, world: World) -> None:
        self.rng = rng
        self.world = world
        self.partitions: dict[int, list[Record]] = {}
        self.queues: dict[int, deque[PendingAppend]] = {}
        self.chaos = True

    def append(self, partition: int, records: list[Record], on_complete: Callable[[ErrorCode], None]) -> None:
        queue = self.queues.setdefault(partition, deque())
        roll = self.rng.random()
        error = ErrorCode.NONE
        if self.chaos and roll < 0.12:
            error = self.rng.choice(WRITE_ERRORS)
        pending = PendingAppend(records, on_complete, error)
        if queue or (self.chaos and roll > 0.65):
            queue.append(pending)
        else:
            self._complete(pending, partition)

    def _complete(self, pending: PendingAppend, partition: int) -> None:
        if pending.error == ErrorCode.NONE and not pending.landed:
            self._land(partition, pending.records)
        pending.on_complete(pending.error)

    def _land(self, partition: int, records: list[Record]) -> None:
        self.partitions.setdefault(partition, []).extend(records)
        for key, value in records:
            self.world.on_record(key, value)

    def deliver(self, partition: int) -> bool:
        queue = self.queues.get(partition)
        if not queue:
            return False
        self._complete(queue.popleft(), partition)
        return True

    def moved_away(self, partition: int) -> None:
        """The partition's leadership moves: each write in flight either made it into the log
        (the successor loads it) or is lost; their answers still come, to a coordinator that
        no longer listens."""
        for pending in self.queues.get(partition, ()):
            if pending.error != ErrorCode.NONE or pending.landed:
                continue
            if self.rng.random() < 0.5:
                self._land(partition, pending.records)
                pending.landed = True
            else:
                pending.error = ErrorCode.NOT_LEADER_OR_FOLLOWER

    def records(self, partition: int) -> list[Record]:
        return list(self.partitions.get(partition, []))

    def busy(self) -> bool:
        return any(self.queues.values())


class ChaosMarkers:
    def __init__(self, rng: random.Random, world: World) -> None:
        self.rng = rng
        self.world = world
        self.held: list[tuple[TransactionMarkers, TopicPartition, ErrorCode, Callable[..., None]]] = []
        self.chaos = True

    def write_markers(
        self, markers: TransactionMarkers, on_partition_written: Callable[[TopicPartition, ErrorCode], None]
    ) -> None:
        self.world.on_markers_issued(markers)
        for partition in markers.partitions:
            roll = self.rng.random()
            error = ErrorCode.NONE
            if self.chaos and roll < 0.15:
                error = self.rng.choice(MARKER_ERRORS)
            elif self.chaos and roll < 0.17:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if self.chaos and self.rng.random() < 0.35:
                self.held.append((markers, partition, error, on_partition_written))
            else:
                self._answer(markers, partition, error, on_partition_written)

    def _answer(
        self,
        markers: TransactionMarkers,
        partition: TopicPartition,
        error: ErrorCode,
        on_partition_written: Callable[[TopicPartition, ErrorCode], None],
    ) -> None:
        if error in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
            self.world.on_marker_landed(markers, partition)
        on_partition_written(partition, error)

    def answer_some(self) -> None:
        if not self.held:
            return
        index = self.rng.randrange(len(self.held))
        self._answer(*self.held.pop(index))

    def answer_all(self) -> None:
        while self.held:
            self._answer(*self.held.pop(0))


class Client:
    """One producer application per transactional id: what it believes its id and epoch are."""

    def __init__(self, transactional_id: str) -> None:
        self.transactional_id = transactional_id
        self.producer_id = -1
        self.epoch = -1


class Run:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.world = World()
        self.log = ChaosLog(self.rng, self.world)
        self.markers = ChaosMarkers(self.rng, self.world)
        self.clock = ManualClock()
        self.timer = ManualTimer(self.clock)
        self.allocator = FakeAllocator()
        self.coordinator = TransactionCoordinator(
            CONFIG, self.clock, self.timer, self.log, self.markers, self.allocator, offsets_partition_for
        )
        self.coordinator_epochs = {
            partition: 0 for partition in range(CONFIG.transaction_state_log_num_partitions)
        }
        for partition in self.coordinator_epochs:
            self.coordinator.load(partition, 0, [])
        self.clients = {transactional_id: Client(transactional_id) for transactional_id in TRANSACTIONAL_IDS}
        self.answers: list[list[Any]] = []

    # ---------------------------------------------------------------- answers
    def box(self, on_answer: Callable[[Any], None]) -> Callable[[Any], None]:
        answers: list[Any] = []
        self.answers.append(answers)

        def answer(value: Any) -> None:
            answers.append(value)
            check(len(answers) == 1, f"answered twice: {answers}")
            on_answer(value)

        return answer

    # ---------------------------------------------------------------- client actions
    def identity(self, client: Client) -> tuple[int, int]:
        roll = self.rng.random()
        if roll < 0.85 or client.producer_id < 0:
            return client.producer_id, client.epoch
        if roll < 0.95:
            return client.producer_id, max(0, client.epoch - 1)  # a zombie
        return client.producer_id + 1, client.epoch

    def init(self, client: Client) -> None:
        kip360 = client.producer_id >= 0 and self.rng.random() < 0.3
        producer_id, epoch = (client.producer_id, client.epoch) if kip360 else (-1, -1)
        transactional_id = client.transactional_id

        def answered(result: InitProducerIdResult) -> None:
            if result.error != ErrorCode.NONE:
                return
            last = self.world.check_none_answer(
                transactional_id, result.producer_id, result.producer_epoch, "InitProducerId"
            )
            check(last.state is TransactionState.EMPTY, f"InitProducerId answered in {last.state.value}")
            now = (result.producer_id, result.producer_epoch)
            previous = self.world.answered_init.get(transactional_id, (-1, -1))
            check(now >= previous, f"{transactional_id}: InitProducerId went back from {previous} to {now}")
            self.world.answered_init[transactional_id] = now
            client.producer_id, client.epoch = now

        timeout_ms = self.rng.choice([1_000, 3_000, 6_000, 7_000])
        self.coordinator.init_producer_id(
            transactional_id, timeout_ms, producer_id, epoch, self.box(answered)
        )

    def add(self, client: Client) -> None:
        producer_id, epoch = self.identity(client)
        wanted = self.rng.sample(TOPIC_PARTITIONS, self.rng.randint(1, 3))
        transactional_id = client.transactional_id

        def answered(errors: dict[TopicPartition, ErrorCode]) -> None:
            check(set(errors) == set(wanted), f"answers {errors} for {wanted}")
            if set(errors.values()) == {ErrorCode.NONE}:
                last = self.world.check_none_answer(
                    transactional_id, producer_id, epoch, "AddPartitionsToTxn"
                )
                check(last.state is TransactionState.ONGOING, f"added in {last.state.value}")
                check(set(wanted) <= last.partitions, f"{wanted} not in {last.partitions}")

        self.coordinator.add_partitions(transactional_id, producer_id, epoch, wanted, self.box(answered))

    def add_offsets(self, client: Client) -> None:
        producer_id, epoch = self.identity(client)
        transactional_id = client.transactional_id

        def answered(error: ErrorCode) -> None:
            if error == ErrorCode.NONE:
                last = self.world.check_none_answer(transactional_id, producer_id, epoch, "AddOffsetsToTxn")
                check(last.state is TransactionState.ONGOING, f"offsets added in {last.state.value}")

        self.coordinator.add_offsets(transactional_id, producer_id, epoch, "group", self.box(answered))

    def end(self, client: Client) -> None:
        producer_id, epoch = self.identity(client)
        commit = self.rng.random() < 0.6
        transactional_id = client.transactional_id
        if not commit:
            self.world.aborts_asked.add((transactional_id, producer_id, epoch))

        def answered(error: ErrorCode) -> None:
            if error == ErrorCode.NONE:
                last = self.world.check_none_answer(transactional_id, producer_id, epoch, "EndTxn")
                allowed = (
                    {TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT}
                    if commit
                    else {TransactionState.PREPARE_ABORT, TransactionState.COMPLETE_ABORT}
                )
                check(last.state in allowed, f"EndTxn(commit={commit}) answered NONE in {last.state.value}")

        self.coordinator.end_transaction(transactional_id, producer_id, epoch, commit, self.box(answered))

    # ---------------------------------------------------------------- the environment
    def move_partition(self) -> None:
        partition = self.rng.randrange(CONFIG.transaction_state_log_num_partitions)
        self.coordinator.unload(partition)
        self.log.moved_away(partition)
        self.coordinator_epochs[partition] += 1
        self.coordinator.load(partition, self.coordinator_epochs[partition], self.log.records(partition))

    def step(self) -> None:
        # The last id is used rarely: it idles long enough to expire now and then.
        client = self.clients[self.rng.choices(TRANSACTIONAL_IDS, weights=(10, 10, 10, 1))[0]]
        actions: list[tuple[float, Callable[[], object]]] = [
            (0.12, lambda: self.init(client)),
            (0.22, lambda: self.add(client)),
            (0.05, lambda: self.add_offsets(client)),
            (0.12, lambda: self.end(client)),
            (0.15, lambda: self.log.deliver(self.rng.randrange(CONFIG.transaction_state_log_num_partitions))),
            (0.12, self.markers.answer_some),
            (0.04, self.allocator.answer_held),
            (0.15, lambda: self.timer.advance(self.rng.choice([10, 50, 200, 1_000, 3_000]))),
            (0.02, self.move_partition),
            (0.01, lambda: setattr(self.allocator, "defer", not self.allocator.defer)),
        ]
        roll = self.rng.random() * sum(weight for weight, _ in actions)
        for weight, action in actions:
            roll -= weight
            if roll <= 0:
                action()
                break
        self.check_coordinator()

    def check_coordinator(self) -> None:
        for transactional_id, metadata in self.coordinator.transactions().items():
            if metadata.committed is None:
                continue
            check(
                not (metadata.committed.state is TransactionState.ONGOING and metadata.delivery is not None),
                f"{transactional_id}: open while still delivering markers",
            )
            if not self.log.busy() and metadata.pending is None:
                # Nothing in flight: what the coordinator holds is the id's last record.
                check(
                    self.world.last.get(transactional_id) == metadata.committed.durable(),
                    f"{transactional_id}: holds {metadata.committed}, log says {self.world.last.get(transactional_id)}",
                )

    def quiesce(self) -> None:
        self.log.chaos = False
        self.markers.chaos = False
        self.allocator.defer = False
        for _ in range(1_000):
            for partition in range(CONFIG.transaction_state_log_num_partitions):
                while self.log.deliver(partition):
                    pass
            self.markers.answer_all()
            self.allocator.answer_held()
            self.timer.advance(CONFIG.transaction_marker_retry_backoff_ms)
            busy = any(
                metadata.delivery or metadata.pending for metadata in self.coordinator.transactions().values()
            )
            if not busy and not self.log.busy() and not self.markers.held and not self.allocator.held:
                return
        raise AssertionError("the run does not settle")


SEEDS = range(40)
STEPS = 1_000


@pytest.mark.parametrize("seed", SEEDS)
def test_invariants_hold_and_replay_equals_live(seed: int) -> None:
    run = Run(seed)
    for _ in range(STEPS):
        run.step()
    run.quiesce()
    run.check_coordinator()
    # Every request was answered, exactly once.
    unanswered = [answers for answers in run.answers if len(answers) != 1]
    check(not unanswered, f"{len(unanswered)} requests not answered exactly once")
    # A coordinator loading the log holds what the live one holds.
    loaded = Harness(CONFIG, partitions=())
    for partition in range(CONFIG.transaction_state_log_num_partitions):
        loaded.coordinator.load(partition, 99, run.log.records(partition))
    live = {tid: metadata.known.durable() for tid, metadata in run.coordinator.transactions().items()}
    replayed = {tid: metadata.known.durable() for tid, metadata in loaded.coordinator.transactions().items()}
    assert live == replayed
    assert all(metadata.delivery is None for metadata in loaded.coordinator.transactions().values())


def test_the_runs_exercise_what_they_claim_to() -> None:
    """The seeds above reach every state written, fence, expire, and land markers."""
    states: set[str] = set()
    landed_markers = fences = 0
    for seed in range(4):
        run = Run(seed)
        for _ in range(STEPS):
            run.step()
        run.quiesce()
        for records in run.log.partitions.values():
            for _, value in records:
                states.add("tombstone" if value is None else decode_value(value).state.value)
        landed_markers += run.world.markers_landed
        fences += run.world.fences
    assert states == {
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "tombstone",
    }
    assert landed_markers > 100
    assert fences > 5
