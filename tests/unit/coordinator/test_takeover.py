"""What a coordinator taking over (or giving up) an offsets partition relies on: the fast record
decoders read exactly what the generated ones read, replaying the latest record of each key gives
the state a replay of the whole log gives, a write issued before the partition moved away is never
applied to what was loaded afterwards, and each partition's groups are found without looking at
the others'."""

from __future__ import annotations

import random
import struct

import pytest

from strom.base.clock import ManualClock
from strom.coordinator import GroupCoordinator, ManualTimer, partition_for_group
from strom.coordinator.records import (
    CommittedOffset,
    CorruptCoordinatorRecord,
    OffsetKey,
    Record,
    _decode_group_value_generated,
    _decode_key_generated,
    _decode_offset_value_generated,
    compacted_replay_order,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_key_bytes,
    group_value_bytes,
    offset_key_bytes,
    offset_value_bytes,
)
from strom.coordinator.runtime import GroupTable
from strom.protocol.coordinator_records.group_metadata import GroupMetadataValue
from strom.protocol.coordinator_records.offset_commit import OffsetCommitKey, OffsetCommitValue
from strom.protocol.errors import ErrorCode

from .harness import FakeLog, Harness
from .test_load import snapshot

TEXTS = ["", "g", "grüppe-ü", "a" * 300, "topic.with-dots_1"]


def random_group_value(rng: random.Random) -> GroupMetadataValue:
    members = [
        GroupMetadataValue.MemberMetadata(
            member_id=f"member-{index}-{rng.randrange(10**6)}",
            group_instance_id=rng.choice([None, "", f"instance-{index}"]),
            client_id=rng.choice(TEXTS),
            client_host="/127.0.0.1",
            rebalance_timeout=rng.randrange(2**31),
            session_timeout=rng.randrange(2**31),
            subscription=rng.randbytes(rng.randrange(40)),
            assignment=rng.randbytes(rng.randrange(40)),
        )
        for index in range(rng.randrange(4))
    ]
    return GroupMetadataValue(
        protocol_type=rng.choice(["consumer", "connect", ""]),
        generation=rng.randrange(-1, 2**31),
        protocol=rng.choice([None, "range", "cooperative-sticky"]),
        leader=rng.choice([None, members[0].member_id if members else "x"]),
        current_state_timestamp=rng.randrange(-1, 2**62),
        members=members,
    )


def test_the_fast_decoders_read_what_the_generated_decoders_read() -> None:
    rng = random.Random(10)
    for _ in range(300):
        group_id, topic = rng.choice(TEXTS), rng.choice(TEXTS)
        partition = rng.randrange(-(2**31), 2**31)
        for version in (0, 1):
            key = struct.pack(">h", version) + OffsetCommitKey(group_id, topic, partition).encode(version)
            assert decode_key(key) == _decode_key_generated(key) == (group_id, topic, partition)
        key = group_key_bytes(group_id)
        assert decode_key(key) == _decode_key_generated(key)
        expire_timestamp_ms = rng.choice([-1, rng.randrange(2**62)])
        committed = CommittedOffset(
            rng.randrange(-1, 2**62),
            # Written as value v1 when it expires on its own: v1 has no leader epoch.
            rng.randrange(-1, 2**31) if expire_timestamp_ms < 0 else -1,
            rng.choice(TEXTS),
            rng.randrange(2**62),
            expire_timestamp_ms,
        )
        value = offset_value_bytes(committed)
        assert decode_offset_value(value) == _decode_offset_value_generated(value) == committed
        group_value = random_group_value(rng)
        encoded = group_value_bytes(group_value)
        assert decode_group_value(encoded) == _decode_group_value_generated(encoded) == group_value


def test_other_layouts_go_to_the_generated_decoders_and_corrupt_records_say_so() -> None:
    # Offset value v0 (no leader epoch, no expiry) is read by the generated decoder.
    v0 = struct.pack(">h", 0) + OffsetCommitValue(offset=5, metadata="m", commit_timestamp=7).encode(0)
    assert decode_offset_value(v0) == CommittedOffset(5, -1, "m", 7, -1)
    # Bad UTF-8 is read as Kafka reads strings (U+FFFD for each bad byte), by either decoder.
    bad_text = struct.pack(">hh", 1, 2) + b"\xff\xfe" + struct.pack(">h", 0) + b"\x00\x00\x00\x01"
    assert decode_key(bad_text) == OffsetKey("\ufffd\ufffd", "", 1)
    # Trailing bytes, lengths past the end, unknown versions: the generated decoder's verdict (a
    # CorruptCoordinatorRecord), never a wrong value.
    good_key = offset_key_bytes("g", "t", 1)
    for broken in (
        good_key[:-1],
        good_key[:4] + b"\xff\xfe" + good_key[6:],
        struct.pack(">h", 9) + b"rest",
        b"\x00",
    ):
        with pytest.raises(CorruptCoordinatorRecord):
            decode_key(broken)
    good_value = offset_value_bytes(CommittedOffset(1, 2, "meta", 3, -1))
    for broken in (good_value[:-1], good_value[:10], struct.pack(">h", 42) + good_value[2:]):
        with pytest.raises(CorruptCoordinatorRecord):
            decode_offset_value(broken)
    good_group = group_value_bytes(random_group_value(random.Random(3)))
    for broken in (good_group[:-1], good_group[:5]):
        with pytest.raises(CorruptCoordinatorRecord):
            decode_group_value(broken)


