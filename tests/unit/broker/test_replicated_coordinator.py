"""The group coordinator of a broker of a cluster, over a real ``__consumer_offsets`` log and the
real replica state (``PartitionRoles``) with a manual clock: a commit or a group's assignment is
answered once the in-sync followers have it, the client is told to retry (Kafka's errors) when
they do not in ``offsets.commit.timeout.ms`` or the leadership moves, answers come in log order,
and a broker that leads the partition again loads exactly what was acknowledged. Alone, a broker
answers at once, as before."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, cast

from strom.base.clock import ManualClock
from strom.broker.cluster.partitions import PartitionRoles
from strom.broker.group_topics import BrokerTopics
from strom.broker.groups import OFFSETS_TOPIC_CONFIG, CoordinatorTopicWriter, GroupService
from strom.broker.refused import Refused
from strom.broker.replication import ReadAccess, Replication
from strom.cluster.actions import PartitionInfo
from strom.cluster.config import ReplicationConfig
from strom.cluster.model import TopicPartition
from strom.coordinator import OFFSETS_TOPIC, CoordinatorConfig
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from strom.protocol.messages.offset_fetch import OffsetFetchRequest
from strom.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from strom.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from strom.storage import LogConfig, LogManager, PartitionLog

TOPIC_ID = uuid.uuid4()
COMMIT_TIMEOUT_MS = 5_000
TP = TopicPartition(OFFSETS_TOPIC, 0)


class NoTopics:
    """The replication as the consumer-protocol groups see it: no topics (these tests have none)."""

    def topic_names(self) -> list[str]:
        return []

    def topic(self, name: str) -> None:
        return None


class RolesReplication:
    """What ``ClusterReplication`` gives the writer, over ``PartitionRoles`` alone."""

    waits_for_replicas = True

    def __init__(self, roles: PartitionRoles) -> None:
        self.roles = roles

    def writable(self, topic: str, partition: int, acks: int) -> PartitionLog:
        entry = self.roles.led.get(TopicPartition(topic, partition))
        if entry is None:
            raise Refused(ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader")
        error = entry.leader.check_acks_all()
        if error != ErrorCode.NONE:
            raise Refused(error, "ISR too small")
        return entry.log

    def wait_for_acks(
        self, appended: Sequence[tuple[PartitionLog, int]], timeout_ms: int
    ) -> Awaitable[list[ErrorCode]]:
        return self.roles.wait_for_acks(appended, timeout_ms)


class Broker:
    """One broker's coordinator, leading ``__consumer_offsets``-0 with followers 2 and 3."""

    def __init__(self, data_dir: Path, *, replicated: bool = True) -> None:
        self.clock = ManualClock()
        self.logs = LogManager(data_dir, LogConfig(), self.clock)
        self.logs.load()
        if self.logs.topic(OFFSETS_TOPIC) is None:
            self.logs.create_topic(OFFSETS_TOPIC, 1, OFFSETS_TOPIC_CONFIG, internal=True)
        self.log = self.logs.log(OFFSETS_TOPIC, 0)
        assert self.log is not None
        self.roles = PartitionRoles(
            1,
            ReplicationConfig(replica_lag_time_max_ms=60_000),
            self.clock,
            wake_readers=lambda topic, partition: None,
            wake_replicas=lambda topic, partition: None,
            alter_isr=lambda: None,
        )
        config = CoordinatorConfig(
            group_initial_rebalance_delay_ms=0,
            offsets_topic_num_partitions=1,
            offsets_commit_timeout_ms=COMMIT_TIMEOUT_MS,
        )
        self.service = GroupService(
            config,
            self.logs,
            self.clock,
            self.roles.on_append if replicated else lambda t, p: None,
            lambda p: None,
            BrokerTopics(lambda: cast(Replication, NoTopics()), dict),
        )
        if replicated:
            self.log.track_high_watermark()
            self.service.replicate_through(RolesReplication(self.roles))
        self.epoch = 0

    async def lead(self) -> None:
        self.service.start(load=False)
        self.epoch += 1
        info = PartitionInfo(OFFSETS_TOPIC, 0, TOPIC_ID, 1, self.epoch, (1, 2, 3), self.epoch, (1, 2, 3), 1)
        assert self.log is not None
        self.roles.become_leader(info, self.log)
        self.service.become_coordinator(0)
        while self.service.loading_partitions():
            await asyncio.sleep(0)

    def lose_leadership(self) -> None:
        # As ClusterReplication._become_follower: the coordinator resigns, then the replica.
        self.service.resign_coordinator(0)
        self.epoch += 1
        info = PartitionInfo(OFFSETS_TOPIC, 0, TOPIC_ID, 2, self.epoch, (1, 2, 3), self.epoch, (1, 2, 3), 1)
        assert self.log is not None
        self.roles.become_follower(info, self.log, None)

    def followers_fetch(self, *followers: int) -> None:
        """The followers fetch at the leader's log end (they have everything so far)."""
        assert self.log is not None
        access = ReadAccess(self.log, None, self.epoch)
        for follower in followers:
            assert self.roles.follower_fetched(access, follower, self.log.log_end_offset) == ErrorCode.NONE

    def commit(self, group_id: str, offset: int, member_id: str = "", generation_id: int = -1) -> list[Any]:
        request = OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=generation_id,
            member_id=member_id,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name="t",
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=offset
                        )
                    ],
                )
            ],
        )
        box: list[OffsetCommitResponse] = []
        self.service.coordinator.commit_offsets(request, 8, box.append)
        return box

    def committed(self, group_id: str) -> int | ErrorCode:
        request = OffsetFetchRequest(
            group_id=group_id,
            topics=[OffsetFetchRequest.OffsetFetchRequestTopic(name="t", partition_indexes=[0])],
        )
        response = self.service.coordinator.fetch_offsets(request, 6)
        if response.error_code != ErrorCode.NONE:
            return ErrorCode(response.error_code)
        return int(response.topics[0].partitions[0].committed_offset)

    def join(self, group_id: str, member_id: str = "") -> list[JoinGroupResponse]:
        request = JoinGroupRequest(
            group_id=group_id,
            session_timeout_ms=30_000,
            rebalance_timeout_ms=30_000,
            member_id=member_id,
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")],
        )
        box: list[JoinGroupResponse] = []
        self.service.coordinator.join_group(request, 5, "client", "/127.0.0.1", box.append)
        return box

    def sync(
        self, group_id: str, member_id: str, generation_id: int, assignments: dict[str, bytes] | None = None
    ) -> list[SyncGroupResponse]:
        request = SyncGroupRequest(
            group_id=group_id,
            generation_id=generation_id,
            member_id=member_id,
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=key, assignment=value)
                for key, value in (assignments or {}).items()
            ],
        )
        box: list[SyncGroupResponse] = []
        self.service.coordinator.sync_group(request, 3, box.append)
        return box

    async def close(self) -> None:
        self.service.shutdown()
        await self.roles.close()
        await asyncio.sleep(0)
        self.logs.close()


