"""Consumer-group members for the coordinator failover tests, and the checks made of them.

Two kinds of member:

* ``RawMember``: a group member made of strom's own protocol classes over a plain connection
  (``PeerConnection``), on a shared event loop thread. It does what a consumer's group logic does
  (FindCoordinator, the two-step JoinGroup, the range assignment when it leads, SyncGroup,
  heartbeats, rediscovery after NOT_COORDINATOR or a broken connection), and the test can hold it
  at a named step (``hold("join")``: it stops right before its next JoinGroup, and says so in
  ``held_at``) to put the group in the phase a test needs when the coordinator is killed.
* ``ConfluentMember``, ``KafkaPythonMember``, ``StromMember``: the real clients, each polling on
  its own thread; the test thread asks them to commit through a call queue (a client is used from
  its own thread only) and reads what they recorded: assignment, generation, records received.

Everything is observed from the clients' side: what each member was assigned, in which
generation, which commits were acknowledged, which records it received and when.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
import socket
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from strom.assignors import (
    GroupMember,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    get_assignor,
)
from strom.broker.cluster.peer import PeerConnection, PeerError
from strom.cli.dev_cluster import LocalCluster
from strom.client.consumer import Consumer as StromConsumer
from strom.client.transport import LoopThread
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from strom.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from strom.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from strom.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse

from .cluster_support import live_bootstrap, wait_until

# kafka-python 3 loads its protocol schemas with importlib.resources.read_text/open_text, deprecated
# in 3.11; the suite turns warnings into errors, so its import (and lazy loads) are let through.
KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.errors import KafkaConnectionError
    from kafka.net.inet import KafkaNetSocket
    from kafka.structs import MemberState, OffsetAndMetadata

# Sessions outlast the failover (the ZooKeeper session of the dead broker, the election, the
# load), so members that find the new coordinator in time are still members there.
SESSION_TIMEOUT_MS = 15_000
HEARTBEAT_INTERVAL_MS = 300
REQUEST_TIMEOUT_MS = 10_000
POLL_TIMEOUT_S = 0.1
CALL_TIMEOUT_S = 30.0
THREAD_JOIN_TIMEOUT_S = 30.0
RETRY_BACKOFF_S = 0.1
# Versions of the raw members' requests (all before the flexible versions).
FIND_COORDINATOR_VERSION = 2
JOIN_GROUP_VERSION = 5
SYNC_GROUP_VERSION = 3
HEARTBEAT_VERSION = 3
LEAVE_GROUP_VERSION = 3
OFFSET_COMMIT_VERSION = 7
# Errors after which a member looks the coordinator up again.
COORDINATOR_ERRORS = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
GENERATION_MAGIC = b"CGMDv2:"


class RawMember:
    """A consumer-protocol member speaking the wire protocol itself (see the module docs)."""

    def __init__(
        self,
        loop: LoopThread,
        cluster: LocalCluster,
        name: str,
        group: str,
        topic: str,
        partitions: int,
        *,
        instance_id: str | None = None,
    ) -> None:
        self.loop = loop
        self.cluster = cluster
        self.name = name
        self.group = group
        self.topic = topic
        self.partitions = partitions
        self.instance_id = instance_id
        self.member_id = ""
        self.generation = -1
        self.leader = False
        self.assignment: frozenset[int] = frozenset()
        # What it was told: every JoinGroup/SyncGroup/Heartbeat error, in order.
        self.told: list[tuple[str, ErrorCode]] = []
        self.stable = False
        self.held_at: str | None = None
        # The request waiting for its answer now (e.g. "JoinGroupRequest" while parked).
        self.in_request: str | None = None
        self._holds: set[str] = set()
        self._stop = False
        self._peer: PeerConnection | None = None
        self._lock = threading.Lock()
        self._task: concurrent.futures.Future[None] | None = None

    # ---- the test thread ----------------------------------------------------------------------

    def start(self) -> RawMember:
        self._task = self.loop.submit(self._run())
        return self

    def hold(self, step: str) -> None:
        """Stop right before the next ``step`` ("join", "sync", "heartbeat") until released."""
        with self._lock:
            self._holds.add(step)

    def release(self, step: str) -> None:
        with self._lock:
            self._holds.discard(step)

    def wait_held(self, step: str, timeout_s: float = 30.0) -> None:
        wait_until(lambda: self.held_at == step, f"{self.name} to stop before {step}", timeout_s)

    def commit(self, offsets: dict[int, int]) -> dict[int, ErrorCode]:
        return self.loop.run(self._commit(offsets), timeout_s=CALL_TIMEOUT_S)

    def stop(self) -> None:
        self._stop = True
        with self._lock:
            self._holds.clear()
        if self._task is not None:
            self._task.result(THREAD_JOIN_TIMEOUT_S)

    # ---- the member (on the loop) -----------------------------------------------------------------

    async def _checkpoint(self, step: str) -> None:
        while not self._stop:
            with self._lock:
                if step not in self._holds:
                    break
            self.held_at = step
            await asyncio.sleep(0.02)
        self.held_at = None

    async def _request(self, request: Any, version: int, response_type: Any) -> Any:
        if self._peer is None or self._peer.closed:
            self._peer = await self._find_coordinator()
        self.in_request = type(request).__name__
        try:
            return await self._peer.request(request, version, response_type, REQUEST_TIMEOUT_MS)
        finally:
            self.in_request = None

    async def _find_coordinator(self) -> PeerConnection:
        """Ask every live broker in turn until one names the coordinator."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self._stop:
            for address in live_bootstrap(self.cluster).split(","):
                host, port = address.rsplit(":", 1)
                peer = PeerConnection(host, int(port), self.name)
                try:
                    response: FindCoordinatorResponse = await peer.request(
                        FindCoordinatorRequest(key=self.group, key_type=0),
                        FIND_COORDINATOR_VERSION,
                        FindCoordinatorResponse,
                        REQUEST_TIMEOUT_MS,
                    )
                except PeerError:
                    continue
                finally:
                    peer.close()
                if response.error_code == ErrorCode.NONE:
                    return PeerConnection(response.host, response.port, self.name)
            await asyncio.sleep(RETRY_BACKOFF_S)
        raise PeerError(f"{self.name}: no coordinator found for {self.group}")

    def _lost_coordinator(self) -> None:
        if self._peer is not None:
            self._peer.close()
        self._peer = None

    async def _run(self) -> None:
        need_join = True
        while not self._stop:
            try:
                if need_join:
                    need_join = await self._join_and_sync()
                else:
                    await self._checkpoint("heartbeat")
                    if self._stop:
                        break
                    need_join = await self._heartbeat()
                    if not need_join:
                        await asyncio.sleep(HEARTBEAT_INTERVAL_MS / 1000)
            except PeerError:
                self._lost_coordinator()
                await asyncio.sleep(RETRY_BACKOFF_S)
        if self.member_id:
            with contextlib.suppress(PeerError):
                await self._request(
                    LeaveGroupRequest(
                        group_id=self.group,
                        members=[
                            LeaveGroupRequest.MemberIdentity(
                                member_id=self.member_id, group_instance_id=self.instance_id
                            )
                        ],
                    ),
                    LEAVE_GROUP_VERSION,
                    LeaveGroupResponse,
                )
        self._lost_coordinator()

    def _note(self, what: str, error: int) -> ErrorCode:
        code = ErrorCode(error)
        self.told.append((what, code))
        if code in COORDINATOR_ERRORS:
            self._lost_coordinator()
        return code

    async def _join_and_sync(self) -> bool:
        """One JoinGroup + SyncGroup round; whether another is needed."""
        self.stable = False
        await self._checkpoint("join")
        if self._stop:
            return True
        subscription = encode_subscription(Subscription([self.topic]))
        request = JoinGroupRequest(
            group_id=self.group,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=SESSION_TIMEOUT_MS,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=subscription)],
        )
        joined: JoinGroupResponse = await self._request(request, JOIN_GROUP_VERSION, JoinGroupResponse)
        error = self._note("join", joined.error_code)
        if error == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = joined.member_id
            return True
        if error == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return True
        if error != ErrorCode.NONE:
            await asyncio.sleep(RETRY_BACKOFF_S)
            return True
        self.member_id = joined.member_id
        self.generation = joined.generation_id
        self.leader = joined.leader == joined.member_id
        assignments = self._assign(joined) if self.leader else {}
        await self._checkpoint("sync")
        if self._stop:
            return True
        synced: SyncGroupResponse = await self._request(
            SyncGroupRequest(
                group_id=self.group,
                generation_id=joined.generation_id,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                assignments=[
                    SyncGroupRequest.SyncGroupRequestAssignment(member_id=member_id, assignment=assignment)
                    for member_id, assignment in assignments.items()
                ],
            ),
            SYNC_GROUP_VERSION,
            SyncGroupResponse,
        )
        error = self._note("sync", synced.error_code)
        if error == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if error != ErrorCode.NONE:
            return True
        self.assignment = frozenset(
            partition
            for topic, partition in decode_assignment(synced.assignment).partitions
            if topic == self.topic
        )
        self.stable = True
        return False

    def _assign(self, joined: JoinGroupResponse) -> dict[str, bytes]:
        members = [
            GroupMember(member.member_id, member.group_instance_id, decode_subscription(member.metadata))
            for member in joined.members
        ]
        assigned = get_assignor("range").assign({self.topic: self.partitions}, members)
        return {member_id: encode_assignment(assignment) for member_id, assignment in assigned.items()}

    async def _heartbeat(self) -> bool:
        response: HeartbeatResponse = await self._request(
            HeartbeatRequest(
                group_id=self.group,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
            ),
            HEARTBEAT_VERSION,
            HeartbeatResponse,
        )
        error = self._note("heartbeat", response.error_code)
        if error == ErrorCode.NONE or error in COORDINATOR_ERRORS:
            return False
        if error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            self.member_id = ""
        self.stable = False
        return True  # REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID: join again

    async def _commit(self, offsets: dict[int, int]) -> dict[int, ErrorCode]:
        request = OffsetCommitRequest(
            group_id=self.group,
            generation_id_or_member_epoch=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name=self.topic,
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=p, committed_offset=o
                        )
                        for p, o in sorted(offsets.items())
                    ],
                )
            ],
        )
        try:
            response: OffsetCommitResponse = await self._request(
                request, OFFSET_COMMIT_VERSION, OffsetCommitResponse
            )
        except PeerError:
            self._lost_coordinator()
            return dict.fromkeys(offsets, ErrorCode.NETWORK_EXCEPTION)
        return {p.partition_index: ErrorCode(p.error_code) for p in response.topics[0].partitions}

    # ---- what the checks read ------------------------------------------------------------------------

    def current_assignment(self) -> frozenset[int]:
        return self.assignment if self.stable else frozenset()

    def current_generation(self) -> int | None:
        return self.generation if self.stable else None


