"""A broker of a cluster: ``Replication`` for real, on ZooKeeper (the asyncio side).

``ClusterReplication`` joins the pieces of ``strom.cluster`` to this broker's event loop:

* the cluster thread (``ClusterNode``: the ZooKeeper session, the registration, the controller
  driver) — its outputs come to the loop with ``call_soon_threadsafe``;
* when this broker is the controller, its commands go out through ``ControllerSenders``;
* the commands this broker receives (LeaderAndIsr, UpdateMetadata, StopReplica — over the network,
  or directly when it is the controller itself) are fenced by ``BrokerControl`` and applied in
  order (one at a time): logs made or deleted, ``PartitionRoles`` switched, the group coordinator
  loading or unloading the ``__consumer_offsets`` partitions this broker leads;
* requests for the controller (AlterPartition for ISR changes, ControlledShutdown) go to it over
  the network, or to this broker's own cluster thread when it is the controller;
* what clients see (brokers, topics, leaders) comes from the controller's metadata image, and
  admin requests (create, grow, delete topics, change their config, producer id blocks) are
  ZooKeeper writes made on the cluster thread, answered once the controller's metadata shows the
  result (or after ``ADMIN_WAIT_MS``).

docs/cluster.md describes the whole design.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from strom.broker.authorization import ZooKeeperAclStore
from strom.broker.cluster.markers import ClusterMarkers
from strom.broker.cluster.partitions import PartitionRoles
from strom.broker.cluster.peer import PeerConnection, PeerDialer, PeerError, PeerSecurityError
from strom.broker.cluster.senders import ControllerSenders
from strom.broker.config import BrokerConfig
from strom.broker.group_configs import GroupConfigs, GroupConfigStoreError
from strom.broker.groups import OFFSETS_TOPIC_CONFIG
from strom.broker.listener_security import (
    PLAINTEXT_INTER_BROKER,
    InterBrokerSecurity,
    inter_broker_security,
)
from strom.broker.quotas import QuotaStoreError
from strom.broker.refused import Refused
from strom.broker.replication import BrokerView, PartitionView, ReadAccess, TopicView
from strom.broker.scram_store import ZooKeeperScramStore
from strom.broker.transactions import transaction_state_topic_config
from strom.cluster import wire
from strom.cluster.actions import (
    BrokerCommand,
    ControlledShutdownReply,
    ControllerReply,
    LeaderAndIsrCommand,
    PartitionInfo,
    StopReplicaCommand,
    UncleanElection,
    UpdateMetadataCommand,
)
from strom.cluster.broker_control import (
    BecomeFollower,
    BecomeLeader,
    BrokerControl,
    CommandOutcome,
    IsrChanged,
    StopReplica,
)
from strom.cluster.config import ControllerConfig, ReplicationConfig, ZooKeeperConnect
from strom.cluster.events import ControlledShutdownReceived, ControllerEvent
from strom.cluster.model import (
    LEADER_DURING_DELETE,
    NO_LEADER,
    BrokerRegistration,
    TopicAssignment,
    TopicPartition,
)
from strom.cluster.node import ClusterNode, NodeOutputs
from strom.cluster.placement import PlacementError, assign_replicas, validate_assignment
from strom.cluster.replica import fence_leader_epoch
from strom.cluster.zk_store import ConnectionLossError, ZkError, zk_error_text
from strom.cluster.znodes import AclEntryText, AclResourceKey, QuotaEntityParts
from strom.cluster.zookeeper import ClusterZooKeeper, ConcurrentChangeError
from strom.cluster.zookeeper import TopicExistsError as ZkTopicExistsError
from strom.coordinator import OFFSETS_TOPIC, partition_for_group
from strom.coordinator.transactions import TRANSACTION_STATE_TOPIC
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_partition import AlterPartitionResponse
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.controlled_shutdown import ControlledShutdownResponse
from strom.security.quotas import QuotaEntity
from strom.storage import (
    TOPIC_CONFIG_KEYS,
    ConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogConfig,
    PartitionLog,
    StorageError,
    TopicExistsError,
    TopicMetadata,
    UnknownTopicError,
    validate_topic_name,
)

if TYPE_CHECKING:
    from strom.broker.state import BrokerState

log = logging.getLogger("strom.broker.cluster")

T = TypeVar("T")

# How long an admin request waits for the controller's metadata to show its result.
ADMIN_WAIT_MS = 15_000
# Producer ids taken from ZooKeeper at a time.
PRODUCER_ID_BLOCK_SIZE = 1000
# Requests to the controller (AlterPartition, ControlledShutdown): how long an answer may take,
# and the pause before asking again when there is no controller or it did not answer.
CONTROLLER_REQUEST_TIMEOUT_MS = 30_000
CONTROLLER_RETRY_BACKOFF_MS = 200
ACKS_ALL = -1
# Leaders with parked acks=all requests are looked at this often (their deadlines); every leader
# (ISR shrinks) every TICKS_PER_ISR_CHECK ticks.
TICK_INTERVAL_MS = 100
TICKS_PER_ISR_CHECK = 5
# The coordinators' topics: created by the brokers, never appended to by clients.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
META_PROPERTIES_FILE_NAME = "meta.properties"
# Each step of leaving the cluster gets at most this long.
STOP_STEP_TIMEOUT_S = 10
# A controller shutting down waits at most this long for its last commands to be delivered.
CONTROLLER_DRAIN_TIMEOUT_MS = 2_000
# A ZooKeeper read that met a lost connection is asked again after this pause (the client holds
# it until it is connected again; the pause only keeps a client that fails at once from spinning).
ZOOKEEPER_READ_RETRY_BACKOFF_MS = 200
# Before it registers, a broker whose inter-broker listener has TLS or SASL logs in to up to this
# many live brokers (the first that answers decides), each given this long.
INTER_BROKER_CHECK_BROKERS_MAX = 3
INTER_BROKER_CHECK_TIMEOUT_MS = 10_000
API_VERSIONS_VERSION = 2


class ClusterStartError(Exception):
    """The broker cannot join the cluster; the message says why and what to do."""


@dataclass(frozen=True)
class ClusterSettings:
    """The cluster keys of a broker's configuration."""

    connect: ZooKeeperConnect
    node_id: int
    session_timeout_ms: int
    connection_timeout_ms: int
    rack: str | None
    controller: ControllerConfig
    replication: ReplicationConfig
    default_replication_factor: int
    offsets_topic_replication_factor: int
    controlled_shutdown_enable: bool
    controlled_shutdown_max_retries: int
    controlled_shutdown_retry_backoff_ms: int
    # How this broker reaches the others (inter.broker.listener.name and its security).
    inter_broker: InterBrokerSecurity = PLAINTEXT_INTER_BROKER

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ClusterSettings:
        session_timeout_ms = config.get_int("zookeeper.session.timeout.ms")
        return cls(
            connect=ZooKeeperConnect.parse(config.get_str("zookeeper.connect")),
            node_id=config.node_id,
            session_timeout_ms=session_timeout_ms,
            connection_timeout_ms=(
                config.get_int("zookeeper.connection.timeout.ms")
                if config.is_set("zookeeper.connection.timeout.ms")
                else session_timeout_ms
            ),
            rack=config.get_str("broker.rack") or None,
            controller=ControllerConfig(
                unclean_leader_election_enable=config.get_bool("unclean.leader.election.enable"),
                auto_leader_rebalance_enable=config.get_bool("auto.leader.rebalance.enable"),
                leader_imbalance_check_interval_ms=config.get_int("leader.imbalance.check.interval.seconds")
                * 1000,
                leader_imbalance_per_broker_percentage=config.get_int(
                    "leader.imbalance.per.broker.percentage"
                ),
            ),
            replication=ReplicationConfig(
                replica_lag_time_max_ms=config.get_int("replica.lag.time.max.ms"),
                min_insync_replicas=config.get_int("min.insync.replicas"),
                replica_fetch_wait_max_ms=config.get_int("replica.fetch.wait.max.ms"),
                replica_fetch_min_bytes=config.get_int("replica.fetch.min.bytes"),
                replica_fetch_max_bytes=config.get_int("replica.fetch.max.bytes"),
                replica_fetch_response_max_bytes=config.get_int("replica.fetch.response.max.bytes"),
            ),
            default_replication_factor=config.get_int("default.replication.factor"),
            offsets_topic_replication_factor=config.get_int("offsets.topic.replication.factor"),
            controlled_shutdown_enable=config.get_bool("controlled.shutdown.enable"),
            controlled_shutdown_max_retries=config.get_int("controlled.shutdown.max.retries"),
            controlled_shutdown_retry_backoff_ms=config.get_int("controlled.shutdown.retry.backoff.ms"),
            inter_broker=inter_broker_security(config),
        )


