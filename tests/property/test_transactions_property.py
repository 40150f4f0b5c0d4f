"""Property test of the partition side of transactions.

INVARIANT: whatever the interleaving of several producers' transactional batches over several
partitions, their commits and aborts (a marker in every partition the transaction wrote to, as a
coordinator writes them), plain batches, segment rolls, compactions (some past the delete horizon,
where markers whose records are all gone go too), clean restarts and crashes, a read_committed reader of a partition (reading up to the last stable offset, skipping the aborted
transactions each fetch names, as Kafka's clients do) never sees a record of an aborted
transaction nor one at or past the last stable offset, and sees every committed record below it —
or, once the partition was compacted, at least the latest committed record of each key (keys come
from a small set, so aborted records compete with committed ones for "latest"). The last stable
offset is the first offset of the oldest transaction in progress (the log end when there is none) —
never stuck on a transaction whose marker compaction removed, across restarts and crashes; the
aborted transactions are exactly those the model aborted (once markers may have gone: some of them,
each named at most once). A follower copying a partition batch
by batch ends with the same answers.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from strom.protocol.records.batch import Record, build_batch
from strom.protocol.records.header import validate_batches
from strom.storage.config import LogConfig
from strom.storage.partition_log import PartitionLog
from tests.unit.storage.helpers import T0_MS, append, read_committed

PARTITIONS = 3
PRODUCERS = 3
PRODUCER_IDS = [500 + index for index in range(PRODUCERS)]
# Small segments so that transactions and their markers spread over several of them.
CONFIG = LogConfig(segment_bytes=300, cleanup_policy="compact", index_interval_bytes=100)
KEYS = 3

PROPERTY_SETTINGS = settings(max_examples=200, deadline=None)

data_steps = st.tuples(
    st.just("data"), st.integers(0, PRODUCERS - 1), st.integers(0, PARTITIONS - 1), st.integers(1, 3)
)
steps = st.lists(
    st.one_of(
        data_steps,
        data_steps,  # three times as likely as any other step
        data_steps,
        st.tuples(st.just("plain"), st.integers(0, PARTITIONS - 1), st.integers(1, 3)),
        st.tuples(st.just("end"), st.integers(0, PRODUCERS - 1), st.booleans()),
        st.tuples(st.just("roll"), st.integers(0, PARTITIONS - 1)),
        st.tuples(st.just("flush"), st.integers(0, PARTITIONS - 1)),
        st.tuples(st.just("compact"), st.integers(0, PARTITIONS - 1), st.booleans()),
        st.tuples(st.just("restart"), st.integers(0, PARTITIONS - 1), st.booleans()),
        st.tuples(st.just("crash"), st.integers(0, PARTITIONS - 1), st.booleans()),
        st.tuples(st.just("restart"), st.integers(0, PARTITIONS - 1), st.just(False)),
    ),
    min_size=5,
    max_size=60,
)


@dataclass
class PartitionModel:
    committed: dict[bytes, int] = field(default_factory=dict)  # value -> offset
    compacted: bool = False
    markers_dropped: bool = False  # compacted past the delete horizon: markers may have gone
    aborted: set[tuple[int, int]] = field(default_factory=set)  # (producer id, first offset)
    open_firsts: dict[int, int] = field(default_factory=dict)  # producer id -> first offset
    pending: dict[int, dict[bytes, int]] = field(default_factory=dict)  # producer id -> its records


class Scenario:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.logs = [self._open(index) for index in range(PARTITIONS)]
        self.models = [PartitionModel() for _ in range(PARTITIONS)]
        self.sequences: dict[tuple[int, int], int] = {}
        self.epoch = 0
        self.counter = 0

    def _open(self, partition: int, *, recover_all: bool = True) -> PartitionLog:
        directory = self.directory / f"t-{partition}"
        return PartitionLog.open(directory, "t", partition, CONFIG, recover_all=recover_all)

    def _values(self, count: int) -> list[bytes]:
        self.counter += count
        return [b"v%d" % (self.counter - count + index) for index in range(count)]

    @staticmethod
    def _records(values: list[bytes]) -> list[Record]:
        return [Record(index, index, key_of(value), value) for index, value in enumerate(values)]

    def data(self, producer: int, partition: int, count: int) -> None:
        producer_id = PRODUCER_IDS[producer]
        values = self._values(count)
        sequence = self.sequences.get((producer_id, partition), 0)
        self.sequences[(producer_id, partition)] = sequence + count
        batch = build_batch(
            self._records(values),
            producer_id=producer_id,
            producer_epoch=self.epoch,
            base_sequence=sequence,
            is_transactional=True,
        )
        base_offset = append(self.logs[partition], batch).base_offset
        model = self.models[partition]
        model.open_firsts.setdefault(producer_id, base_offset)
        model.pending.setdefault(producer_id, {}).update(
            (value, base_offset + index) for index, value in enumerate(values)
        )

    def plain(self, partition: int, count: int) -> None:
        values = self._values(count)
        batch = build_batch(self._records(values))
        base_offset = append(self.logs[partition], batch).base_offset
        self.models[partition].committed.update((value, base_offset + i) for i, value in enumerate(values))

    def end(self, producer: int, commit: bool) -> None:
        producer_id = PRODUCER_IDS[producer]
        for partition, model in enumerate(self.models):
            first = model.open_firsts.pop(producer_id, None)
            if first is None:
                continue
            self.logs[partition].append_marker(producer_id, self.epoch, commit, 0, T0_MS)
            written = model.pending.pop(producer_id)
            if commit:
                model.committed.update(written)
            else:
                model.aborted.add((producer_id, first))

    def roll(self, partition: int) -> None:
        self.logs[partition].roll()

    def flush(self, partition: int) -> None:
        """What the flush scheduler does: segments synced, a producer snapshot due written."""
        self.logs[partition].flush()

    def compact(self, partition: int, past_horizon: bool = False) -> None:
        """Roll first: the segment written last is compacted too (with what is still open).
        ``past_horizon``: every marker (all written at T0_MS) is older than delete.retention.ms."""
        self.logs[partition].roll()
        now_ms = T0_MS + CONFIG.delete_retention_ms if past_horizon else T0_MS
        self.logs[partition].compact(now_ms)
        self.models[partition].compacted = True
        self.models[partition].markers_dropped |= past_horizon

    def restart(self, partition: int, recover_all: bool) -> None:
        self.logs[partition].close()
        self.logs[partition] = self._open(partition, recover_all=recover_all)

    def crash(self, partition: int, lose_txn_indexes: bool) -> None:
        """The process dies: nothing more is written (no snapshot, no index files), every byte
        already written survives (the page cache outlives a process) — or, when
        ``lose_txn_indexes``, the machine dies and the transaction indexes were not synced while
        the segments were (recovery must rebuild them from the batches)."""
        log = self.logs[partition]
        log.detach()
        if lose_txn_indexes:
            for path in log.directory.glob("*.txnindex"):
                path.unlink()
        self.logs[partition] = self._open(partition, recover_all=True)

    def check(self) -> None:
        for log, model in zip(self.logs, self.models):
            check_partition(log, model)

    def close(self) -> None:
        for log in self.logs:
            log.close()


def check_partition(log: PartitionLog, model: PartitionModel, *, max_bytes: int = 1 << 20) -> None:
    expected_lso = min(model.open_firsts.values(), default=log.log_end_offset)
    assert log.last_stable_offset == expected_lso
    aborted = log.aborted_transactions(0, log.log_end_offset)
    if not model.compacted:
        assert set(aborted) == model.aborted
    elif model.markers_dropped:
        # Some aborted transactions went with their markers; each one left is named once, from
        # its first offset or (rebuilt) a later one before the producer's next transaction.
        for producer_id in PRODUCER_IDS:
            known = sorted(first for owner, first in model.aborted if owner == producer_id)
            matched = [
                max(first for first in known if first <= rebuilt)
                for owner, rebuilt in aborted
                if owner == producer_id
            ]
            assert len(set(matched)) == len(matched)
    else:
        # A transaction index rebuilt after compaction removed an aborted transaction's first
        # records starts it at the first offset still there: the same transactions, no earlier.
        assert len(aborted) == len(model.aborted)
        for producer_id in PRODUCER_IDS:
            rebuilt = sorted(first for owner, first in aborted if owner == producer_id)
            known = sorted(first for owner, first in model.aborted if owner == producer_id)
            assert len(rebuilt) == len(known) and all(map(int.__ge__, rebuilt, known))
    seen = [(offset, value) for offset, _key, value in read_committed(log, 0, max_bytes)]
    # (read_committed asserts that nothing is at or past the last stable offset)
    expected = sorted((offset, value) for value, offset in model.committed.items() if offset < expected_lso)
    if not model.compacted:
        assert seen == expected
        return
    assert set(seen) <= set(expected), "an aborted or unknown record"
    latest: dict[bytes, tuple[int, bytes]] = {}
    for offset, value in expected:
        latest[key_of(value)] = (offset, value)
    assert set(latest.values()) <= set(seen), "compaction lost the latest committed value of a key"


def key_of(value: bytes) -> bytes:
    return b"k%d" % (int(value[1:]) % KEYS)


@PROPERTY_SETTINGS
@given(steps=steps, closing_commits=st.lists(st.booleans(), min_size=PRODUCERS, max_size=PRODUCERS))
# Always tried (the random search reaches them only now and then): an aborted record newer than a
# committed one of the same key, then a compaction; an abort in a segment that a clean restart
# loads from its index files; the transaction indexes lost in a crash after a producer snapshot
# that starts after the first aborted transaction.
# An aborted transaction's only batch compacted away, then a crash: the producer's next batch
# (sequence 1) is accepted though nothing in the log says where its sequence was (found by the
# random search in a whole-suite run).
@example(
    steps=[
        ("data", 0, 2, 1),
        ("end", 0, False),
        ("compact", 2, False),
        ("crash", 2, False),
        ("data", 0, 2, 1),
    ],
    closing_commits=[False] * PRODUCERS,
)
@example(
    steps=[("plain", 0, 1), ("data", 0, 0, 3), ("end", 0, False), ("compact", 0, False)],
    closing_commits=[True] * PRODUCERS,
)
# A commit past the horizon whose record stays, then a crash with no snapshot: its marker must
# have stayed to end it.
@example(
    steps=[("data", 0, 0, 1), ("end", 0, True), ("compact", 0, True), ("crash", 0, False)],
    closing_commits=[True] * PRODUCERS,
)
# Markers removed past the horizon, then a crash that replays the producer state from a snapshot
# taken inside the transactions (it must not see them as still open).
@example(
    steps=[
        ("data", 0, 0, 2),
        ("data", 1, 0, 1),
        ("roll", 0),
        ("flush", 0),
        ("plain", 0, 3),
        ("end", 0, True),
        ("end", 1, False),
        ("compact", 0, True),
        ("crash", 0, False),
        ("compact", 0, True),
        ("flush", 0),
        ("compact", 0, True),
        ("crash", 0, True),
    ],
    closing_commits=[True] * PRODUCERS,
)
@example(
    steps=[
        ("data", 1, 0, 2),
        ("end", 1, False),
        ("roll", 0),
        ("plain", 0, 1),
        ("restart", 0, False),
    ],
    closing_commits=[True] * PRODUCERS,
)
@example(
    steps=[
        ("data", 0, 1, 2),
        ("data", 1, 1, 3),
        ("end", 1, False),
        ("roll", 1),
        ("plain", 1, 1),
        ("flush", 1),
        ("end", 0, False),
        ("crash", 1, True),
    ],
    closing_commits=[False] * PRODUCERS,
)
def test_read_committed_sees_exactly_the_committed_records(
    steps: list[tuple[object, ...]], closing_commits: list[bool]
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        scenario = Scenario(Path(directory))
        try:
            for step in steps:
                getattr(scenario, str(step[0]))(*step[1:])
                scenario.check()
            for producer, commit in enumerate(closing_commits):
                scenario.end(producer, commit)
            scenario.check()
            for log, model in zip(scenario.logs, scenario.models):
                assert not model.open_firsts and log.last_stable_offset == log.log_end_offset
                check_partition(log, model, max_bytes=1)  # one batch per fetch
        finally:
            scenario.close()


@PROPERTY_SETTINGS
@given(
    steps=steps.filter(lambda steps: any(step[0] == "data" for step in steps)),
    fetch_bytes=st.integers(1, 2000),
)
def test_a_follower_copying_the_leader_answers_alike(
    steps: list[tuple[object, ...]], fetch_bytes: int
) -> None:
    with tempfile.TemporaryDirectory() as directory:
        scenario = Scenario(Path(directory))
        followers: list[PartitionLog] = []
        try:
            for step in steps:
                if step[0] in ("data", "plain", "end", "roll"):
                    getattr(scenario, str(step[0]))(*step[1:])
            for partition, (leader, model) in enumerate(zip(scenario.logs, scenario.models)):
                follower = PartitionLog.open(
                    Path(directory) / f"follower-{partition}", "t", partition, CONFIG
                )
                followers.append(follower)
                while follower.log_end_offset < leader.log_end_offset:
                    data = leader.read(follower.log_end_offset, fetch_bytes).records
                    follower.append_as_follower(data, validate_batches(bytearray(data)), T0_MS)
                check_partition(follower, model)
                assert sorted(follower.producers()) == sorted(leader.producers())
        finally:
            scenario.close()
            for follower in followers:
                follower.close()
