"""State the request handlers share: groups, partition ownership, timers, the log writer, replay.

Every change to committed offsets and every group record goes through ``apply_record``: live
handlers call it once their records are written, and loading a partition calls it for each record
of the topic, so recovery runs the same code as live handling.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

from strom.base.clock import Clock
from strom.coordinator.config import CoordinatorConfig
from strom.coordinator.consumer_group import ConsumerGroup
from strom.coordinator.consumer_records import (
    CONSUMER_KEY_VERSIONS,
    ConsumerKey,
    apply_consumer_record,
    decode_consumer_key,
)
from strom.coordinator.group import Group, Member
from strom.coordinator.group_configs import GROUP_CONFIG_KEYS, HEARTBEAT_INTERVAL, SESSION_TIMEOUT
from strom.coordinator.history import RebalanceHistory, is_history_key
from strom.coordinator.partitioning import partition_for_group
from strom.coordinator.records import (
    CoordinatorLogWriter,
    CorruptCoordinatorRecord,
    GroupKey,
    OffsetKey,
    Record,
    TransactionalOffset,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from strom.coordinator.state import GroupState
from strom.coordinator.timers import (
    Timer,
    consumer_rebalance_key,
    consumer_session_key,
    group_timer_keys,
)
from strom.protocol.coordinator_records.group_metadata import GroupMetadataValue
from strom.protocol.errors import ErrorCode


def _ignore_outcome(error: ErrorCode) -> None:
    """A history record that failed to be written is lost; the group goes on."""


class PartitionStatus(Enum):
    LOADING = "loading"
    ACTIVE = "active"


class GroupTable(dict[str, Group]):
    """The groups by id, indexed by their ``__consumer_offsets`` partition as well, so that loading
    and unloading a partition touch only its own groups (a broker holds tens of thousands). Only
    the mutations the coordinator uses are allowed: item assignment, ``del``, ``pop``."""

    def __init__(self, partition_of: Callable[[str], int]) -> None:
        super().__init__()
        self._partition_of = partition_of
        self._by_partition: dict[int, set[str]] = {}

    def __setitem__(self, group_id: str, group: Group) -> None:
        if group_id not in self:
            self._by_partition.setdefault(self._partition_of(group_id), set()).add(group_id)
        super().__setitem__(group_id, group)

    def __delitem__(self, group_id: str) -> None:
        super().__delitem__(group_id)
        self._forget(group_id)

    def pop(self, group_id: str, *default: Any) -> Any:
        if group_id not in self:
            return super().pop(group_id, *default)  # the default, or KeyError as dict's
        group = super().pop(group_id)
        self._forget(group_id)
        return group

    def _forget(self, group_id: str) -> None:
        partition = self._partition_of(group_id)
        members = self._by_partition.get(partition)
        if members is not None:
            members.discard(group_id)
            if not members:
                del self._by_partition[partition]

    def of_partition(self, partition: int) -> list[Group]:
        return [self[group_id] for group_id in self._by_partition.get(partition, ())]

    def _refuse(self, *arguments: object, **keywords: object) -> Any:
        raise TypeError("GroupTable changes only by item assignment, del and pop")

    setdefault = update = popitem = clear = __ior__ = _refuse


class CoordinatorRuntime:
    def __init__(
        self, config: CoordinatorConfig, clock: Clock, timer: Timer, writer: CoordinatorLogWriter
    ) -> None:
        self.config = config
        self.clock = clock
        self.timer = timer
        self.writer = writer
        self.groups = GroupTable(self.partition_of)
        self.partitions: dict[int, PartitionStatus] = {}
        # Bumped each time a partition starts loading: a write issued before the partition moved
        # away (and perhaps came back, loaded afresh from the log) must not be applied on top.
        self.partition_epochs: dict[int, int] = {}
        # Partitions of __consumer_offsets the groups are spread over: the configured count until
        # the broker says the topic exists with its own (``GroupCoordinator.use_partition_count``).
        self.partition_count = config.offsets_topic_num_partitions
        # Rebalances started since this coordinator was built (a monotonic count for metrics).
        self.rebalances_total = 0
        # Per partition, per producer id: the groups holding offsets that producer wrote in a
        # transaction not completed yet, found again when its marker is written to the partition.
        # A hint: a group deleted since, or whose offsets were superseded, is skipped then.
        self.open_transactions: dict[int, dict[int, set[str]]] = {}
        # Markers written to a partition while it was loading: applied once it has loaded (the
        # load may have read the log before them).
        self.markers_while_loading: dict[int, list[tuple[int, bool]]] = {}
        # Each group's past rebalances (written to the group's partition as they finish).
        # Group configs (KIP-848) by group id: the overrides the broker keeps, already checked.
        self.group_configs: dict[str, dict[str, int]] = {}
        self.history = RebalanceHistory(
            self.partition_of, lambda group_id, records: self.write(group_id, records, _ignore_outcome)
        )

    # ---------------------------------------------------------------- group configs
    def consumer_session_timeout_ms(self, group_id: str) -> int:
        """The consumer group protocol's session timeout of ``group_id``: its group config, else
        the broker's (``group.consumer.session.timeout.ms``)."""
        return self._group_config(group_id, SESSION_TIMEOUT)

    def consumer_heartbeat_interval_ms(self, group_id: str) -> int:
        """The heartbeat interval given to ``group_id``'s members: its group config, else the broker's."""
        return self._group_config(group_id, HEARTBEAT_INTERVAL)

    def _group_config(self, group_id: str, name: str) -> int:
        key = GROUP_CONFIG_KEYS[name]
        value = self.group_configs.get(group_id, {}).get(name)
        return key.default(self.config) if value is None else key.held(value, self.config)

    # ---------------------------------------------------------------- ownership
    def partition_of(self, group_id: str) -> int:
        return partition_for_group(group_id, self.partition_count)

    def group_error(self, group_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS if this coordinator cannot serve the group."""
        status = self.partitions.get(self.partition_of(group_id))
        if status is None:
            return ErrorCode.NOT_COORDINATOR
        if status is PartitionStatus.LOADING:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return None

    def is_loading_any(self) -> bool:
        return any(status is PartitionStatus.LOADING for status in self.partitions.values())

    def now_wall_ms(self) -> int:
        return self.clock.wall_ms()

    # ---------------------------------------------------------------- writing
    def write(self, group_id: str, records: list[Record], on_complete: Callable[[ErrorCode], None]) -> None:
        """Append records to the group's partition; on success apply them (the replay path) first."""
        partition = self.partition_of(group_id)
        epoch = self.partition_epochs.get(partition)

        def completed(error: ErrorCode) -> None:
            if (
                error == ErrorCode.NONE
                and self.partitions.get(partition) is PartitionStatus.ACTIVE
                and self.partition_epochs.get(partition) == epoch
            ):
                for key, value in records:
                    self.apply_record(key, value, loading=False)
            on_complete(error)

        self.writer.append(partition, records, completed)

    def write_transactional(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        records: list[Record],
        on_complete: Callable[[ErrorCode], None],
    ) -> None:
        """Append offset records as one transactional batch of the producer; once written, they
        are pending offsets of the group (``apply_transactional_record``) until the marker."""
        partition = self.partition_of(group_id)
        epoch = self.partition_epochs.get(partition)

        def completed(error: ErrorCode, base_offset: int) -> None:
            if (
                error == ErrorCode.NONE
                and self.partitions.get(partition) is PartitionStatus.ACTIVE
                and self.partition_epochs.get(partition) == epoch
            ):
                for index, (key, value) in enumerate(records):
                    self.apply_transactional_record(partition, producer_id, key, value, base_offset + index)
            on_complete(error)

        self.writer.append_transactional(partition, records, producer_id, producer_epoch, completed)

    # ---------------------------------------------------------------- replay
    def apply_transactional_record(
        self, partition: int, producer_id: int, key: bytes, value: bytes | None, log_offset: int
    ) -> None:
        """A record of the producer's transactional batch at ``log_offset``: a pending offset."""
        decoded_key = decode_key(key)
        if not isinstance(decoded_key, OffsetKey) or value is None:
            # Only offset commits are ever written in a transaction (TxnOffsetCommit).
            raise CorruptCoordinatorRecord(
                f"transactional record of producer {producer_id} at offset {log_offset} is not an offset commit"
            )
        committed = decode_offset_value(value)
        group = self.groups.get(decoded_key.group_id)
        if group is None:
            # A group that does not exist may commit offsets: a group without members.
            group = Group(decoded_key.group_id, state_timestamp_ms=-1)
            self.groups[decoded_key.group_id] = group
        group.add_pending_offset(
            producer_id,
            (decoded_key.topic, decoded_key.partition),
            TransactionalOffset(committed, log_offset),
        )
        self.open_transactions.setdefault(partition, {}).setdefault(producer_id, set()).add(group.group_id)

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """The producer's marker in ``partition``: its pending offsets there committed or dropped."""
        group_ids = self.open_transactions.get(partition, {}).pop(producer_id, None)
        for group_id in sorted(group_ids or ()):
            group = self.groups.get(group_id)
            if group is not None:
                group.complete_transaction(producer_id, commit)

    def apply_record(self, key: bytes, value: bytes | None, *, loading: bool) -> None:
        if len(key) >= 2 and key[0] == 0 and key[1] in CONSUMER_KEY_VERSIONS:
            self._apply_consumer(decode_consumer_key(key[1], key[2:]), value, loading=loading)
            return
        if key[:1] == b"\x7d" and is_history_key(key):
            self.history.replay(key, value, loading=loading)
            return
        decoded_key = decode_key(key)
        if isinstance(decoded_key, OffsetKey):
            self._apply_offset(decoded_key, value, loading=loading)
        else:
            assert isinstance(decoded_key, GroupKey)
            if value is None:
                self._apply_group_tombstone(decoded_key.group_id)
            elif loading:
                self._rebuild_group(decoded_key.group_id, decode_group_value(value))
            else:
                self._confirm_group(decoded_key.group_id, decode_group_value(value))

    def _apply_consumer(self, key: ConsumerKey, value: bytes | None, *, loading: bool) -> None:
        """A ConsumerGroup* record: it sets one part of the group's consumer protocol state."""
        group = self.groups.get(key.group_id)
        if group is None:
            if value is None:
                return
            group = Group(key.group_id, state_timestamp_ms=-1)
            self.groups[key.group_id] = group
        consumer = group.consumer
        if consumer is None:
            if value is None:
                return
            consumer = group.consumer = ConsumerGroup(key.group_id)
        apply_consumer_record(consumer, key, value)
        if consumer.members:
            consumer.empty_since_ms = -1
        elif consumer.empty_since_ms < 0:
            consumer.empty_since_ms = self.now_wall_ms()
        if loading:
            # The compacted log's order is not the writes' order: a group's records may come
            # before its metadata. What is left of it is judged once loaded (finish_loading).
            return
        if consumer.is_empty_of_state() and not consumer.writing and not consumer.waiting:
            group.consumer = None
            self.forget_if_unused(group)

    def forget_if_unused(self, group: Group) -> None:
        """A group with neither records nor offsets is no group."""
        if (
            self.groups.get(group.group_id) is group
            and group.consumer is None
            and not group.offsets
            and not group.pending_transactional_offsets
            and group.protocol_type is None
            and not group.members
            and not group.pending_members
        ):
            del self.groups[group.group_id]

    def _apply_offset(self, key: OffsetKey, value: bytes | None, *, loading: bool) -> None:
        group = self.groups.get(key.group_id)
        if value is None:
            if group is not None:
                group.offsets.pop((key.topic, key.partition), None)
                if group.pending_transactional_offsets:
                    group.supersede_pending_offsets((key.topic, key.partition))
                if (
                    loading
                    and not group.offsets
                    and not group.pending_transactional_offsets
                    and group.protocol_type is None
                    and not group.members
                    and group.consumer is None
                ):
                    # Loading: a group known only by offsets, all deleted since, is no group (as
                    # if the log had been compacted: the load gives the same state either way).
                    del self.groups[key.group_id]
            return
        if group is None:
            # Offsets without group metadata: a group committing with manual assignment.
            group = Group(key.group_id, state_timestamp_ms=-1)
            self.groups[key.group_id] = group
        group.offsets[(key.topic, key.partition)] = decode_offset_value(value)
        if group.pending_transactional_offsets:
            # Written after every pending transactional offset of the partition: it wins over them.
            group.supersede_pending_offsets((key.topic, key.partition))

    def _apply_group_tombstone(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is None:
            return
        if group.consumer is not None:
            # The classic group became a consumer group: only its classic part goes.
            group.reset_classic(self.now_wall_ms())
            return
        if (group.offsets or group.pending_transactional_offsets) and group.state is not GroupState.DEAD:
            # The metadata is gone but offsets remain: an Empty group holding only offsets.
            self.groups[group_id] = Group(
                group_id,
                offsets=group.offsets,
                pending_transactional_offsets=group.pending_transactional_offsets,
            )
        else:
            del self.groups[group_id]

    def _rebuild_group(self, group_id: str, value: GroupMetadataValue) -> None:
        """Loading: the latest record of a group is its whole state (Empty, or Stable with members)."""
        previous = self.groups.get(group_id)
        group = Group(
            group_id,
            state=GroupState.STABLE if value.members else GroupState.EMPTY,
            state_timestamp_ms=value.current_state_timestamp,
            generation_id=value.generation,
            protocol_type=value.protocol_type,
            protocol_name=value.protocol or None,
            leader_id=value.leader or None,
            offsets={} if previous is None else previous.offsets,
            pending_transactional_offsets={} if previous is None else previous.pending_transactional_offsets,
            consumer=None if previous is None else previous.consumer,
        )
        for recorded in value.members:
            protocols = [(value.protocol, recorded.subscription)] if value.protocol else []
            group.members[recorded.member_id] = Member(
                member_id=recorded.member_id,
                group_instance_id=recorded.group_instance_id,
                client_id=recorded.client_id,
                client_host=recorded.client_host,
                rebalance_timeout_ms=recorded.rebalance_timeout,
                session_timeout_ms=recorded.session_timeout,
                protocol_type=value.protocol_type,
                protocols=protocols,
                assignment=recorded.assignment,
            )
            if recorded.group_instance_id is not None:
                group.static_members[recorded.group_instance_id] = recorded.member_id
        self.groups[group_id] = group

    def _confirm_group(self, group_id: str, value: GroupMetadataValue) -> None:
        """Live: the written record of the current generation sets the members' assignments."""
        group = self.groups.get(group_id)
        if group is None or group.generation_id != value.generation:
            return  # the group moved on while the record was being written
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return  # the sync failed or a rebalance began: no assignment to record
        group.leader_id = value.leader or None
        for recorded in value.members:
            member = group.members.get(recorded.member_id)
            if member is not None:
                member.assignment = recorded.assignment

    # ---------------------------------------------------------------- group removal
    def cancel_group_timers(self, group: Group) -> None:
        member_ids = list(group.members) + list(group.pending_members)
        for key in group_timer_keys(group.group_id, member_ids):
            self.timer.cancel(key)
        if group.consumer is not None:
            for member_id in group.consumer.members:
                self.timer.cancel(consumer_session_key(group.group_id, member_id))
                self.timer.cancel(consumer_rebalance_key(group.group_id, member_id))
            group.consumer.revoking.clear()
