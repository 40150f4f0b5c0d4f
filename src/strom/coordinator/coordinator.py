"""The group coordinator's facade: the API the broker's handlers call.

Pure: no sockets, no asyncio, no sleeping. Time comes from the injected ``Clock``, delays from the
injected keyed ``Timer``, and durability from the ``CoordinatorLogWriter`` (the broker appends our
records to ``__consumer_offsets`` and tells us when they are written).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from strom.assignors.server import ServerAssignor, get_server_assignor
from strom.base.clock import Clock
from strom.coordinator.admin import Admin
from strom.coordinator.config import CoordinatorConfig
from strom.coordinator.consumer_classic import ClassicMembers
from strom.coordinator.consumer_membership import ConsumerMembership
from strom.coordinator.consumer_topics import NoTopics, TopicsView
from strom.coordinator.group import Group, JoinResult, SyncResult
from strom.coordinator.history import RebalanceHistory
from strom.coordinator.membership import Membership, join_response, sync_response
from strom.coordinator.offsets import Offsets
from strom.coordinator.records import CoordinatorLogWriter
from strom.coordinator.runtime import CoordinatorRuntime, PartitionStatus
from strom.coordinator.state import GroupState
from strom.coordinator.timers import Timer, offsets_expiry_key
from strom.coordinator.transactional_offsets import TransactionalOffsets
from strom.protocol.errors import ErrorCode
from strom.protocol.group_history import RebalanceEntry
from strom.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from strom.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from strom.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from strom.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from strom.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from strom.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from strom.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from strom.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from strom.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from strom.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from strom.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from strom.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse


def configured_assignors(config: CoordinatorConfig) -> dict[str, ServerAssignor]:
    """The server assignors group.consumer.assignors names (KeyError for one strom does not have)."""
    return {name: get_server_assignor(name) for name in config.consumer_group_assignors}


class GroupCoordinator:
    def __init__(
        self,
        config: CoordinatorConfig,
        clock: Clock,
        timer: Timer,
        writer: CoordinatorLogWriter,
        topics: TopicsView | None = None,
        *,
        assignors: Mapping[str, ServerAssignor] | None = None,
    ) -> None:
        """``topics`` is the cluster's topics as the consumer group protocol sees them (none if
        None); ``assignors`` the server assignors by name (default: those
        ``config.consumer_group_assignors`` names, from strom.assignors.server)."""
        self._runtime = CoordinatorRuntime(config, clock, timer, writer)
        self._membership = Membership(self._runtime)
        if assignors is None:
            assignors = configured_assignors(config)
        missing = set(config.consumer_group_assignors) - set(assignors)
        assert not missing, f"no server assignor named {sorted(missing)}"
        self._consumer = ConsumerMembership(self._runtime, topics or NoTopics(), assignors)
        classic_members = ClassicMembers(self._runtime, self._consumer, self._membership)
        self._membership.classic_members = classic_members
        self._consumer.migration = classic_members
        self._offsets = Offsets(self._runtime, self._membership)
        self._admin = Admin(self._runtime, self._membership, self._consumer)
        self._transactional = TransactionalOffsets(self._runtime)
        self._offsets.schedule_expiry()

    # ---------------------------------------------------------------- partitions of __consumer_offsets
    @property
    def partition_count(self) -> int:
        """The partitions of __consumer_offsets the groups are spread over."""
        return self._runtime.partition_count

    def use_partition_count(self, partition_count: int) -> None:
        """__consumer_offsets exists with ``partition_count`` partitions: spread the groups over
        those (offsets.topic.num.partitions is only the count it is created with; Kafka reads the
        topic's own count too). Call it before any partition is loaded."""
        assert partition_count > 0, f"__consumer_offsets cannot have {partition_count} partitions"
        if partition_count == self._runtime.partition_count:
            return
        assert not self._runtime.partitions, (
            f"the partition count of __consumer_offsets changed from {self._runtime.partition_count} "
            f"to {partition_count} with partitions {sorted(self._runtime.partitions)} loaded"
        )
        self._runtime.partition_count = partition_count

    def begin_loading(self, partition: int) -> None:
        """This coordinator now owns ``partition``; its groups answer COORDINATOR_LOAD_IN_PROGRESS."""
        if partition in self._runtime.partitions:
            self.unload(partition)
        self._runtime.partitions[partition] = PartitionStatus.LOADING
        self._runtime.partition_epochs[partition] = self._runtime.partition_epochs.get(partition, 0) + 1
        self._runtime.open_transactions.pop(partition, None)
        self._runtime.markers_while_loading[partition] = []

    def replay(self, partition: int, key: bytes, value: bytes | None) -> None:
        """One record of the partition, in log order (``value`` None for a tombstone)."""
        self._assert_loading(partition)
        self._runtime.apply_record(key, value, loading=True)

    def replay_transactional(
        self, partition: int, producer_id: int, key: bytes, value: bytes | None, log_offset: int
    ) -> None:
        """A record of a transactional batch of ``producer_id`` at ``log_offset`` whose marker has
        not been replayed (yet): a pending offset. Raises ``CorruptCoordinatorRecord`` for a record
        that is not an offset commit."""
        self._assert_loading(partition)
        self._runtime.apply_transactional_record(partition, producer_id, key, value, log_offset)

    def replay_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """The producer's COMMIT or ABORT marker, in log order among the replayed records."""
        self._assert_loading(partition)
        self._runtime.complete_transaction(partition, producer_id, commit)

    def _assert_loading(self, partition: int) -> None:
        assert self._runtime.partitions.get(partition) is PartitionStatus.LOADING, (
            f"replay into partition {partition} that is not loading"
        )

    def finish_loading(self, partition: int) -> None:
        assert self._runtime.partitions.get(partition) is PartitionStatus.LOADING, (
            f"partition {partition} finished loading without beginning"
        )
        self._runtime.partitions[partition] = PartitionStatus.ACTIVE
        for producer_id, commit in self._runtime.markers_while_loading.pop(partition, []):
            self._runtime.complete_transaction(partition, producer_id, commit)
        for group in self._groups_of(partition):
            consumer = group.consumer
            if consumer is not None and not consumer.exists:
                # Member records without their group's (a log cut short): nothing to serve.
                group.consumer = None
                self._runtime.forget_if_unused(group)
                continue
            if consumer is not None:
                consumer.prune_orphans()
                # Topics may have changed while nobody coordinated the group: resolved again on
                # its next operation.
                consumer.metadata_stale = True
                if not consumer.members:
                    consumer.empty_since_ms = self._runtime.now_wall_ms()
            self._membership.arm_loaded_sessions(group)
            self._consumer.arm_loaded(group)
        self._runtime.history.loaded(group.group_id for group in self._groups_of(partition) if group.members)

    def unload(self, partition: int) -> None:
        """The partition moved away: forget its groups, answering parked requests NOT_COORDINATOR."""
        for group in self._groups_of(partition):
            self._drop_group(group, ErrorCode.NOT_COORDINATOR)
        self._runtime.partitions.pop(partition, None)
        self._runtime.open_transactions.pop(partition, None)
        self._runtime.markers_while_loading.pop(partition, None)
        self._runtime.history.unload(partition)

    def owns(self, group_id: str) -> bool:
        return self._runtime.partition_of(group_id) in self._runtime.partitions

    def _groups_of(self, partition: int) -> list[Group]:
        return self._runtime.groups.of_partition(partition)

    def _drop_group(self, group: Group, error: ErrorCode) -> None:
        if group.state is not GroupState.DEAD:
            group.transition_to(GroupState.DEAD, self._runtime.now_wall_ms())
        self._runtime.cancel_group_timers(group)
        self._membership.fail_parked(group, error)
        self._consumer.fail_waiting(group, error)
        self._runtime.groups.pop(group.group_id, None)

    # ---------------------------------------------------------------- membership
    def join_group(
        self,
        request: JoinGroupRequest,
        version: int,
        client_id: str,
        client_host: str,
        respond: Callable[[JoinGroupResponse], None],
    ) -> None:
        def answer(result: JoinResult) -> None:
            respond(join_response(result, version))

        self._membership.join(request, version, client_id, client_host, answer)

    def sync_group(
        self, request: SyncGroupRequest, version: int, respond: Callable[[SyncGroupResponse], None]
    ) -> None:
        def answer(result: SyncResult) -> None:
            respond(sync_response(result, version))

        self._membership.sync(request, version, answer)

    def heartbeat(self, request: HeartbeatRequest, version: int) -> HeartbeatResponse:
        return self._membership.heartbeat(request, version)

    def leave_group(self, request: LeaveGroupRequest, version: int) -> LeaveGroupResponse:
        return self._membership.leave(request, version)

    # ---------------------------------------------------------------- the consumer group protocol
    def consumer_group_heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        version: int,
        client_id: str,
        client_host: str,
        respond: Callable[[ConsumerGroupHeartbeatResponse], None],
    ) -> None:
        """ConsumerGroupHeartbeat (KIP-848): ``respond`` is called at once or once the group's
        records are written."""
        self._consumer.heartbeat(request, version, client_id, client_host, respond)

    def consumer_group_describe(
        self, request: ConsumerGroupDescribeRequest, version: int
    ) -> ConsumerGroupDescribeResponse:
        """ConsumerGroupDescribe (authorized operations left at their default: the broker fills them)."""
        return self._admin.describe_consumer_groups(request, version)

    def topics_changed(self, names: Iterable[str] | None = None) -> None:
        """Topics were created, deleted or gained partitions (``names``; None: any may have). Consumer
        groups whose subscribed topics' metadata changed get a new epoch and target assignment."""
        self._consumer.topics_changed(names)

    def set_group_configs(self, group_id: str, values: Mapping[str, int]) -> None:
        """``group_id``'s group configs are now ``values`` (checked, ``check_group_configs``; none:
        the broker's defaults). A member's next heartbeat gets them."""
        if values:
            self._runtime.group_configs[group_id] = dict(values)
        else:
            self._runtime.group_configs.pop(group_id, None)

    # ---------------------------------------------------------------- offsets
    def commit_offsets(
        self, request: OffsetCommitRequest, version: int, respond: Callable[[OffsetCommitResponse], None]
    ) -> None:
        self._offsets.commit(request, version, respond)

    def fetch_offsets(self, request: OffsetFetchRequest, version: int) -> OffsetFetchResponse:
        return self._offsets.fetch(request, version)

    def delete_offsets(
        self, request: OffsetDeleteRequest, version: int, respond: Callable[[OffsetDeleteResponse], None]
    ) -> None:
        self._offsets.delete(request, version, respond)

    # ---------------------------------------------------------------- transactional offsets
    def commit_transactional_offsets(
        self,
        request: TxnOffsetCommitRequest,
        version: int,
        respond: Callable[[TxnOffsetCommitResponse], None],
    ) -> None:
        """TxnOffsetCommit: the offsets are written as one transactional batch of the request's
        producer and are pending until ``complete_transaction``."""
        self._transactional.commit(request, version, respond)

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> None:
        """The broker wrote ``producer_id``'s marker (COMMIT if ``commit``, else ABORT) to
        ``partition`` of ``__consumer_offsets``: the producer's pending offsets of that partition's
        groups become committed (each unless a later write of its partition's offset won already)
        or are dropped. Call it once the marker is written (in the log, as the transactional batch
        it completes). A partition this coordinator does not own is no concern of it; one still
        loading applies the marker once loaded (the load may have read the log before it — a marker
        read twice completes nothing the second time)."""
        status = self._runtime.partitions.get(partition)
        if status is PartitionStatus.LOADING:
            self._runtime.markers_while_loading.setdefault(partition, []).append((producer_id, commit))
        elif status is PartitionStatus.ACTIVE:
            self._runtime.complete_transaction(partition, producer_id, commit)

    def expire_offsets(self) -> None:
        """Run offset expiry now (it also runs every offsets.retention.check.interval.ms)."""
        self._offsets.expire()

    # ---------------------------------------------------------------- admin
    def describe_groups(self, request: DescribeGroupsRequest, version: int) -> DescribeGroupsResponse:
        return self._admin.describe(request, version)

    def list_groups(self, request: ListGroupsRequest, version: int) -> ListGroupsResponse:
        return self._admin.list_groups(request, version)

    def delete_groups(
        self, request: DeleteGroupsRequest, version: int, respond: Callable[[DeleteGroupsResponse], None]
    ) -> None:
        self._admin.delete_groups(request, version, respond)

    @property
    def rebalances_total(self) -> int:
        return self._runtime.rebalances_total

    # ---------------------------------------------------------------- rebalance history
    def group_history(self, group_id: str) -> tuple[ErrorCode, list[RebalanceEntry]]:
        """The group's finished rebalances, oldest first, then the one under way (end_ms -1):
        NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS if this coordinator cannot answer,
        GROUP_ID_NOT_FOUND if it has neither the group nor any history of it."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, []
        error = self._runtime.group_error(group_id)
        if error is not None:
            return error, []
        history = self._runtime.history
        entries = history.entries(group_id)
        in_progress = history.in_progress(group_id)
        if in_progress is not None:
            entries.append(in_progress)
        if not entries and group_id not in self._runtime.groups:
            return ErrorCode.GROUP_ID_NOT_FOUND, []
        return ErrorCode.NONE, entries

    @property
    def history(self) -> RebalanceHistory:
        """The rebalance history (its counters feed /metrics)."""
        return self._runtime.history

    def group_states(self) -> dict[str, str]:
        """Each group's state: a classic group's, or a consumer group's (Empty, Assigning,
        Reconciling, Stable; its members are ``group(id).consumer.members``)."""
        return {
            group_id: group.consumer.state().value
            if group.consumer is not None and group.is_consumer_group
            else group.state.value
            for group_id, group in sorted(self._runtime.groups.items())
        }

    def group(self, group_id: str) -> Group | None:
        """The live group (read-only use: tests, metrics, the CLI)."""
        return self._runtime.groups.get(group_id)

    def shutdown(self) -> None:
        """Answer every parked request NOT_COORDINATOR (the client finds the new coordinator) and stop."""
        for partition in list(self._runtime.partitions):
            self.unload(partition)
        self._runtime.timer.cancel(offsets_expiry_key())