@dataclass(frozen=True)
class ClusterTopic:
    """A topic as the controller's metadata shows it (a ``TopicView``)."""

    name: str
    topic_id: uuid.UUID
    internal: bool
    partitions: int


def check_meta_properties(data_dir: Path, cluster_id: str, node_id: int) -> None:
    """The data directory belongs to one broker of one cluster (Kafka's meta.properties): written
    on the first start, checked on every later one."""
    path = data_dir / META_PROPERTIES_FILE_NAME
    if not path.exists():
        path.write_text(f"version=0\ncluster.id={cluster_id}\nnode.id={node_id}\n", encoding="utf-8")
        return
    found = dict(line.split("=", 1) for line in path.read_text(encoding="utf-8").splitlines() if "=" in line)
    if found.get("cluster.id", cluster_id) != cluster_id:
        raise ClusterStartError(
            f"the data directory {data_dir} belongs to cluster {found['cluster.id']}, but ZooKeeper "
            f"holds cluster {cluster_id}: start this broker with its own ZooKeeper (or chroot), or "
            "with an empty data directory"
        )
    if found.get("node.id", str(node_id)) != str(node_id):
        raise ClusterStartError(
            f"the data directory {data_dir} belongs to node {found['node.id']}, not {node_id}: "
            "give each broker its own data directory"
        )