@dataclass
class Received:
    partition: int
    offset: int
    at: float  # time.monotonic() when the client handed it over


@dataclass
class MemberRecord:
    assignment: frozenset[int] = frozenset()
    generation: int | None = None
    received: list[Received] = field(default_factory=list)
    rebalances: int = 0  # assignment callbacks (or assignment changes) seen
    failure: str | None = None  # the member's thread died
    # Connection errors a client raised to the application and carried on after (see
    # KafkaPythonMember): the test thread may print them; they fail nothing by themselves.
    transient_errors: list[str] = field(default_factory=list)


class ClientMember:
    """A real client on its own thread; the test thread talks to it through ``call``."""

    kind = "client"

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, instance_id: str | None) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.instance_id = instance_id
        self.record = MemberRecord()
        self.lock = threading.Lock()
        self._calls: queue.Queue[tuple[Callable[[Any], Any], concurrent.futures.Future[Any]]] = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=f"member-{name}", daemon=True)

    def start(self) -> ClientMember:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(THREAD_JOIN_TIMEOUT_S)
        assert not self._thread.is_alive(), f"member {self.name} did not close in {THREAD_JOIN_TIMEOUT_S} s"

    def call(self, function: Callable[[Any], Any], timeout_s: float = CALL_TIMEOUT_S) -> Any:
        """Run ``function(client)`` on the member's thread; its result (or exception)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._calls.put((function, future))
        return future.result(timeout_s)

    def snapshot(self) -> MemberRecord:
        with self.lock:
            return MemberRecord(
                self.record.assignment,
                self.record.generation,
                list(self.record.received),
                self.record.rebalances,
                self.record.failure,
                list(self.record.transient_errors),
            )

    def current_assignment(self) -> frozenset[int]:
        with self.lock:
            return self.record.assignment

    def current_generation(self) -> int | None:
        with self.lock:
            return self.record.generation

    def commit(self, offsets: dict[int, int]) -> None:
        """Commit these offsets synchronously from the member's thread; raises if refused."""
        self.call(lambda client: self._commit(client, offsets))

    def _guarded(self) -> None:
        try:
            self._run()
        except Exception as error:  # the test thread sees it in snapshot().failure
            with self.lock:
                self.record.failure = f"{type(error).__name__}: {error}"
            while not self._calls.empty():
                _, future = self._calls.get()
                future.set_exception(RuntimeError(f"member {self.name} failed: {error}"))

    def _serve_calls(self, client: Any) -> None:
        while True:
            try:
                function, future = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                future.set_result(function(client))
            except Exception as error:
                future.set_exception(error)

    def _received(self, partition: int, offset: int) -> None:
        with self.lock:
            self.record.received.append(Received(partition, offset, time.monotonic()))

    def _set_assignment(self, partitions: frozenset[int], generation: int | None) -> None:
        with self.lock:
            if partitions != self.record.assignment or generation != self.record.generation:
                self.record.rebalances += 1
            self.record.assignment = partitions
            self.record.generation = generation

    def _run(self) -> None:
        raise NotImplementedError

    def _commit(self, client: Any, offsets: dict[int, int]) -> None:
        raise NotImplementedError