def error_of(box: list[OffsetCommitResponse]) -> ErrorCode:
    (response,) = box
    return ErrorCode(response.topics[0].partitions[0].error_code)


async def settle() -> None:
    """Let the loop run what is ready now (timers due at once included), no wall-clock wait."""
    for _ in range(5):
        await asyncio.sleep(0)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


def test_a_commit_is_answered_and_visible_once_every_in_sync_follower_has_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = Broker(tmp_path)
        await broker.lead()
        box = broker.commit("g", 42)
        await settle()
        assert box == [] and broker.committed("g") == -1  # written, not yet replicated
        broker.followers_fetch(2)
        await settle()
        assert box == []  # follower 3 has not got it yet
        broker.followers_fetch(3)
        await settle()
        assert error_of(box) == ErrorCode.NONE and broker.committed("g") == 42
        await broker.close()

    run(scenario)


def test_followers_that_do_not_keep_up_make_the_client_retry(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = Broker(tmp_path)
        await broker.lead()
        box = broker.commit("g", 7)
        await settle()
        broker.clock.advance(COMMIT_TIMEOUT_MS + 1)
        broker.roles.tick(all_leaders=False)
        await settle()
        # The commit was not replicated in offsets.commit.timeout.ms: REQUEST_TIMED_OUT, which
        # clients retry (a ZooKeeper-mode Kafka's answer); it is not applied.
        assert error_of(box) == ErrorCode.REQUEST_TIMED_OUT
        assert broker.committed("g") == -1
        await broker.close()

    run(scenario)


def test_losing_the_leadership_answers_waiting_writes_and_parked_members_not_coordinator(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        broker = Broker(tmp_path)
        await broker.lead()
        (first,) = broker.join("group")  # MEMBER_ID_REQUIRED
        joined = broker.join("group", first.member_id)
        await settle()
        (leader,) = joined
        assert leader.error_code == ErrorCode.NONE
        second = broker.join("group")  # a new member: the group starts rebalancing, it waits
        commit = broker.commit("other", 5)
        await settle()
        assert commit == [] and second != []  # the commit waits for the followers
        (pending,) = second
        parked = broker.join("group", pending.member_id)
        assert parked == []
        broker.lose_leadership()
        await settle()
        assert error_of(commit) == ErrorCode.NOT_COORDINATOR
        assert [response.error_code for response in parked] == [ErrorCode.NOT_COORDINATOR]
        assert broker.committed("other") == ErrorCode.NOT_COORDINATOR
        assert [response.error_code for response in broker.join("group")] == [ErrorCode.NOT_COORDINATOR]
        await broker.close()

    run(scenario)


def test_the_assignment_counts_once_replicated_and_a_failed_write_sends_members_back(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        broker = Broker(tmp_path)
        await broker.lead()
        (first,) = broker.join("g")
        box = broker.join("g", first.member_id)
        await settle()
        (joined,) = box
        member_id, generation = joined.member_id, joined.generation_id
        synced = broker.sync("g", member_id, generation, {member_id: b"assignment"})
        await settle()
        assert synced == []  # the group's record is being replicated
        broker.followers_fetch(2, 3)
        await settle()
        assert [(r.error_code, r.assignment) for r in synced] == [(ErrorCode.NONE, b"assignment")]
        # A new generation whose record the followers never get: the members are told to retry.
        (newcomer,) = broker.join("g")
        rejoin = broker.join("g", member_id)
        second = broker.join("g", newcomer.member_id)
        await settle()
        assert rejoin and second
        generation = rejoin[0].generation_id
        synced = broker.sync("g", member_id, generation, {member_id: b"a", newcomer.member_id: b"b"})
        follower_sync = broker.sync("g", newcomer.member_id, generation)
        await settle()
        broker.clock.advance(COMMIT_TIMEOUT_MS + 1)
        broker.roles.tick(all_leaders=False)
        await settle()
        # The group's record timed out waiting for the followers: the members are told to rejoin.
        assert [r.error_code for r in synced + follower_sync] == [ErrorCode.REBALANCE_IN_PROGRESS] * 2
        await broker.close()

    run(scenario)


def test_a_broker_leading_again_loads_what_was_acknowledged(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = Broker(tmp_path / "data")
        await broker.lead()
        box = broker.commit("g", 11)
        await settle()
        broker.followers_fetch(2, 3)
        await settle()
        assert error_of(box) == ErrorCode.NONE
        broker.lose_leadership()
        await broker.lead()  # leader again in a later epoch: loaded from its log
        assert broker.committed("g") == 11
        await broker.close()

    run(scenario)


def test_a_transactional_commit_counts_once_replicated_and_stays_pending_across_a_move(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        broker = Broker(tmp_path / "data")
        await broker.lead()
        broker.commit("g", 3)
        request = TxnOffsetCommitRequest(
            transactional_id="tx",
            group_id="g",
            producer_id=77,
            producer_epoch=0,
            topics=[
                TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                    name="t",
                    partitions=[
                        TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=9
                        )
                    ],
                )
            ],
        )
        box: list[TxnOffsetCommitResponse] = []
        broker.service.coordinator.commit_transactional_offsets(request, 3, box.append)
        await settle()
        assert box == []  # both writes wait for the followers
        broker.followers_fetch(2, 3)
        await settle()
        assert box[0].topics[0].partitions[0].error_code == ErrorCode.NONE
        group = broker.service.coordinator.group("g")
        assert group is not None and group.pending_transactional_offsets[77][("t", 0)].log_offset == 1
        assert broker.committed("g") == 3
        broker.lose_leadership()
        await broker.lead()  # loaded again: the transaction is still open
        group = broker.service.coordinator.group("g")
        assert group is not None and group.pending_transactional_offsets[77][("t", 0)].log_offset == 1
        broker.service.complete_transaction(0, 77, commit=True)
        assert broker.committed("g") == 9
        await broker.close()

    run(scenario)


def test_answers_come_in_the_order_of_the_appends() -> None:
    """Two writes to one partition: the second's replicas answer first; its completion still
    waits for the first's, so the coordinator applies records in log order."""

    class Controlled:
        def __init__(self) -> None:
            self.waits: list[asyncio.Future[list[ErrorCode]]] = []
            self.log: Any = FakePartitionLog()

        def writable(self, topic: str, partition: int, acks: int) -> Any:
            return self.log

        def wait_for_acks(self, appended: Any, timeout_ms: int) -> Awaitable[list[ErrorCode]]:
            future: asyncio.Future[list[ErrorCode]] = asyncio.get_running_loop().create_future()
            self.waits.append(future)
            return future

    class FakePartitionLog:
        log_end_offset = 0

        def append(self, data: Any, headers: Any, now_ms: int) -> None:
            self.log_end_offset += 1

        def needs_flush(self, now_ms: int) -> bool:
            return False

    async def scenario() -> None:
        replicated = Controlled()
        writer = CoordinatorTopicWriter(None, ManualClock(), lambda t, p: None, lambda p: None)  # type: ignore[arg-type]
        writer.replicate_through(replicated, COMMIT_TIMEOUT_MS)
        answered: list[tuple[str, ErrorCode]] = []
        writer.append(0, [(b"k", b"1")], lambda error: answered.append(("first", error)))
        writer.append(0, [(b"k", b"2")], lambda error: answered.append(("second", error)))
        writer.append(1, [(b"k", b"3")], lambda error: answered.append(("other partition", error)))
        first, second, other = replicated.waits
        second.set_result([ErrorCode.NONE])
        other.set_result([ErrorCode.NONE])
        await settle()
        assert answered == [("other partition", ErrorCode.NONE)]
        first.set_result([ErrorCode.REQUEST_TIMED_OUT])
        await settle()
        assert answered[1:] == [("first", ErrorCode.REQUEST_TIMED_OUT), ("second", ErrorCode.NONE)]

    run(scenario)


def test_a_single_node_answers_at_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = Broker(tmp_path, replicated=False)
        await broker.lead()
        box = broker.commit("g", 3)
        assert error_of(box) == ErrorCode.NONE and broker.committed("g") == 3  # no wait, no loop turn
        await broker.close()

    run(scenario)


def test_the_offsets_topic_waits_for_as_many_live_brokers_as_its_replication_factor(tmp_path: Path) -> None:
    """FindCoordinator in a cluster without ``__consumer_offsets``: COORDINATOR_NOT_AVAILABLE and no
    creation while fewer brokers than ``offsets.topic.replication.factor`` are alive (Kafka does
    not make it with fewer replicas); with enough, the topic is created with the full factor."""
    from strom.broker.cluster.runtime import ClusterReplication, ClusterSettings
    from strom.broker.config import BrokerConfig
    from strom.broker.state import BrokerState
    from strom.cluster.model import BrokerRegistration, Endpoint

    async def scenario() -> None:
        config = BrokerConfig(
            host="127.0.0.1",
            port=0,
            data_dir=tmp_path / "data",
            values={"zookeeper.connect": "127.0.0.1:2181", "broker.id": "1"},
        )
        state = BrokerState(config, clock=ManualClock())
        replication = ClusterReplication(state, ClusterSettings.from_config(config))
        created: list[tuple[str, int]] = []

        async def create_topic(
            name: str, partitions: int, factor: int, *arguments: Any, **keywords: Any
        ) -> Any:
            created.append((name, factor))

        replication.create_topic = create_topic  # type: ignore[method-assign]
        brokers = replication.control.metadata.brokers
        for node_id in (1, 2):
            brokers[node_id] = BrokerRegistration(
                node_id, "127.0.0.1", 9000 + node_id, (Endpoint("PLAINTEXT", "127.0.0.1", 9000 + node_id),)
            )
        refused = replication.find_coordinator("g", "PLAINTEXT")
        assert isinstance(refused, Refused) and refused.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert "offsets.topic.replication.factor is 3" in refused.message
        await settle()
        assert created == []
        brokers[3] = BrokerRegistration(3, "127.0.0.1", 9003, (Endpoint("PLAINTEXT", "127.0.0.1", 9003),))
        refused = replication.find_coordinator("g", "PLAINTEXT")
        assert isinstance(refused, Refused) and refused.error == ErrorCode.COORDINATOR_NOT_AVAILABLE
        await settle()
        assert created == [(OFFSETS_TOPIC, 3)]
        state.close()

    run(scenario)