class ClusterReplication:
    """``Replication`` for a broker of a cluster (see the module docs)."""

    waits_for_replicas = True

    def __init__(self, state: BrokerState, settings: ClusterSettings) -> None:
        self._state = state
        if state.acls is not None:
            # The cluster's ACLs are ZooKeeper's (read on joining, kept up by its notifications),
            # never the data directory's: until this broker joins it holds none.
            state.acls.store = ZooKeeperAclStore(self)
        self.settings = settings
        self.node_id = settings.node_id
        self.dialer = PeerDialer(settings.inter_broker)
        self.control = BrokerControl(settings.node_id, -1)
        self.roles = PartitionRoles(
            settings.node_id,
            settings.replication,
            state.clock,
            wake_readers=state.wake_readers,
            wake_replicas=state.wake_replicas,
            alter_isr=self._alter_isr_due,
            dialer=self.dialer,
        )
        self.senders = ControllerSenders(settings.node_id, self.apply_command, self.dialer)
        self.node: ClusterNode | None = None
        self.registration: BrokerRegistration | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._apply_lock = asyncio.Lock()
        self._keys = itertools.count(1)
        self._replies: dict[int, asyncio.Future[ControllerReply]] = {}
        self._controller_peer: PeerConnection | None = None
        self._topic_overrides: dict[str, dict[str, str]] = {}
        self._metadata_waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._alter_isr_wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._producer_ids: tuple[int, int] = (0, -1)  # next, last of the block in hand
        self._producer_id_lock = asyncio.Lock()
        self.is_controller = False
        self.unclean_elections: list[UncleanElection] = []
        # Set once this broker is registered and knows its broker epoch: a command of the
        # controller can arrive before (the controller sees the registration at once), and waits.
        self._joined = asyncio.Event()
        # Set once the controller's first UpdateMetadata has been applied (``metadata_known``).
        self._metadata_received = asyncio.Event()
        # Set (and replaced) whenever this broker learns a new broker epoch of its own.
        self._registered = asyncio.Event()
        self._stopping = False
        # The group coordinator's writes count once the in-sync replicas of their offsets
        # partition have them (acks=all through this broker's PartitionRoles); the transaction
        # coordinator's likewise, and its markers go to each partition's leader.
        state.groups.replicate_through(self)
        state.transactions.replicate_through(self, state.config.get_int("offsets.commit.timeout.ms"))
        state.transactions.deliver_markers_through(
            ClusterMarkers(self, state, state.config.get_int("offsets.commit.timeout.ms"))
        )
        self._creating_internal: set[str] = set()
        # The partitions of the coordinators' topics, read from ZooKeeper (see _partition_count).
        self._internal_partition_counts: dict[str, int] = {}

    # ---- starting and stopping -----------------------------------------------------------------------

    def _registration(self) -> BrokerRegistration:
        # Every advertised listener, as bound (the server binds before it joins), with its security
        # protocol. Other brokers reach this one at its endpoint of the inter-broker listener, which
        # is also the registration's host and port (Kafka writes the PLAINTEXT listener's there);
        # each client is told the endpoint of the listener its request came in on.
        endpoints = tuple(self._state.advertised.values())
        inter_broker = self._state.advertised.get(self.settings.inter_broker.listener, endpoints[0])
        return BrokerRegistration(
            self.node_id,
            inter_broker.host,
            inter_broker.port,
            endpoints,
            self.settings.rack,
            self._state.clock.wall_ms(),
        )

    async def start(self) -> None:
        """Connect to ZooKeeper (at most ``zookeeper.connection.timeout.ms``), register, start
        the cluster thread and the loops. Raises ZkUnavailableError, BrokerIdInUseError or
        ClusterStartError with a message for the operator."""
        from strom.cluster.kazoo_store import KazooStore  # kazoo only for a broker of a cluster

        loop = self._loop = asyncio.get_running_loop()
        settings = self.settings
        store = await asyncio.to_thread(
            KazooStore.connect,
            settings.connect,
            session_timeout_ms=settings.session_timeout_ms,
            connect_timeout_ms=settings.connection_timeout_ms,
        )

        def on_loop(function: Callable[..., object]) -> Callable[..., None]:
            def post(*arguments: object) -> None:
                loop.call_soon_threadsafe(function, *arguments)

            return post

        node = ClusterNode(
            store,
            self._registration(),
            settings.controller,
            self._state.clock,
            NodeOutputs(
                command=on_loop(self.senders.send),
                reply=on_loop(self._on_reply),
                controller=on_loop(self._on_controller),
                live_brokers=on_loop(self.senders.keep_only),
                registered=on_loop(self._on_registered),
                topic_configs=on_loop(self._on_topic_configs),
                client_quotas=on_loop(self._on_client_quotas),
                group_configs=on_loop(self._state.group_configs.update),
                user_configs=on_loop(self._on_user_configs),
                unclean_election=on_loop(self.unclean_elections.append),
                acls=on_loop(self._on_acls),
            ),
            stale_registration_wait_ms=settings.session_timeout_ms,
            join_retry_ms=settings.connection_timeout_ms,
            watch_acls=self._state.acls is not None,
        )
        try:
            await self._check_inter_broker_login(node)
            cluster_id = await asyncio.to_thread(node.join)
            check_meta_properties(self._state.config.data_dir, cluster_id, self.node_id)
            client_quotas = await asyncio.to_thread(node.zk.read_client_quotas)
            group_configs = await asyncio.to_thread(node.zk.read_group_configs)
        except BaseException:
            await asyncio.to_thread(node.stop)
            raise
        self.node = node
        self.registration = node.registration
        # Client quotas live in ZooKeeper (not the data directory) and every change is read again.
        self._state.quotas.store = ClusterQuotaStore(self)
        self._on_client_quotas(client_quotas)
        # So do group configs (KIP-848): ZooKeeper's replace what the data directory held.
        self._state.group_configs.store = ClusterGroupConfigStore(self)
        self._state.group_configs.replace_all(group_configs)
        self.control.broker_epoch = node.registration.epoch
        self._joined.set()
        self._state.cluster_id = cluster_id
        for partition_log in self._state.logs.logs():
            partition_log.track_high_watermark()
        log.info(
            "broker %d joined cluster %s through ZooKeeper %s (broker epoch %d)",
            self.node_id,
            cluster_id,
            settings.connect,
            node.registration.epoch,
        )
        node.start()
        self._tasks.append(loop.create_task(self._tick_loop()))
        self._tasks.append(loop.create_task(self._alter_isr_loop()))

    async def _check_inter_broker_login(self, node: ClusterNode) -> None:
        """Before registering, when brokers reach one another over TLS or SASL: connect and log in
        to a live broker the way replication will. A broker that would be refused (a wrong
        password, an unknown user, a certificate the others do not trust, or one of theirs this
        broker does not) stops here with a line saying so, instead of joining and then failing to
        replicate or to reach the controller. Unreachable brokers are skipped; with none to ask
        (the first broker) there is nothing to check."""
        dialer = self.dialer
        if dialer.security is None:
            return
        try:
            brokers = await asyncio.to_thread(node.zk.read_live_brokers)
        except ZkError:
            return  # no broker registered yet (or ZooKeeper busy): joining reports what matters
        others = [broker for node_id, broker in sorted(brokers.items()) if node_id != self.node_id]
        closed_early: list[str] = []  # TLS connections closed before an answer: refused, likely
        for broker in others[:INTER_BROKER_CHECK_BROKERS_MAX]:
            host, port = dialer.address(broker)
            peer = dialer.connection(host, port, f"strom-broker-{self.node_id}")
            try:
                # An answer, not only a handshake: with TLS 1.3 a refused client certificate
                # shows only once the other side has read it.
                await peer.request(
                    ApiVersionsRequest(),
                    API_VERSIONS_VERSION,
                    ApiVersionsResponse,
                    INTER_BROKER_CHECK_TIMEOUT_MS,
                )
            except PeerSecurityError as error:
                raise ClusterStartError(
                    f"broker {broker.node_id} refuses this broker's inter-broker connection, so it would"
                    f" not replicate nor reach the controller: {error}"
                ) from None
            except PeerError as error:
                if peer.established and not peer.answers and dialer.security.ssl_context is not None:
                    closed_early.append(f"broker {broker.node_id} at {host}:{port}")
                log.info("inter-broker login not checked at broker %d: %s", broker.node_id, error)
                continue
            finally:
                peer.close()
            log.info(
                "logged in to broker %d at %s:%d over %s",
                broker.node_id,
                host,
                port,
                dialer.security.describe(),
            )
            return
        if closed_early:
            raise ClusterStartError(
                f"{', '.join(closed_early)} closed this broker's TLS connection before answering, so it would"
                " not replicate nor reach the controller: the others most likely do not trust its"
                f" certificate ({dialer.security.describe()}'s ssl.keystore must be signed by a CA in"
                " their ssl.truststore)"
            )

    async def controlled_shutdown(self) -> None:
        """SIGTERM: ask the controller to move this broker's leaderships away (it answers with
        those it could not move: nothing else in their ISR), retrying a few times, while serving.
        When this broker is the controller, what it told the others (the new leaders, the new
        metadata) is delivered before it goes (at most ``CONTROLLER_DRAIN_TIMEOUT_MS``): resigning
        drops whatever is still queued, and the next controller would resend it only once elected."""
        await self._move_leaderships()
        if self.is_controller and not await self.senders.drain(CONTROLLER_DRAIN_TIMEOUT_MS):
            log.warning(
                "controlled shutdown: the controller's commands were not all delivered within %d ms",
                CONTROLLER_DRAIN_TIMEOUT_MS,
            )

    async def _move_leaderships(self) -> None:
        settings = self.settings
        if not settings.controlled_shutdown_enable or self.node is None or self.registration is None:
            return
        partitions = self.control.partitions
        self.roles.begin_shutdown(lambda tp: partitions[tp].isr if tp in partitions else ())
        for attempt in range(1, settings.controlled_shutdown_max_retries + 1):
            try:
                reply = await self._ask_controlled_shutdown()
            except PeerError as error:
                log.warning("controlled shutdown attempt %d: %s", attempt, error)
            else:
                if reply.error == ErrorCode.NONE and not reply.remaining:
                    await self._settle_leaderships()
                    log.info("controlled shutdown: every leadership moved away")
                    return
                log.info(
                    "controlled shutdown attempt %d: %s, %d partition(s) still led here",
                    attempt,
                    ErrorCode(reply.error).name,
                    len(reply.remaining),
                )
                if reply.error == ErrorCode.NONE and not self._could_move(reply.remaining):
                    log.info("controlled shutdown: no other replica of those is alive; stopping")
                    return
            if attempt < settings.controlled_shutdown_max_retries:
                await asyncio.sleep(settings.controlled_shutdown_retry_backoff_ms / 1000)
        log.warning("controlled shutdown did not move every leadership; stopping anyway")

    def _could_move(self, remaining: Sequence[TopicPartition]) -> bool:
        """Whether waiting could help: some partition still led here has another live replica
        (it may catch up and join the ISR)."""
        metadata = self.control.metadata
        for tp in remaining:
            info = metadata.partition(tp)
            if info is None or any(r != self.node_id and r in metadata.brokers for r in info.replicas):
                return True
        return False

    async def _settle_leaderships(self) -> None:
        """Wait (briefly) until the controller's LeaderAndIsr making this broker a follower of
        the moved partitions has been applied, so parked requests are answered NOT_LEADER."""
        deadline = asyncio.get_running_loop().time() + 5
        while self.roles.led and asyncio.get_running_loop().time() < deadline:
            if all(
                len(entry.leader.replicas) == 1 for entry in self.roles.led.values()
            ):  # nothing else can lead these
                return
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        """Leave the cluster: stop fetching and sending, resign, deregister, close the session."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await self._bounded("the background tasks", asyncio.gather(*self._tasks, return_exceptions=True))
        self._tasks.clear()
        await self._bounded("the controller's senders", self.senders.close())
        await self._bounded("the replica fetchers", self.roles.close())
        if self._controller_peer is not None:
            self._controller_peer.close()
        for future in self._replies.values():
            if not future.done():
                future.cancel()
        node, self.node = self.node, None
        if node is not None:
            await self._bounded("leaving ZooKeeper", asyncio.to_thread(node.stop))

    @staticmethod
    async def _bounded(what: str, work: Awaitable[object]) -> None:
        """Stopping never hangs on one part: after STOP_STEP_TIMEOUT_S it goes on without it."""
        try:
            async with asyncio.timeout(STOP_STEP_TIMEOUT_S):
                await work
        except TimeoutError:
            log.warning("stopping %s took more than %d s; going on without it", what, STOP_STEP_TIMEOUT_S)

    # ---- outputs of the cluster thread (on the loop) --------------------------------------------------

    def _on_reply(self, reply: ControllerReply) -> None:
        future = self._replies.pop(reply.key, None)  # type: ignore[call-overload]
        if future is not None and not future.done():
            future.set_result(reply)

    def _on_controller(self, active: bool, epoch: int) -> None:
        self.is_controller = active
        if not active:
            self.senders.drop_all()

    def _on_registered(self, registration: BrokerRegistration) -> None:
        self.registration = registration
        self.control.broker_epoch = registration.epoch
        registered, self._registered = self._registered, asyncio.Event()
        registered.set()

    async def _ready_for(self, broker_epoch: int) -> None:
        """Wait until this broker can judge a command for ``broker_epoch``: it has joined, and it
        knows that epoch if it is newer than its own. After a session expiry the cluster thread
        registers again and tells the loop; the controller sees the new registration in ZooKeeper
        at the same moment and its first command may arrive before the loop has heard: refused
        as STALE_BROKER_EPOCH, it would be lost (the controller does not resend it), and a
        deposed leader would never learn it was. Epochs only grow (czxids), so a newer one is a
        registration of this broker the loop is about to learn; it waits at most a session
        timeout, then the command is fenced as usual."""
        await self._joined.wait()
        deadline = asyncio.get_running_loop().time() + self.settings.session_timeout_ms / 1000
        while broker_epoch > self.control.broker_epoch:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._registered.wait()

    def _on_acls(self, acls: Mapping[AclResourceKey, frozenset[AclEntryText]], whole: bool) -> None:
        if self._state.acls is not None:
            self._state.acls.apply_from_cluster(acls, whole)

    async def change_acls(
        self, key: AclResourceKey, added: set[AclEntryText], removed: set[AclEntryText]
    ) -> None:
        """Change one resource's ACLs in ZooKeeper (every broker hears of it)."""
        await self._zookeeper(lambda zk: zk.change_acls(key, added, removed))

    def _on_user_configs(self, users: Mapping[str, Mapping[str, str] | None]) -> None:
        """Users a change notification named (their SCRAM credentials may have changed)."""
        store = self._state.scram_credentials
        if isinstance(store, ZooKeeperScramStore):
            store.apply(users)

    def _on_client_quotas(self, quotas: Mapping[QuotaEntityParts, Mapping[str, float]]) -> None:
        self._state.quotas.replace_all({QuotaEntity(parts): dict(values) for parts, values in quotas.items()})

    def _on_topic_configs(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        for topic, overrides in configs.items():
            self._topic_overrides[topic] = dict(overrides)
            if self._state.logs.topic(topic) is not None:
                task = asyncio.get_running_loop().create_task(
                    self._apply_topic_config(topic, dict(overrides))
                )
                self._tasks.append(task)
                task.add_done_callback(self._forget_task)

    async def _apply_topic_config(self, topic: str, overrides: dict[str, str]) -> None:
        """A topic's config changed in ZooKeeper: its local logs and leaders take it (the topic
        file rewritten under the topic's lock, as every admin change of it is)."""
        try:
            await self._state.alter_topic_config(topic, overrides)
        except StorageError as error:  # an invalid value, the topic gone meanwhile, a file error
            log.error("topic %s: cannot apply its new config: %s", topic, error)
            return
        metadata = self._state.logs.topic(topic)
        if metadata is not None:
            for partition in metadata.partition_indexes():
                self.roles.reconfigure(TopicPartition(topic, partition))

    def _forget_task(self, task: asyncio.Task[None]) -> None:
        if task in self._tasks:
            self._tasks.remove(task)

    # ---- the controller's commands ----------------------------------------------------------------------

    async def apply_command(self, command: BrokerCommand) -> object:
        """A command of the controller for this broker (from the network or this broker's own
        controller); the outcome its answer is made of."""
        if isinstance(command, LeaderAndIsrCommand):
            return await self.on_leader_and_isr(command)
        if isinstance(command, UpdateMetadataCommand):
            return await self.on_update_metadata(command)
        return await self.on_stop_replica(command)

    async def on_leader_and_isr(self, command: LeaderAndIsrCommand) -> CommandOutcome:
        await self._ready_for(command.broker_epoch)
        async with self._apply_lock:
            hosted = [
                (TopicPartition(topic, partition), topic_id)
                for topic, partition, topic_id in self._state.logs.hosted_partitions()
            ]
            outcome = self.control.on_leader_and_isr(command, hosted)
            if outcome.error == ErrorCode.NONE:
                leaders = {broker.node_id: self.dialer.address(broker) for broker in command.leaders}
                await self._apply(outcome, leaders)
        return outcome

    async def on_update_metadata(self, command: UpdateMetadataCommand) -> ErrorCode:
        await self._ready_for(command.broker_epoch)
        error = self.control.on_update_metadata(command)
        if error == ErrorCode.NONE:
            self._metadata_received.set()
            for info in command.partitions:
                if info.leader == LEADER_DURING_DELETE:
                    # Deleted: a topic created again under the name has its own config.
                    self._topic_overrides.pop(info.topic, None)
            self._metadata_changed()
            # Consumer-protocol groups subscribed to these topics see partitions come and go.
            self._state.groups.topics_changed({info.topic for info in command.partitions})
        return error

    async def on_stop_replica(self, command: StopReplicaCommand) -> CommandOutcome:
        await self._ready_for(command.broker_epoch)
        async with self._apply_lock:
            outcome = self.control.on_stop_replica(command)
            if outcome.error == ErrorCode.NONE:
                await self._apply(outcome, {})
        return outcome

    async def _apply(self, outcome: CommandOutcome, leaders: Mapping[int, tuple[str, int]]) -> None:
        transitions = outcome.transitions
        # Deletions first (a topic deleted and created again under the same name comes as a
        # StopReplica(delete) before the new partitions), then the logs the rest need, made per
        # topic in one go, then the roles.
        for transition in transitions:
            if isinstance(transition, StopReplica):
                await self._stop_replica(transition)
        logs = await self._ensure_logs(
            [t.info for t in transitions if isinstance(t, BecomeLeader | BecomeFollower)], outcome
        )
        await self._learn_internal_partition_counts(
            {
                t.info.topic
                for t in transitions
                if isinstance(t, BecomeLeader) and t.info.topic in INTERNAL_TOPICS
            }
        )
        counts = {"leader": 0, "follower": 0, "stopped": 0}
        for transition in transitions:
            if isinstance(transition, BecomeLeader):
                self._become_leader(transition.info, logs)
                counts["leader"] += 1
            elif isinstance(transition, BecomeFollower):
                self._become_follower(transition.info, logs, leaders)
                counts["follower"] += 1
            elif isinstance(transition, IsrChanged):
                self.roles.isr_changed(transition.info)
            else:
                counts["stopped"] += 1
        if counts["leader"] or counts["follower"] or counts["stopped"]:
            log.info(
                "controller %d (epoch %d): now leading %d, following %d, stopped %d partition(s); "
                "%d led here in all",
                self.control.controller_id,
                self.control.controller_epoch,
                counts["leader"],
                counts["follower"],
                counts["stopped"],
                len(self.roles.led),
            )

    def _become_leader(self, info: PartitionInfo, logs: Mapping[TopicPartition, PartitionLog]) -> None:
        partition_log = logs.get(info.topic_partition)
        if partition_log is None:
            return
        self.roles.become_leader(info, partition_log)
        count = self._internal_partition_counts.get(info.topic)
        if info.topic == OFFSETS_TOPIC:
            if count is not None:
                self._state.groups.use_partition_count(count)
            self._state.groups.become_coordinator(info.partition)
        elif info.topic == TRANSACTION_STATE_TOPIC:
            if count is not None:
                self._state.transactions.use_partition_count(count)
            self._state.transactions.become_coordinator(info.partition, info.leader_epoch)

    async def _learn_internal_partition_counts(self, topics: set[str]) -> None:
        """Before this broker coordinates a partition of ``topics`` (the coordinators' topics): how
        many partitions each has, read once from its assignment in ZooKeeper. Whichever broker
        created it, with whatever setting, the topic's own count decides where each group or
        transactional id lives (as in Kafka); the count never changes afterwards."""
        for topic in topics - set(self._internal_partition_counts):

            def read(zk: ClusterZooKeeper, topic: str = topic) -> TopicAssignment | None:
                return zk.read_topic(topic)

            try:
                assignment = await self._zookeeper(read, read=True)
            except Refused as refused:
                log.warning("cannot read how many partitions %s has (%s)", topic, refused.message)
                continue
            if assignment is not None and assignment.replicas:
                self._internal_partition_counts[topic] = max(assignment.replicas) + 1

    def _become_follower(
        self,
        info: PartitionInfo,
        logs: Mapping[TopicPartition, PartitionLog],
        leaders: Mapping[int, tuple[str, int]],
    ) -> None:
        partition_log = logs.get(info.topic_partition)
        if partition_log is None:
            return
        self._resign_coordinator(info.topic_partition)
        address = leaders.get(info.leader)
        if address is None and info.leader != NO_LEADER:
            broker = self.control.metadata.brokers.get(info.leader)
            address = self.dialer.address(broker) if broker is not None else None
        self.roles.become_follower(info, partition_log, address)

    async def _stop_replica(self, stop: StopReplica) -> None:
        tp = stop.topic_partition
        self.roles.stop(tp)
        self._resign_coordinator(tp)
        if stop.delete:
            await self._state.remove_partitions(tp.topic, [tp.partition])

    def _resign_coordinator(self, tp: TopicPartition) -> None:
        """Another broker leads ``tp`` now (or nobody here): a coordinator on it steps down."""
        if tp.topic == OFFSETS_TOPIC:
            self._state.groups.resign_coordinator(tp.partition)
        elif tp.topic == TRANSACTION_STATE_TOPIC:
            self._state.transactions.resign_coordinator(tp.partition)

    async def _ensure_logs(
        self, infos: Sequence[PartitionInfo], outcome: CommandOutcome
    ) -> dict[TopicPartition, PartitionLog]:
        """The logs of these partitions, made where missing (per topic, in one go)."""
        found: dict[TopicPartition, PartitionLog] = {}
        missing: dict[str, list[PartitionInfo]] = {}
        logs = self._state.logs
        for info in infos:
            metadata = logs.topic(info.topic)
            partition_log = logs.log(info.topic, info.partition)
            if partition_log is not None and metadata is not None and metadata.topic_id == info.topic_id:
                found[info.topic_partition] = partition_log
            else:
                missing.setdefault(info.topic, []).append(info)
        for topic, wanted in missing.items():
            topic_id = wanted[0].topic_id
            try:
                existing = logs.topic(topic)
                if existing is not None and existing.topic_id != topic_id:
                    # An older topic of this name is still here (it was deleted while this broker
                    # was away): its logs go before the new ones are made.
                    await self._state.remove_partitions(topic, existing.partition_indexes())
                overrides = await self._overrides(topic)
                made = await self._state.host_partitions(
                    topic,
                    topic_id,
                    [info.partition for info in wanted],
                    overrides,
                    internal=topic in INTERNAL_TOPICS,
                )
            except Exception as error:
                log.error("cannot make the logs of %s %s: %s", topic, [i.partition for i in wanted], error)
                for info in wanted:
                    outcome.partition_errors[info.topic_partition] = ErrorCode.KAFKA_STORAGE_ERROR
                    self.control.partitions.pop(info.topic_partition, None)
                continue
            for partition_log in made:
                partition_log.track_high_watermark()
            for info in wanted:
                partition_log = logs.log(topic, info.partition)
                if partition_log is not None:
                    found[info.topic_partition] = partition_log
        return found

    async def _overrides(self, topic: str) -> dict[str, str]:
        cached = self._topic_overrides.get(topic)
        if cached is not None:
            return cached
        configs = await self._zookeeper(lambda zk: zk.read_topic_configs([topic]), read=True)
        overrides = dict(configs.get(topic, {}))
        self._topic_overrides[topic] = overrides
        return overrides

    async def zookeeper(self, work: Callable[[ClusterZooKeeper], T], *, read: bool = False) -> T:
        """``_zookeeper`` for the broker's other parts (the SCRAM credential store)."""
        return await self._zookeeper(work, read=read)

    async def _zookeeper(self, work: Callable[[ClusterZooKeeper], T], *, read: bool = False) -> T:
        """``work`` done on the cluster thread. A ``read`` (nothing written, safe to repeat) is
        asked again when the connection drops under it: the session may well live on, and the
        caller may have no way to come back to it (a LeaderAndIsr whose new logs need the topic's
        config is not sent again: the replica would never be made). The repeat waits, queued by
        the ZooKeeper client, until the connection is back; an expired session ends it (the
        broker registers again and the controller sends it everything)."""
        node = self.node
        if node is None:
            raise Refused(ErrorCode.BROKER_NOT_AVAILABLE, "this broker is not connected to the cluster")
        try:
            said = False
            while True:
                try:
                    return await asyncio.wrap_future(node.submit(work))
                except ConnectionLossError as error:
                    if not read or self.node is not node:  # a write, or this broker is stopping
                        raise
                    if not said:  # once: a long outage would repeat it five times a second
                        said = True
                        log.info(
                            "a ZooKeeper read met a lost connection (%s); asking again until it is back",
                            zk_error_text(error),
                        )
                    await asyncio.sleep(ZOOKEEPER_READ_RETRY_BACKOFF_MS / 1000)
        except ZkError as error:
            # ZooKeeper unreachable, or the session expired under the request: the change may or
            # may not have been made (a lost connection), so the client is told to try again.
            raise Refused(
                ErrorCode.REQUEST_TIMED_OUT,
                f"ZooKeeper did not complete the request ({zk_error_text(error)})",
            ) from None

    # ---- requests to the controller ---------------------------------------------------------------------

    async def post_to_controller(self, make_event: Callable[[int], ControllerEvent]) -> ControllerReply:
        """Give this broker's controller thread an event made with a fresh key; its reply (the
        controller answers NOT_CONTROLLER when this broker is not, or no longer, the controller)."""
        node = self.node
        if node is None:
            raise PeerError("this broker is leaving the cluster")
        key = next(self._keys)
        future: asyncio.Future[ControllerReply] = asyncio.get_running_loop().create_future()
        self._replies[key] = future
        node.post(make_event(key))
        try:
            async with asyncio.timeout(CONTROLLER_REQUEST_TIMEOUT_MS / 1000):
                return await future
        except TimeoutError:
            raise PeerError("the controller did not answer") from None
        finally:
            self._replies.pop(key, None)

    def _controller_connection(self) -> PeerConnection | None:
        """A connection to the controller, or None when this broker is the controller (or the
        controller is not known yet: PeerError)."""
        controller_id = self.control.metadata.controller_id
        if self.is_controller or controller_id == self.node_id:
            return None
        broker = self.control.metadata.brokers.get(controller_id)
        if broker is None:
            raise PeerError("no controller is known yet")
        host, port = self.dialer.address(broker)
        peer = self._controller_peer
        if peer is None or peer.closed or (peer.host, peer.port) != (host, port):
            if peer is not None:
                peer.close()
            peer = self._controller_peer = self.dialer.connection(host, port, f"strom-broker-{self.node_id}")
        return peer

    async def _ask_controlled_shutdown(self) -> ControlledShutdownReply:
        registration = self.registration
        assert registration is not None
        peer = self._controller_connection()
        if peer is None:
            reply = await self.post_to_controller(
                lambda key: ControlledShutdownReceived(key, self.node_id, registration.epoch)
            )
            assert isinstance(reply, ControlledShutdownReply)
            return reply
        response = await peer.request(
            wire.controlled_shutdown_request(self.node_id, registration.epoch),
            wire.CONTROLLED_SHUTDOWN_VERSION,
            ControlledShutdownResponse,
            CONTROLLER_REQUEST_TIMEOUT_MS,
        )
        error, remaining = wire.controlled_shutdown_remaining(response)
        return ControlledShutdownReply(None, error, tuple(remaining))

    def _alter_isr_due(self) -> None:
        self._alter_isr_wakeup.set()

    async def _alter_isr_loop(self) -> None:
        """Send the leaders' ISR changes to the controller, all pending ones in one AlterPartition."""
        while not self._stopping:
            await self._alter_isr_wakeup.wait()
            self._alter_isr_wakeup.clear()
            proposals = dict(self.roles.alter_isr_proposals)
            self.roles.alter_isr_proposals.clear()
            if not proposals or self.registration is None:
                continue
            try:
                error, results = await self._send_alter_partition(list(proposals.values()))
            except PeerError as failure:
                log.debug("AlterPartition: %s; sending it again", failure)
                error, results = ErrorCode.REQUEST_TIMED_OUT, []
            by_key = {(result.topic_id, result.partition): result for result in results}
            for tp, (topic_id, proposal) in proposals.items():
                result = by_key.get((topic_id, tp.partition))
                if error != ErrorCode.NONE or result is None:
                    self.roles.alter_isr_answered(
                        tp, proposal, error if error != ErrorCode.NONE else ErrorCode.UNKNOWN_SERVER_ERROR
                    )
                else:
                    self.roles.alter_isr_answered(
                        tp,
                        proposal,
                        result.error,
                        leader_epoch=result.leader_epoch,
                        isr=result.isr,
                        partition_epoch=result.partition_epoch,
                    )
            if error != ErrorCode.NONE:
                await asyncio.sleep(CONTROLLER_RETRY_BACKOFF_MS / 1000)

    async def _send_alter_partition(
        self, proposals: list[tuple[uuid.UUID, Any]]
    ) -> tuple[ErrorCode, list[Any]]:
        registration = self.registration
        assert registration is not None
        request = wire.alter_partition_request(self.node_id, registration.epoch, proposals)
        peer = self._controller_connection()
        if peer is None:
            reply = await self.post_to_controller(lambda key: wire.alter_partition_event(request, key))
            response = wire.alter_partition_response(reply)  # type: ignore[arg-type]
        else:
            response = await peer.request(
                request, wire.ALTER_PARTITION_VERSION, AlterPartitionResponse, CONTROLLER_REQUEST_TIMEOUT_MS
            )
        return wire.alter_partition_results(response)

    async def _tick_loop(self) -> None:
        for count in itertools.count():
            if self._stopping:
                return
            await asyncio.sleep(TICK_INTERVAL_MS / 1000)
            try:
                self.roles.tick(all_leaders=count % TICKS_PER_ISR_CHECK == 0)
            except Exception:
                log.exception("the replica state's tick failed")

    # ---- the data path (``Replication``) --------------------------------------------------------------------

    def _known(self, tp: TopicPartition) -> bool:
        return (
            self.control.metadata.partition(tp) is not None
            or self._state.logs.log(tp.topic, tp.partition) is not None
        )

    def writable(self, topic: str, partition: int, acks: int) -> PartitionLog:
        tp = TopicPartition(topic, partition)
        entry = self.roles.led.get(tp)
        if entry is None:
            if self._known(tp):
                raise Refused(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.node_id} does not lead {tp}")
            raise Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no partition {tp} in the cluster")
        if acks == ACKS_ALL:
            error = entry.leader.check_acks_all()
            if error != ErrorCode.NONE:
                raise Refused(
                    error,
                    f"{tp} has {len(entry.leader.isr)} in-sync replica(s), "
                    f"min.insync.replicas is {entry.leader.min_insync_replicas}",
                )
        return entry.log

    async def wait_for_acks(
        self, appended: Sequence[tuple[PartitionLog, int]], timeout_ms: int
    ) -> list[ErrorCode]:
        return await self.roles.wait_for_acks(appended, timeout_ms)

    def readable(
        self, topic: str, partition: int, current_leader_epoch: int, replica_id: int
    ) -> ReadAccess | ErrorCode:
        tp = TopicPartition(topic, partition)
        entry = self.roles.led.get(tp)
        if entry is None:
            return (
                ErrorCode.NOT_LEADER_OR_FOLLOWER if self._known(tp) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
        leader = entry.leader
        fenced = fence_leader_epoch(current_leader_epoch, leader.leader_epoch)
        if fenced != ErrorCode.NONE:
            return fenced
        if replica_id >= 0:
            return ReadAccess(entry.log, None, leader.leader_epoch)
        return ReadAccess(entry.log, entry.log.high_watermark, leader.leader_epoch)

    def follower_fetched(self, access: ReadAccess, replica_id: int, fetch_offset: int) -> ErrorCode:
        return self.roles.follower_fetched(access, replica_id, fetch_offset)

    def on_append(self, topic: str, partition: int) -> None:
        self.roles.on_append(topic, partition)

    # ---- the cluster as clients see it ----------------------------------------------------------------------

    def brokers(self, listener: str) -> list[BrokerView]:
        live = self.control.metadata.live_brokers()
        if not live:
            endpoint = self._state.advertised_endpoint(listener)
            return [BrokerView(self.node_id, endpoint.host, endpoint.port, self.settings.rack)]
        return [_view(broker, listener) for broker in live]

    async def metadata_known(self, timeout_ms: int) -> bool:
        if self._metadata_received.is_set():
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_ms / 1000):
                await self._metadata_received.wait()
        return self._metadata_received.is_set()

    def controller_id(self) -> int:
        return self.control.metadata.controller_id

    def topic_names(self) -> list[str]:
        return sorted(self.control.metadata.topics)

    def topic(self, name: str) -> ClusterTopic | None:
        image = self.control.metadata.topic(name)
        if image is None or not image.partitions:
            return None
        return ClusterTopic(name, image.topic_id, name in INTERNAL_TOPICS, max(image.partitions) + 1)

    def topic_by_id(self, topic_id: uuid.UUID) -> ClusterTopic | None:
        name = self.control.metadata.topic_name(topic_id)
        return self.topic(name) if name is not None else None

    def describe_partitions(self, topic: TopicView, first: int, last: int) -> list[PartitionView]:
        metadata = self.control.metadata
        image = metadata.topic(topic.name)
        views: list[PartitionView] = []
        for index in range(first, last):
            info = image.partitions.get(index) if image is not None else None
            if info is None:
                views.append(PartitionView(index, ErrorCode.LEADER_NOT_AVAILABLE, -1, -1, [], [], []))
                continue
            leader_live = info.leader in metadata.brokers
            views.append(
                PartitionView(
                    index,
                    ErrorCode.NONE if leader_live else ErrorCode.LEADER_NOT_AVAILABLE,
                    info.leader if leader_live else -1,
                    info.leader_epoch,
                    list(info.replicas),
                    list(info.isr),
                    list(metadata.offline_replicas(info)),
                )
            )
        return views

    def find_coordinator(self, group_id: str, listener: str) -> BrokerView | Refused:
        groups = self._state.groups
        return self._coordinator_of(
            OFFSETS_TOPIC,
            partition_for_group(group_id, self._existing_partitions(OFFSETS_TOPIC) or groups.partitions),
            groups.config.offsets_topic_num_partitions,
            self.settings.offsets_topic_replication_factor,
            OFFSETS_TOPIC_CONFIG,
            "offsets.topic.replication.factor",
            listener,
        )

    def find_transaction_coordinator(self, transactional_id: str, listener: str) -> BrokerView | Refused:
        transactions = self._state.transactions
        config = self._state.config
        count = self._existing_partitions(TRANSACTION_STATE_TOPIC) or transactions.coordinator.partition_count
        return self._coordinator_of(
            TRANSACTION_STATE_TOPIC,
            partition_for_group(transactional_id, count),
            transactions.partitions,
            config.get_int("transaction.state.log.replication.factor"),
            transaction_state_topic_config(config.get_int("transaction.state.log.min.isr")),
            "transaction.state.log.replication.factor",
            listener,
        )

    def _existing_partitions(self, topic: str) -> int:
        """The partitions of a coordinators' ``topic`` if known (from ZooKeeper once this broker
        coordinated a partition of it, else from its metadata), 0 if it does not exist yet."""
        known = self._internal_partition_counts.get(topic)
        if known is not None:
            return known
        image = self.control.metadata.topic(topic)
        return max(image.partitions) + 1 if image is not None and image.partitions else 0

    def _coordinator_of(
        self,
        topic: str,
        partition: int,
        partitions: int,
        replication_factor: int,
        topic_config: Mapping[str, str],
        setting: str,
        listener: str,
    ) -> BrokerView | Refused:
        """The leader of ``partition`` of the internal ``topic`` (a coordinator's), creating the
        topic first when it does not exist yet; COORDINATOR_NOT_AVAILABLE meanwhile."""
        metadata = self.control.metadata
        if metadata.topic(topic) is None:
            live = len(metadata.brokers)
            if live < replication_factor:
                # As Kafka: an internal topic is made with its full replication factor or not at
                # all (a commit must survive the loss of a broker); clients retry meanwhile.
                return Refused(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    f"{live} broker(s) alive, {setting} is {replication_factor}: "
                    f"{topic} is created once enough brokers are up",
                )
            self._create_internal_topic(topic, partitions, replication_factor, topic_config)
            return Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{topic} is being created")
        leader = metadata.leader(TopicPartition(topic, partition))
        if leader is None:
            return Refused(
                ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{topic}-{partition} has no leader right now"
            )
        return _view(leader, listener)

    def _create_internal_topic(
        self, topic: str, partitions: int, replication_factor: int, topic_config: Mapping[str, str]
    ) -> None:
        if topic in self._creating_internal:
            return
        self._creating_internal.add(topic)

        async def create() -> None:
            try:
                await self.create_topic(
                    topic,
                    partitions,
                    replication_factor,
                    {},
                    topic_config,
                    validate_only=False,
                    internal=True,
                )
                log.info(
                    "created %s: %d partitions, replication factor %d", topic, partitions, replication_factor
                )
            except (TopicExistsError, ZkTopicExistsError):
                pass
            except Exception as error:
                log.warning("creating %s failed (%s); the next FindCoordinator tries again", topic, error)
            finally:
                self._creating_internal.discard(topic)

        task = asyncio.get_running_loop().create_task(create())
        self._tasks.append(task)
        task.add_done_callback(self._forget_task)

    # ---- admin (``Replication``) -------------------------------------------------------------------------------

    def _live_racks(self) -> dict[int, str | None]:
        brokers = self.control.metadata.brokers
        if not brokers:
            return {self.node_id: self.settings.rack}
        return {node_id: broker.rack for node_id, broker in brokers.items()}

    def _log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        unknown = sorted(set(overrides) - set(TOPIC_CONFIG_KEYS))
        if unknown:
            raise ConfigError(f"unknown topic config(s): {', '.join(unknown)}")
        return LogConfig.from_properties(overrides, self._state.config.log_defaults())

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        assignments: Mapping[int, Sequence[int]],
        overrides: Mapping[str, str],
        *,
        validate_only: bool,
        internal: bool = False,
    ) -> tuple[TopicMetadata, int]:
        problem = validate_topic_name(name)
        if problem is not None:
            raise InvalidTopicError(problem)
        if self.control.metadata.topic(name) is not None:
            raise TopicExistsError(f"topic {name!r} already exists")
        config = self._log_config(overrides)
        racks = self._live_racks()
        try:
            if assignments:
                replicas = validate_assignment(assignments, racks)
            else:
                if replication_factor == -1:
                    replication_factor = self.settings.default_replication_factor
                replicas = assign_replicas(
                    racks,
                    partitions,
                    replication_factor,
                    start_index=random.randrange(len(racks)),
                    replica_shift=random.randrange(len(racks)),
                )
        except PlacementError as error:
            raise Refused(error.error, str(error)) from None
        factor = len(replicas[0])
        topic_id = uuid.uuid4()
        metadata = TopicMetadata(name, topic_id, len(replicas), dict(overrides), config, internal)
        if validate_only:
            return metadata, factor
        assignment = TopicAssignment(name, topic_id, replicas)
        self._topic_overrides[name] = dict(overrides)
        try:
            await self._zookeeper(lambda zk: zk.create_topic(assignment, overrides))
        except ZkTopicExistsError as error:
            raise TopicExistsError(str(error)) from None
        await self._wait_for_metadata(lambda: self._has_leaders(name, topic_id, len(replicas)))
        return metadata, factor

    def _has_leaders(self, name: str, topic_id: uuid.UUID, partitions: int) -> bool:
        image = self.control.metadata.topic(name)
        return (
            image is not None
            and image.topic_id == topic_id
            and all(
                index in image.partitions and image.partitions[index].leader >= 0
                for index in range(partitions)
            )
        )

    async def _wait_for_metadata(
        self, condition: Callable[[], bool], timeout_ms: int = ADMIN_WAIT_MS
    ) -> bool:
        """Wait until the controller's metadata satisfies ``condition`` (or the timeout)."""
        if condition():
            return True
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (condition, future)
        self._metadata_waiters.append(entry)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await future
            return True
        except TimeoutError:
            return False
        finally:
            with contextlib.suppress(ValueError):
                self._metadata_waiters.remove(entry)

    def _metadata_changed(self) -> None:
        for condition, future in list(self._metadata_waiters):
            if not future.done() and condition():
                future.set_result(None)

    async def create_partitions(
        self, name: str, total: int, assignments: Sequence[Sequence[int]], *, validate_only: bool
    ) -> None:
        current = await self._zookeeper(lambda zk: zk.read_topic(name))
        if current is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        count = current.partition_count
        if total <= count:
            raise InvalidPartitionsError(
                f"topic {name!r} has {count} partitions; the new count must be larger, not {total}"
            )
        racks = self._live_racks()
        try:
            if assignments:
                added = validate_assignment(
                    {count + index: replicas for index, replicas in enumerate(assignments)},
                    racks,
                    first_partition=count,
                    replication_factor=current.replication_factor,
                )
            else:
                added = assign_replicas(
                    racks,
                    total - count,
                    current.replication_factor,
                    start_index=random.randrange(len(racks)),
                    first_partition=count,
                )
        except PlacementError as error:
            raise Refused(error.error, str(error)) from None
        if validate_only:
            return
        # Partitions being reassigned keep their adding and removing replicas.
        grown = dataclasses.replace(current, replicas={**current.replicas, **added})
        try:
            await self._zookeeper(lambda zk: zk.add_partitions(grown))
        except ConcurrentChangeError as error:
            raise Refused(ErrorCode.CONCURRENT_TRANSACTIONS, f"{error}: try again") from None
        await self._wait_for_metadata(lambda: self._has_leaders(name, current.topic_id, total))

    async def delete_topic(self, name: str) -> None:
        image = self.control.metadata.topic(name)
        await self._zookeeper(lambda zk: zk.request_topic_deletion(name))
        if image is not None:
            topic_id = image.topic_id
            await self._wait_for_metadata(
                lambda: (found := self.control.metadata.topic(name)) is None or found.topic_id != topic_id
            )
        self._topic_overrides.pop(name, None)

    async def topic_config(self, name: str) -> TopicMetadata | None:
        topic = self.topic(name)
        if topic is None:
            return None
        overrides = await self._overrides(name)
        try:
            config = self._log_config(overrides)
        except ConfigError:
            config = self._state.config.log_defaults()
        return TopicMetadata(name, topic.topic_id, topic.partitions, dict(overrides), config, topic.internal)

    async def alter_topic_config(self, name: str, overrides: Mapping[str, str]) -> None:
        if self.topic(name) is None:
            raise UnknownTopicError(f"topic {name!r} does not exist")
        self._log_config(overrides)
        await self._zookeeper(lambda zk: zk.set_topic_config(name, overrides))
        self._topic_overrides[name] = dict(overrides)

    async def allocate_producer_id(self) -> int:
        async with self._producer_id_lock:
            following, last = self._producer_ids
            if following > last:
                following, last = await self._zookeeper(
                    lambda zk: zk.allocate_producer_ids(self.node_id, PRODUCER_ID_BLOCK_SIZE)
                )
            self._producer_ids = (following + 1, last)
            return following