class ConfluentMember(ClientMember):
    kind = "confluent-kafka"

    def _run(self) -> None:
        config: dict[str, object] = {
            "bootstrap.servers": self.bootstrap,
            "broker.address.family": "v4",
            "group.id": self.group,
            "client.id": self.name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "partition.assignment.strategy": "range",
            "fetch.queue.backoff.ms": 10,
        }
        if self.instance_id is not None:
            config["group.instance.id"] = self.instance_id
        consumer = Consumer(config)
        owned: set[int] = set()

        def generation() -> int | None:
            metadata = consumer.consumer_group_metadata()
            if isinstance(metadata, bytes) and metadata.startswith(GENERATION_MAGIC):
                start = len(GENERATION_MAGIC)
                return int.from_bytes(metadata[start : start + 4], "little", signed=True)
            return None

        def on_assign(_: Consumer, partitions: list[TopicPartition]) -> None:
            owned.update(p.partition for p in partitions)
            self._set_assignment(frozenset(owned), generation())

        def on_revoke(_: Consumer, partitions: list[TopicPartition]) -> None:
            owned.difference_update(p.partition for p in partitions)
            self._set_assignment(frozenset(owned), None)

        try:
            consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
            while not self._stop.is_set():
                self._serve_calls(consumer)
                message = consumer.poll(POLL_TIMEOUT_S)
                if message is None or message.error() is not None:
                    continue
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                self._received(partition, offset)
        finally:
            consumer.close()

    def _commit(self, client: Any, offsets: dict[int, int]) -> None:
        results = client.commit(
            offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
        failed = [str(result.error) for result in results or [] if result.error is not None]
        if failed:
            raise RuntimeError(f"{self.name}: commit refused: {failed}")


class KafkaPythonMember(ClientMember):
    kind = "kafka-python"

    def _run(self) -> None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
            settings: dict[str, Any] = {
                "bootstrap_servers": self.bootstrap.split(","),
                "group_id": self.group,
                "client_id": self.name,
                "auto_offset_reset": "earliest",
                "enable_auto_commit": False,
                "session_timeout_ms": SESSION_TIMEOUT_MS,
                "heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
                "request_timeout_ms": 30_000,
            }
            if self.instance_id is not None:
                settings["group_instance_id"] = self.instance_id
            consumer = KafkaConsumer(**settings)
            try:
                consumer.subscribe([self.topic])
                # Metadata before the first poll (see tests/compat/test_groups_clients.py: a
                # kafka-python leader that learns the topic after subscribing rejoins at once).
                deadline = time.monotonic() + 30
                while not consumer.partitions_for_topic(self.topic) and time.monotonic() < deadline:
                    time.sleep(0.05)
                while not self._stop.is_set():
                    self._serve_calls(consumer)
                    try:
                        polled = consumer.poll(timeout_ms=100)
                    except KafkaConnectionError as error:
                        # kafka-python 3.0 lets a failed metadata refresh out of poll() while it
                        # looks for a new coordinator: when the broker it asks (its least-loaded
                        # node) is the coordinator just killed, FindCoordinator is refused, the
                        # refresh it then awaits fails the same way, and its
                        # ensure_coordinator_ready_async catches only a timeout around that
                        # refresh. The consumer itself is intact; the application polls again,
                        # and the member must still converge on the new coordinator.
                        with self.lock:
                            self.record.transient_errors.append(f"{type(error).__name__}: {error}")
                        continue
                    for topic_partition, messages in polled.items():
                        for message in messages:
                            self._received(topic_partition.partition, message.offset)
                    coordinator = consumer._coordinator
                    generation = coordinator._generation.generation_id if coordinator._generation else None
                    stable = coordinator.state == MemberState.STABLE
                    partitions = frozenset(tp.partition for tp in consumer.assignment())
                    self._set_assignment(
                        partitions, generation if stable and generation and generation > 0 else None
                    )
            finally:
                consumer.close(autocommit=False)

    def _commit(self, client: Any, offsets: dict[int, int]) -> None:
        client.commit(
            {KafkaTopicPartition(self.topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        )


class StromMember(ClientMember):
    kind = "strom"

    def _run(self) -> None:
        settings: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "client.id": self.name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
            "request.timeout.ms": REQUEST_TIMEOUT_MS,
        }
        if self.instance_id is not None:
            settings["group.instance.id"] = self.instance_id
        consumer = StromConsumer(settings)
        try:
            consumer.subscribe([self.topic])
            while not self._stop.is_set():
                self._serve_calls(consumer)
                for record in consumer.poll(timeout_ms=100):
                    self._received(record.partition, record.offset)
                membership = consumer._membership
                generation = membership.generation_id if membership is not None else None
                partitions = frozenset(tp.partition for tp in consumer.assignment())
                self._set_assignment(
                    partitions, generation if generation is not None and generation > 0 else None
                )
        finally:
            consumer.close()

    def _commit(self, client: Any, offsets: dict[int, int]) -> None:
        client.commit({(self.topic, p): o for p, o in offsets.items()})


Member = RawMember | ClientMember


# ---- checks -------------------------------------------------------------------------------------------


def describe(bootstrap: str, group: str) -> Any:
    client = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 5000})
    return client.describe_consumer_groups([group], request_timeout=10)[group].result(15)