def random_log(rng: random.Random) -> list[Record]:
    """A partition's records as a coordinator could have written them: groups made, rebalanced and
    deleted, offsets committed with and without group management, deleted and committed again."""
    records: list[Record] = []
    groups = [f"group-{index}" for index in range(4)]
    for _ in range(rng.randrange(1, 40)):
        group_id = rng.choice(groups)
        kind = rng.randrange(5)
        if kind == 0:
            records.append((group_key_bytes(group_id), group_value_bytes(random_group_value(rng))))
        elif kind == 1:
            records.append((group_key_bytes(group_id), None))
        elif kind == 2:
            key = offset_key_bytes(group_id, rng.choice(["t", "u"]), rng.randrange(3))
            records.append((key, None))
        else:
            key = offset_key_bytes(group_id, rng.choice(["t", "u"]), rng.randrange(3))
            committed = CommittedOffset(rng.randrange(1000), -1, "", rng.randrange(10**6), -1)
            records.append((key, offset_value_bytes(committed)))
    return records


def replayed(records: list[Record]) -> GroupCoordinator:
    clock = ManualClock()
    coordinator = GroupCoordinator(Harness().config, clock, ManualTimer(clock), FakeLog())
    coordinator.begin_loading(0)
    for key, value in records:
        coordinator.replay(0, key, value)
    coordinator.finish_loading(0)
    return coordinator


def test_replaying_the_latest_record_of_each_key_gives_the_state_of_the_whole_log() -> None:
    rng = random.Random(2024)
    for _ in range(500):
        records = random_log(rng)
        latest: dict[bytes, bytes | None] = {}
        for key, value in records:
            latest[key] = value
        whole = snapshot(replayed(records))
        assert snapshot(replayed(compacted_replay_order(latest))) == whole, records


def test_a_write_from_before_the_partition_moved_is_not_applied_to_what_was_loaded_since() -> None:
    harness = Harness()
    assert harness.commit("g", {("t", 0): 1}) == {("t", 0): ErrorCode.NONE}
    harness.log.defer = harness.log.append_before_answer = True
    assert harness.commit("g", {("t", 0): 2}) == {}  # in the log, its answer waiting for replicas
    coordinator = harness.coordinator
    coordinator.unload(0)  # leadership lost ...
    coordinator.begin_loading(0)  # ... and won back: loaded again from the log
    for partition, key, value in harness.log.all_records():
        coordinator.replay(partition, key, value)
    coordinator.finish_loading(0)
    late = harness.log.deferred
    harness.log.defer = False
    assert harness.commit("g", {("t", 0): 3}) == {("t", 0): ErrorCode.NONE}
    harness.log.deferred = late
    harness.log.complete_deferred()  # the write of 2 is answered only now
    # The state is the log's (its last commit is 3): the late answer does not lay 2 over it.
    group = coordinator.group("g")
    assert group is not None and group.offsets[("t", 0)].offset == 3


def test_the_group_table_finds_a_partitions_groups_through_every_change() -> None:
    partitions = 7
    table = GroupTable(lambda group_id: partition_for_group(group_id, partitions))
    harness = Harness()
    names = [f"group-{index}" for index in range(60)]
    rng = random.Random(5)
    model: dict[str, object] = {}
    for _ in range(400):
        name = rng.choice(names)
        action = rng.randrange(3)
        if action == 0:
            group = harness.coordinator.group("missing") or object()
            table[name] = group  # type: ignore[assignment]
            model[name] = group
        elif action == 1 and name in model:
            del table[name]
            del model[name]
        else:
            assert table.pop(name, None) is model.pop(name, None)
        for partition in range(partitions):
            expected = {n for n in model if partition_for_group(n, partitions) == partition}
            assert {id(group) for group in table.of_partition(partition)} == {id(model[n]) for n in expected}
    with pytest.raises(TypeError):
        table.clear()