class ClusterQuotaStore:
    """Client quotas kept in ZooKeeper as Kafka keeps them; every broker reads them again on the
    change notification a save leaves (``ClusterZooKeeper.set_client_quota``)."""

    def __init__(self, cluster: ClusterReplication) -> None:
        self._cluster = cluster

    def load(self) -> dict[QuotaEntity, dict[str, float]]:
        raise AssertionError("a cluster's quotas are read when the broker joins, not loaded")

    async def save(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        try:
            await self._cluster._zookeeper(lambda zk: zk.set_client_quota(entity.parts, values))
        except ZkError as error:
            raise QuotaStoreError(f"ZooKeeper: {zk_error_text(error)}") from None


class ClusterGroupConfigStore:
    """Group configs (KIP-848) kept in ZooKeeper (``/config/groups/<group>``); every broker reads
    a group's again on the change notification a save leaves (``ClusterZooKeeper.set_group_config``)."""

    def __init__(self, cluster: ClusterReplication) -> None:
        self._cluster = cluster

    def load(self) -> GroupConfigs:
        raise AssertionError("a cluster's group configs are read when the broker joins, not loaded")

    async def save(self, group_id: str, values: Mapping[str, str]) -> None:
        try:
            await self._cluster._zookeeper(lambda zk: zk.set_group_config(group_id, values))
        except ZkError as error:
            raise GroupConfigStoreError(f"ZooKeeper: {zk_error_text(error)}") from None


def _view(broker: BrokerRegistration, listener: str) -> BrokerView:
    """``broker`` as a client that came in through ``listener`` must reach it: its endpoint of
    that name, else its first (a broker started with other listeners)."""
    for endpoint in broker.endpoints:
        if endpoint.listener == listener:
            return BrokerView(broker.node_id, endpoint.host, endpoint.port, broker.rack)
    return BrokerView(broker.node_id, broker.host, broker.port, broker.rack)