def coordinator_of(bootstrap: str, group: str) -> int:
    return int(describe(bootstrap, group).coordinator.id)


def converged(
    cluster: LocalCluster, group: str, members: Sequence[Member], partitions: int
) -> tuple[bool, str]:
    """One generation, every partition owned by exactly one member, every member owning some, as
    the members were told — and the coordinator describing the group Stable with all of them."""
    for member in members:
        if isinstance(member, ClientMember) and member.snapshot().failure:
            raise AssertionError(f"member {member.name} failed: {member.snapshot().failure}")
    assignments = {member.name: member.current_assignment() for member in members}
    owners = Counter(p for assignment in assignments.values() for p in assignment)
    if set(owners) != set(range(partitions)) or any(count != 1 for count in owners.values()):
        return False, f"assignments {assignments}"
    if not all(assignments.values()):
        return False, f"a member owns nothing: {assignments}"
    generations = {member.name: member.current_generation() for member in members}
    if None in generations.values() or len(set(generations.values())) != 1:
        return False, f"generations {generations}"
    described = describe(live_bootstrap(cluster), group)
    if described.state != ConsumerGroupState.STABLE or len(described.members) != len(members):
        return False, f"described {described.state} with {len(described.members)} members"
    return True, f"generation {next(iter(generations.values()))}, assignments {assignments}"


def wait_converged(
    cluster: LocalCluster, group: str, members: Sequence[Member], partitions: int, timeout_s: float = 90.0
) -> tuple[float, int]:
    """Wait until ``converged`` holds, and still holds a second later with the same generation;
    when it first held (time.monotonic()) and the generation."""
    deadline = time.monotonic() + timeout_s
    since: float | None = None
    generation = -1
    last = ""
    while time.monotonic() < deadline:
        try:
            ok, last = converged(cluster, group, members, partitions)
        except AssertionError:
            raise
        except Exception as error:  # a broker going away mid-question: ask again
            ok, last = False, f"{type(error).__name__}: {error}"
        now_generation = members[0].current_generation() if ok else None
        if ok and since is not None and now_generation == generation:
            if time.monotonic() - since >= 1.0:
                return since, generation
        elif ok:
            since, generation = time.monotonic(), now_generation or -1
        else:
            since = None
        time.sleep(0.1)
    raise AssertionError(f"the group did not converge in {timeout_s} s: {last}")


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as a fresh confluent-kafka consumer of the group reads them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30.0)
    finally:
        consumer.close()
    return {p.partition: p.offset for p in found if p.error is None and p.offset >= 0}


def commit_from_each(members: Sequence[Member], base: int, timeout_s: float = 30.0) -> dict[int, int]:
    """Every member commits ``base + partition`` for each partition it owns, as of its own
    generation; the offsets acknowledged. A refusal (a member not of the group's generation) fails."""
    acknowledged: dict[int, int] = {}
    for member in members:
        offsets = {p: base + p for p in member.current_assignment()}
        if isinstance(member, RawMember):
            errors = member.commit(offsets)
            assert set(errors.values()) == {ErrorCode.NONE}, f"{member.name}: {errors}"
        else:
            member.commit(offsets)
        acknowledged.update(offsets)
    return acknowledged


def stop_all(members: Sequence[Member]) -> None:
    failures = []
    for member in members:
        try:
            member.stop()
        except Exception as error:
            failures.append(f"{member.name}: {error}")
    assert not failures, failures


def received_between(member: ClientMember, start: float, end: float) -> list[Received]:
    return [record for record in member.snapshot().received if start < record.at < end]


def wait_received(members: Sequence[ClientMember], count: int, timeout_s: float = 60.0) -> None:
    wait_until(
        lambda: sum(len(member.snapshot().received) for member in members) >= count,
        f"{count} records received",
        timeout_s,
    )


def close_kafka_python_refused_sockets(monkeypatch: Any) -> None:
    """kafka-python 3.0.12 does not close the socket of a connection attempt that fails (to the
    killed broker): each is left to the garbage collector, whose ResourceWarning then fails
    whichever later test it happens to run in. For the test using ``monkeypatch``, the sockets a
    failed attempt made are closed as it fails."""
    original_connect = KafkaNetSocket.connect
    original_socket = KafkaNetSocket.socket

    async def connect(self: Any, *arguments: Any, **keywords: Any) -> Any:
        made: list[socket.socket] = []

        def tracked(*socket_arguments: Any) -> socket.socket:
            made.append(original_socket(self, *socket_arguments))
            return made[-1]

        self.socket = tracked
        try:
            return await original_connect(self, *arguments, **keywords)
        except BaseException:
            for made_socket in made:
                made_socket.close()
            raise
        finally:
            del self.socket

    monkeypatch.setattr(KafkaNetSocket, "connect", connect)
