"""The ZooKeeper shell: strom's cluster operations over a ``ZkStore`` session.

Everything here blocks the calling thread on ZooKeeper (the broker calls it from a worker thread);
none of it decides anything — the decisions are the controller's (``controller``), this only
reads, watches and writes what the layout (``znodes``) says:

* joining: the persistent paths, the cluster id, the broker's ephemeral registration (a node id
  held by another live session is refused with a clear message, after waiting for a registration
  left by this broker's own previous life to expire);
* the controller election: ``/controller`` (ephemeral) created together with the increment of
  ``/controller_epoch`` in one transaction conditional on the epoch's version, so two brokers can
  never both take the same epoch; every later controller write is a transaction that first checks
  that version, so a deposed controller cannot change anything (``ControllerMovedError``);
* reads of the whole state for a new controller (pipelined), and the reads behind each watch;
* the admin writes any broker makes: create a topic (refused while a deletion of the same name is
  pending), add partitions (conditional on the topic znode's version), ask for a deletion, change
  a topic's config (with a change notification for the other brokers).

Watches are ZooKeeper's, one-shot: pass ``watch=`` to a read, and when it fires, read again (which
arms it again). The callback runs on the client's event thread and must only post an event.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from strom.base.clock import Clock
from strom.cluster import znodes
from strom.cluster.actions import ControllerWrite, WriteOutcome
from strom.cluster.model import (
    BrokerRegistration,
    ClusterSnapshot,
    PartitionState,
    TopicAssignment,
    TopicPartition,
)
from strom.cluster.zk_store import (
    BadVersionError,
    Check,
    Create,
    Delete,
    MultiError,
    NodeExistsError,
    NoNodeError,
    Op,
    SetData,
    Watch,
    WatchEvent,
    ZkError,
    ZkStore,
)

log = logging.getLogger("strom.cluster.zookeeper")

# Attempts at taking the controller epoch when it keeps moving under us (another broker won and
# lost it in between): a handful is plenty, each attempt is two round trips.
CONTROLLER_ELECTION_ATTEMPTS = 5


class BrokerIdInUseError(Exception):
    """Another live broker holds this node id in ZooKeeper."""


class TopicExistsError(Exception):
    """The topic exists already, or a deletion of a topic of that name is still pending."""


class ConcurrentChangeError(Exception):
    """The znode changed between our read and our conditional write; read again and retry."""


class ControllerMovedError(Exception):
    """A controller write found a newer controller epoch: this broker is no longer the controller."""


@dataclass(frozen=True)
class ConfigChanges:
    topics: tuple[str, ...]  # whose config to read again
    last: str | None  # the newest notification seen: pass it as ``after`` next time
    quotas: bool = False  # a client quota changed: read them all again
    users: tuple[str, ...] = ()  # users whose /config/users znode changed (SCRAM credentials, quotas)
    groups: tuple[str, ...] = ()  # group ids whose /config/groups znode changed (group configs)


@dataclass(frozen=True)
class AclChanges:
    resources: tuple[znodes.AclResourceKey, ...]  # whose ACLs to read again
    last_literal: str | None  # the newest notifications seen: pass them as ``after`` next time
    last_extended: str | None


@dataclass(frozen=True)
class ControllerLease:
    """This broker is the controller for ``epoch``; its writes check ``/controller_epoch`` is at
    ``epoch_version`` (the version our own increment produced)."""

    node_id: int
    epoch: int
    epoch_version: int


class ClusterZooKeeper:
    def __init__(self, store: ZkStore, clock: Clock) -> None:
        self.store = store
        self._clock = clock

    # ---- joining ------------------------------------------------------------------------------------

    def ensure_layout(self) -> None:
        """Create the persistent paths strom uses (idempotent; every broker does it on start)."""
        for path in (*znodes.PERSISTENT_PATHS, *znodes.ACL_PERSISTENT_PATHS):
            self.store.ensure_path(path)

    def ensure_cluster_id(self, proposed: str | None = None) -> str:
        """The cluster id in ``/cluster/id``; the first broker writes ``proposed`` (or a new id)."""
        try:
            data, _ = self.store.get(znodes.CLUSTER_ID_PATH)
            return znodes.decode_cluster_id(data)
        except NoNodeError:
            pass
        cluster_id = proposed or znodes.new_cluster_id()
        try:
            self.store.create(znodes.CLUSTER_ID_PATH, znodes.encode_cluster_id(cluster_id))
            return cluster_id
        except NodeExistsError:
            data, _ = self.store.get(znodes.CLUSTER_ID_PATH)
            return znodes.decode_cluster_id(data)

    def register_broker(self, registration: BrokerRegistration, *, stale_wait_ms: int) -> BrokerRegistration:
        """Create ``/brokers/ids/N`` for this session; returns the registration with its epoch.

        A znode left by another session may be this broker's previous life (killed before its
        session expired): wait up to ``stale_wait_ms`` (the session timeout) for it to go. If it is
        still there, another live broker has this node id: BrokerIdInUseError.
        """
        path = znodes.broker_path(registration.node_id)
        data = znodes.encode_broker(registration)
        deadline = time.monotonic() + stale_wait_ms / 1000
        while True:
            try:
                self.store.create(path, data, ephemeral=True)
            except NodeExistsError:
                pass
            else:
                stat = self.store.exists(path)
                if stat is not None and stat.ephemeral_owner == self.store.session_id:
                    return registration.with_epoch(stat.czxid)
                continue
            gone = threading.Event()
            try:
                existing_data, stat = self.store.get(path, watch=_setter(gone))
            except NoNodeError:
                continue
            if stat.ephemeral_owner == self.store.session_id:
                if existing_data != data:
                    stat = self.store.set(path, data, stat.version)
                return registration.with_epoch(stat.czxid)
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0 or not gone.wait(remaining_s):
                raise BrokerIdInUseError(_in_use_message(registration.node_id, existing_data, stale_wait_ms))

    def deregister_broker(self, node_id: int) -> None:
        """Remove this session's registration (a clean shutdown; expiry would do it later)."""
        path = znodes.broker_path(node_id)
        try:
            _, stat = self.store.get(path)
            if stat.ephemeral_owner == self.store.session_id:
                self.store.delete(path, stat.version)
        except (NoNodeError, BadVersionError):
            pass

    def read_live_brokers(self, watch: Watch | None = None) -> dict[int, BrokerRegistration]:
        """Every registered broker (with its epoch); ``watch`` fires when one comes or goes."""
        children = self.store.get_children(znodes.BROKER_IDS_PATH, watch=watch)
        ids = sorted(int(child) for child in children if child.isdigit())
        found = self.store.get_many([znodes.broker_path(node_id) for node_id in ids])
        brokers: dict[int, BrokerRegistration] = {}
        for node_id, entry in zip(ids, found, strict=True):
            if entry is None:  # gone between the two reads: the watch has fired already
                continue
            data, stat = entry
            brokers[node_id] = znodes.decode_broker(node_id, data, stat.czxid)
        return brokers

    # ---- the controller ---------------------------------------------------------------------------------

    def read_controller(self, watch: Watch | None = None) -> int | None:
        """The controller's node id, or None; ``watch`` fires when ``/controller`` changes."""
        stat = self.store.exists(znodes.CONTROLLER_PATH, watch=watch)
        if stat is None:
            return None
        try:
            data, _ = self.store.get(znodes.CONTROLLER_PATH)
        except NoNodeError:
            return None
        return znodes.decode_controller(data)

    def read_controller_epoch(self) -> tuple[int, int] | None:
        """``(epoch, znode version)`` of ``/controller_epoch``, or None before the first election."""
        try:
            data, stat = self.store.get(znodes.CONTROLLER_EPOCH_PATH)
        except NoNodeError:
            return None
        return znodes.decode_controller_epoch(data), stat.version

    def try_become_controller(self, node_id: int) -> ControllerLease | None:
        """Take the controllership if nobody holds it: None if another broker is the controller."""
        for _ in range(CONTROLLER_ELECTION_ATTEMPTS):
            current = self.read_controller_epoch()
            if current is None:
                with contextlib.suppress(NodeExistsError):
                    self.store.create(znodes.CONTROLLER_EPOCH_PATH, znodes.encode_controller_epoch(0))
                continue
            epoch, version = current
            try:
                self.store.multi(
                    [
                        Create(
                            znodes.CONTROLLER_PATH,
                            znodes.encode_controller(node_id, self._clock.wall_ms()),
                            ephemeral=True,
                        ),
                        SetData(
                            znodes.CONTROLLER_EPOCH_PATH, znodes.encode_controller_epoch(epoch + 1), version
                        ),
                    ]
                )
            except MultiError as error:
                if error.index == 0 and isinstance(error.cause, NodeExistsError):
                    try:
                        _, stat = self.store.get(znodes.CONTROLLER_PATH)
                    except NoNodeError:
                        continue
                    if stat.ephemeral_owner == self.store.session_id:
                        # Ours from an earlier term of this same session: give it up and compete again.
                        self._delete_quietly(znodes.CONTROLLER_PATH, stat.version)
                        continue
                    return None
                if error.index == 1 and isinstance(error.cause, BadVersionError | NoNodeError):
                    continue
                raise error.cause from None
            return ControllerLease(node_id, epoch + 1, version + 1)
        raise ZkError(f"the controller epoch kept changing over {CONTROLLER_ELECTION_ATTEMPTS} attempts")

    def resign_controller(self, lease: ControllerLease) -> None:
        """Give up the controllership (clean shutdown): delete ``/controller`` if it is ours."""
        try:
            _, stat = self.store.get(znodes.CONTROLLER_PATH)
        except NoNodeError:
            return
        if stat.ephemeral_owner == self.store.session_id:
            self._delete_quietly(znodes.CONTROLLER_PATH, stat.version)

    def _delete_quietly(self, path: str, version: int = -1) -> None:
        with contextlib.suppress(NoNodeError, BadVersionError):
            self.store.delete(path, version)

    def read_topic_names(self, watch: Watch | None = None) -> list[str]:
        return self.store.get_children(znodes.TOPICS_PATH, watch=watch)

    def read_topics(self, names: Sequence[str]) -> dict[str, TopicAssignment]:
        found = self.store.get_many([znodes.topic_path(name) for name in names])
        topics: dict[str, TopicAssignment] = {}
        for name, entry in zip(names, found, strict=True):
            if entry is not None:
                topics[name] = znodes.decode_topic(name, entry[0], entry[1].version)
        return topics

    def read_topic(self, name: str, watch: Watch | None = None) -> TopicAssignment | None:
        """One topic's assignment; ``watch`` fires when it changes (CreatePartitions) or goes."""
        stat = self.store.exists(znodes.topic_path(name), watch=watch)
        if stat is None:
            return None
        return self.read_topics([name]).get(name)

    def read_partition_states(
        self, topics: Iterable[TopicAssignment]
    ) -> dict[TopicPartition, PartitionState]:
        partitions = [tp for assignment in topics for tp in assignment.partitions()]
        found = self.store.get_many(
            [znodes.partition_state_path(tp.topic, tp.partition) for tp in partitions]
        )
        states: dict[TopicPartition, PartitionState] = {}
        for tp, entry in zip(partitions, found, strict=True):
            if entry is not None:
                leader_and_isr = znodes.decode_partition_state(tp.topic, tp.partition, entry[0])
                states[tp] = PartitionState(leader_and_isr, entry[1].version)
        return states

    def read_topics_to_delete(self, watch: Watch | None = None) -> frozenset[str]:
        return frozenset(self.store.get_children(znodes.DELETE_TOPICS_PATH, watch=watch))

    def read_topic_configs(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        found = self.store.get_many([znodes.topic_config_path(name) for name in names])
        return {
            name: znodes.decode_topic_config(name, entry[0])
            for name, entry in zip(names, found, strict=True)
            if entry is not None
        }

    def read_snapshot(
        self,
        *,
        brokers_watch: Watch | None = None,
        topics_watch: Watch | None = None,
        deletions_watch: Watch | None = None,
    ) -> ClusterSnapshot:
        """Everything a new controller needs, arming the watches it keeps (before reading, so no
        change between the read and the watch is missed)."""
        brokers = self.read_live_brokers(watch=brokers_watch)
        names = self.read_topic_names(watch=topics_watch)
        topics = self.read_topics(names)
        return ClusterSnapshot(
            brokers=brokers,
            topics=topics,
            partition_states=self.read_partition_states(topics.values()),
            topics_to_delete=self.read_topics_to_delete(watch=deletions_watch),
            topic_configs=self.read_topic_configs(list(topics)),
        )

    def apply_controller_writes(
        self, lease: ControllerLease, writes: Sequence[ControllerWrite]
    ) -> list[WriteOutcome]:
        """Carry out the controller's writes, each fenced by its epoch; pipelined.

        Raises ControllerMovedError as soon as a fence fails (the controller must resign; the
        outcome of its other writes no longer matters). ConnectionLossError / SessionExpiredError
        pass through: the outcome is unknown, and the controller resigns too.
        """
        fence = Check(znodes.CONTROLLER_EPOCH_PATH, lease.epoch_version)
        self._create_parents(sorted({parent for write in writes for parent in write.parents}))
        tree_errors: dict[str, ZkError] = {}
        for write in writes:
            for tree in write.delete_trees:
                error = self._delete_tree_fenced(fence, tree)
                if error is not None:
                    tree_errors[write.key] = error
                    break
        pending = [write for write in writes if write.key not in tree_errors and write.ops]
        transactions: list[list[Op]] = [[fence, *write.ops] for write in pending]
        results = self.store.multi_many(transactions)
        outcomes: dict[str, WriteOutcome] = {
            key: WriteOutcome(key, error=error) for key, error in tree_errors.items()
        }
        for write in writes:
            if write.key not in tree_errors and not write.ops:
                outcomes[write.key] = WriteOutcome(write.key, results=())
        for write, result in zip(pending, results, strict=True):
            if isinstance(result, MultiError):
                if result.index == 0:
                    raise ControllerMovedError(
                        f"/controller_epoch is no longer at version {lease.epoch_version} "
                        f"(epoch {lease.epoch}): another controller took over"
                    )
                failed = write.ops[result.index - 1]
                outcomes[write.key] = WriteOutcome(
                    write.key, error=result.cause, current=self._current(failed.path)
                )
            elif isinstance(result, ZkError):
                outcomes[write.key] = WriteOutcome(write.key, error=result)
            else:
                outcomes[write.key] = WriteOutcome(write.key, results=tuple(result[1:]))
        return [outcomes[write.key] for write in writes]

    def _current(self, path: str) -> tuple[bytes, int] | None:
        try:
            data, stat = self.store.get(path)
        except NoNodeError:
            return None
        return data, stat.version

    def _create_parents(self, paths: Sequence[str]) -> None:
        """Create missing empty containers, shallowest first, pipelined; existing ones are fine."""
        by_depth: dict[int, list[str]] = {}
        for path in paths:
            by_depth.setdefault(path.count("/"), []).append(path)
        for depth in sorted(by_depth):
            for result in self.store.multi_many([[Create(path)] for path in by_depth[depth]]):
                # An existing container is fine; a missing parent (the topic was deleted meanwhile)
                # makes the write itself fail, which reports it.
                if isinstance(result, MultiError) and not isinstance(
                    result.cause, NodeExistsError | NoNodeError
                ):
                    raise result.cause

    def _delete_tree_fenced(self, fence: Check, root: str) -> ZkError | None:
        """Delete ``root`` and everything under it, leaves first, each delete fenced."""
        try:
            children = self.store.get_children(root)
        except NoNodeError:
            return None
        for child in children:
            error = self._delete_tree_fenced(fence, f"{root}/{child}")
            if error is not None:
                return error
        try:
            self.store.multi([fence, Delete(root)])
        except MultiError as error:
            if error.index == 0:
                raise ControllerMovedError(f"/controller_epoch moved while deleting {root}") from None
            if isinstance(error.cause, NoNodeError):
                return None
            return error.cause
        return None

    # ---- admin writes (any broker) --------------------------------------------------------------------------

    def create_topic(self, assignment: TopicAssignment, config: Mapping[str, str]) -> None:
        """Write a new topic's assignment and config in one transaction.

        The transaction also creates and deletes ``/admin/delete_topics/T``: it fails if that
        marker exists, so a topic cannot be re-created while the deletion of its namesake is
        still pending. The controller creates the partition states when it sees the topic.
        """
        name = assignment.name
        marker = znodes.delete_topic_path(name)
        topic_op = Create(znodes.topic_path(name), znodes.encode_topic(assignment))
        config_data = znodes.encode_topic_config(name, config)
        for config_op in (
            Create(znodes.topic_config_path(name), config_data),
            SetData(znodes.topic_config_path(name), config_data),  # one left by an interrupted deletion
        ):
            try:
                self.store.multi([topic_op, config_op, Create(marker), Delete(marker)])
                return
            except MultiError as error:
                if error.index == 0 and isinstance(error.cause, NodeExistsError):
                    raise TopicExistsError(f"topic {name!r} already exists") from None
                if error.index == 1 and isinstance(error.cause, NodeExistsError):
                    continue
                if error.index == 2 and isinstance(error.cause, NodeExistsError):
                    raise TopicExistsError(f"topic {name!r} is marked for deletion") from None
                raise error.cause from None
        raise ConcurrentChangeError(f"the config of topic {name!r} changed while it was being created")

    def add_partitions(self, assignment: TopicAssignment) -> None:
        """Replace the topic's assignment (with partitions added), conditional on the version read."""
        try:
            self.store.set(
                znodes.topic_path(assignment.name), znodes.encode_topic(assignment), assignment.version
            )
        except BadVersionError:
            raise ConcurrentChangeError(f"topic {assignment.name!r} changed meanwhile") from None

    def request_topic_deletion(self, name: str) -> None:
        """Leave the marker the controller acts on (idempotent)."""
        with contextlib.suppress(NodeExistsError):
            self.store.create(znodes.delete_topic_path(name))

    def set_topic_config(self, name: str, config: Mapping[str, str]) -> None:
        """Replace a topic's config overrides and tell every broker (a sequential change znode)."""
        data = znodes.encode_topic_config(name, config)
        try:
            self.store.set(znodes.topic_config_path(name), data)
        except NoNodeError:
            self.store.create(znodes.topic_config_path(name), data)
        self.store.create(
            f"{znodes.CONFIG_CHANGES_PATH}/{znodes.CONFIG_CHANGE_PREFIX}",
            znodes.encode_config_change(name),
            sequence=True,
        )

    def read_user_configs(self) -> dict[str, dict[str, str]]:
        """Every user's configs under ``/config/users`` (SCRAM credentials, quotas)."""
        try:
            users = sorted(self.store.get_children(znodes.CONFIG_USERS_PATH))
        except NoNodeError:
            return {}
        found = self.store.get_many([znodes.user_config_path(user) for user in users])
        return {
            user: znodes.decode_user_config(user, entry[0])
            for user, entry in zip(users, found, strict=True)
            if entry is not None
        }

    def read_user_config(self, user: str) -> dict[str, str] | None:
        """One user's configs under ``/config/users`` (``user`` as the znode is named), None without one."""
        try:
            data, _ = self.store.get(znodes.user_config_path(user))
        except NoNodeError:
            return None
        return znodes.decode_user_config(user, data)

    def update_user_config(self, user: str, changes: Mapping[str, str | None]) -> None:
        """Set (or, for None, remove) some of a user's configs, keeping the others (a user's quotas
        live beside its credentials); conditional on the version read, repeated when another
        writer got there first. Every broker is told by a change notification ``users/<user>``."""
        path = znodes.user_config_path(user)
        while True:
            try:
                data, stat = self.store.get(path)
            except NoNodeError:
                config = {key: value for key, value in changes.items() if value is not None}
                try:
                    self.store.create(path, znodes.encode_user_config(user, config))
                except NodeExistsError:
                    continue
                break
            config = znodes.decode_user_config(user, data)
            for key, value in changes.items():
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = value
            try:
                self.store.set(path, znodes.encode_user_config(user, config), stat.version)
            except BadVersionError:
                continue
            break
        self.store.create(
            f"{znodes.CONFIG_CHANGES_PATH}/{znodes.CONFIG_CHANGE_PREFIX}",
            znodes.encode_entity_change(f"users/{user}"),
            sequence=True,
        )

    def allocate_producer_ids(self, node_id: int, block_size: int) -> tuple[int, int]:
        """Take the next block of producer ids for this broker: ``(first, last)`` inclusive.

        ``/latest_producer_id_block`` names the last block handed out; taking the next one is a
        write conditional on the version read, retried when another broker got there first, so no
        two brokers ever hand out the same id (an idempotent producer's sequence checks rely on it
        when its partitions move between brokers)."""
        assert block_size > 0, block_size
        while True:
            try:
                data, stat = self.store.get(znodes.PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                with contextlib.suppress(NodeExistsError):
                    self.store.create(znodes.PRODUCER_ID_BLOCK_PATH)
                continue
            first = znodes.decode_producer_id_block_end(data) + 1
            last = first + block_size - 1
            try:
                self.store.set(
                    znodes.PRODUCER_ID_BLOCK_PATH,
                    znodes.encode_producer_id_block(node_id, first, last),
                    stat.version,
                )
            except BadVersionError:
                continue
            return first, last

    def read_config_changes(self, after: str | None = None, watch: Watch | None = None) -> ConfigChanges:
        """What the change notifications newer than the notification ``after`` name: topics,
        client quotas, users, groups."""
        children = sorted(self.store.get_children(znodes.CONFIG_CHANGES_PATH, watch=watch))
        newer = [child for child in children if after is None or child > after]
        found = self.store.get_many([f"{znodes.CONFIG_CHANGES_PATH}/{child}" for child in newer])
        topics: list[str] = []
        users: list[str] = []
        groups: list[str] = []
        quotas = False
        for child, entry in zip(newer, found, strict=True):
            if entry is None:
                continue
            path = f"{znodes.CONFIG_CHANGES_PATH}/{child}"
            topic = znodes.decode_config_change(path, entry[0])
            if topic is not None and topic not in topics:
                topics.append(topic)
            elif topic is None:
                kind, _, name = znodes.config_change_entity(path, entry[0]).partition("/")
                quotas = quotas or kind in ("users", "clients")
                if kind == "users" and name and "/" not in name and name not in users:
                    users.append(name)
                if kind == "groups" and name and "/" not in name:
                    group_id = znodes.group_id_of(name)
                    if group_id not in groups:
                        groups.append(group_id)
        return ConfigChanges(
            tuple(topics), newer[-1] if newer else after, quotas, tuple(users), tuple(groups)
        )

    def set_client_quota(self, parts: znodes.QuotaEntityParts, values: Mapping[str, float]) -> None:
        """Replace an entity's client quotas (none: an empty config, as Kafka leaves it) and tell
        every broker (a sequential change znode naming the entity)."""
        entity_path = znodes.client_quota_entity_path(parts)
        path = f"/config/{entity_path}"
        # Read, change, write conditional on the version read: a user's znode also holds its SCRAM
        # credentials, which are kept (and may be changed meanwhile through another broker).
        while True:
            try:
                data, stat = self.store.get(path)
            except NoNodeError:
                self.store.ensure_path(path.rsplit("/", 1)[0])
                try:
                    self.store.create(path, znodes.encode_client_quota(entity_path, values))
                except NodeExistsError:  # another broker created it meanwhile
                    continue
                break
            others = znodes.decode_entity_config(path, data)
            try:
                self.store.set(path, znodes.encode_client_quota(entity_path, values, others), stat.version)
            except BadVersionError:
                continue
            break
        self.store.create(
            f"{znodes.CONFIG_CHANGES_PATH}/{znodes.CONFIG_CHANGE_PREFIX}",
            znodes.encode_entity_change(entity_path),
            sequence=True,
        )

    def read_client_quotas(self) -> dict[znodes.QuotaEntityParts, dict[str, float]]:
        """Every client quota entity with quotas set, from /config/users and /config/clients."""
        entities: list[tuple[znodes.QuotaEntityParts, str]] = []
        for user in self._children(znodes.CONFIG_USERS_PATH):
            user_name = znodes.quota_entity_name(user)
            user_path = f"{znodes.CONFIG_USERS_PATH}/{user}"
            entities.append(((("user", user_name),), user_path))
            for client in self._children(f"{user_path}/clients"):
                pair: znodes.QuotaEntityParts = (
                    ("client-id", znodes.quota_entity_name(client)),
                    ("user", user_name),
                )
                entities.append((pair, f"{user_path}/clients/{client}"))
        for client in self._children(znodes.CONFIG_CLIENTS_PATH):
            entities.append(
                ((("client-id", znodes.quota_entity_name(client)),), f"{znodes.CONFIG_CLIENTS_PATH}/{client}")
            )
        found = self.store.get_many([path for _, path in entities])
        quotas: dict[znodes.QuotaEntityParts, dict[str, float]] = {}
        for (parts, path), entry in zip(entities, found, strict=True):
            if entry is None:
                continue
            try:
                values = znodes.decode_client_quota(path, entry[0])
            except znodes.ZnodeFormatError as error:  # not strom's (nor Kafka's): the others still apply
                log.warning("ignoring a client quota znode: %s", error)
                continue
            if values:
                quotas[parts] = values
        return quotas

    def set_group_config(self, group_id: str, values: Mapping[str, str]) -> None:
        """Replace a group's configs (none: delete its znode) and tell every broker (a sequential
        change znode naming the group). The whole set is written: nothing else shares the znode."""
        path = znodes.group_config_path(group_id)
        if values:
            data = znodes.encode_group_config(group_id, values)
            try:
                self.store.set(path, data)
            except NoNodeError:
                self.store.ensure_path(znodes.CONFIG_GROUPS_PATH)
                try:
                    self.store.create(path, data)
                except NodeExistsError:  # another broker created it meanwhile: ours is the newer
                    self.store.set(path, data)
        else:
            with contextlib.suppress(NoNodeError):
                self.store.delete(path)
        self.store.create(
            f"{znodes.CONFIG_CHANGES_PATH}/{znodes.CONFIG_CHANGE_PREFIX}",
            znodes.encode_entity_change(znodes.group_config_entity_path(group_id)),
            sequence=True,
        )

    def read_group_configs(self) -> dict[str, dict[str, str]]:
        """Every group's configs under /config/groups (groups with none left out). A znode strom
        cannot read is left out with a warning: the other groups' configs still apply."""
        names = self._children(znodes.CONFIG_GROUPS_PATH)
        found = self.store.get_many([f"{znodes.CONFIG_GROUPS_PATH}/{name}" for name in names])
        configs: dict[str, dict[str, str]] = {}
        for name, entry in zip(names, found, strict=True):
            if entry is None:
                continue
            group_id = znodes.group_id_of(name)
            if znodes.group_config_name(group_id) != name:
                # Not as strom names it (a change notification would name another znode).
                log.warning(
                    "ignoring %s/%s: not a group id as strom encodes it", znodes.CONFIG_GROUPS_PATH, name
                )
                continue
            values = self._decode_group_config(group_id, entry[0])
            if values:
                configs[group_id] = values
        return configs

    def read_group_config(self, group_id: str) -> dict[str, str]:
        """One group's configs (empty: none, or a znode strom cannot read, with a warning)."""
        try:
            data, _ = self.store.get(znodes.group_config_path(group_id))
        except NoNodeError:
            return {}
        return self._decode_group_config(group_id, data)

    def _decode_group_config(self, group_id: str, data: bytes) -> dict[str, str]:
        try:
            return znodes.decode_group_config(group_id, data)
        except znodes.ZnodeFormatError as error:  # not strom's: the group keeps the broker's defaults
            log.warning("ignoring a group config znode: %s", error)
            return {}

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self.store.get_children(path))
        except NoNodeError:
            return []

    # ---- ACLs in Kafka's layout (``strom.cluster.znodes``): read, changed one resource at a time
    # (read, change, write conditional on the version read, again if another broker got there
    # first), and the change notified to every broker.

    def read_all_acls(self) -> dict[znodes.AclResourceKey, frozenset[znodes.AclEntryText]]:
        keys: list[znodes.AclResourceKey] = []
        for base, pattern in (
            (znodes.ACL_LITERAL_PATH, znodes.ACL_PATTERN_LITERAL),
            (znodes.ACL_PREFIXED_PATH, znodes.ACL_PATTERN_PREFIXED),
        ):
            for resource_type in self._children(base):
                keys.extend(
                    (resource_type, name, pattern) for name in self._children(f"{base}/{resource_type}")
                )
        return {key: entries for key, entries in self.read_acls(keys).items() if entries}

    def read_acls(
        self, keys: Sequence[znodes.AclResourceKey]
    ) -> dict[znodes.AclResourceKey, frozenset[znodes.AclEntryText]]:
        """Each resource's entries (empty for a resource with none)."""
        found = self.store.get_many([znodes.acl_resource_path(key) for key in keys])
        return {
            key: frozenset() if entry is None else znodes.decode_acls(key, entry[0])
            for key, entry in zip(keys, found, strict=True)
        }

    def change_acls(
        self,
        key: znodes.AclResourceKey,
        added: Iterable[znodes.AclEntryText],
        removed: Iterable[znodes.AclEntryText],
    ) -> frozenset[znodes.AclEntryText]:
        """Add and remove entries of one resource; the entries it has now."""
        path = znodes.acl_resource_path(key)
        added, removed = frozenset(added), frozenset(removed)
        while True:
            try:
                data, stat = self.store.get(path)
                current = znodes.decode_acls(key, data)
                version = stat.version
            except NoNodeError:
                current, version = frozenset(), -1
            wanted = (current | added) - removed
            if wanted == current:
                return current
            try:
                if version < 0:
                    self.store.ensure_path(path.rsplit("/", 1)[0])
                    self.store.create(path, znodes.encode_acls(key, wanted))
                elif wanted:
                    self.store.set(path, znodes.encode_acls(key, wanted), version)
                else:
                    self.store.delete(path, version)
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker changed it meanwhile: again, from what it wrote
            prefix, notification = znodes.encode_acl_change(key)
            self.store.create(prefix, notification, sequence=True)
            return wanted

    def read_acl_changes(
        self,
        after_literal: str | None,
        after_extended: str | None,
        watch_literal: Watch | None = None,
        watch_extended: Watch | None = None,
    ) -> AclChanges:
        """The resources named by change notifications newer than those seen."""
        resources: dict[znodes.AclResourceKey, None] = {}
        last: list[str | None] = []
        for base, after, watch, extended in (
            (znodes.ACL_LITERAL_CHANGES_PATH, after_literal, watch_literal, False),
            (znodes.ACL_EXTENDED_CHANGES_PATH, after_extended, watch_extended, True),
        ):
            children = sorted(self.store.get_children(base, watch=watch))
            newer = [child for child in children if after is None or child > after]
            for child, entry in zip(
                newer, self.store.get_many([f"{base}/{child}" for child in newer]), strict=True
            ):
                if entry is not None:
                    resources[znodes.decode_acl_change(f"{base}/{child}", entry[0], extended)] = None
            last.append(newer[-1] if newer else after)
        return AclChanges(tuple(resources), last[0], last[1])


def _setter(event: threading.Event) -> Watch:
    def fire(_watch_event: WatchEvent) -> None:
        event.set()

    return fire


def _in_use_message(node_id: int, data: bytes, waited_ms: int) -> str:
    try:
        holder = znodes.decode_broker(node_id, data, -1)
        where = f" by a broker at {holder.host}:{holder.port}"
        if holder.timestamp_ms:
            where += f" (registered at {holder.timestamp_ms} ms since the epoch)"
    except znodes.ZnodeFormatError:
        where = ""
    return (
        f"node id {node_id} is already registered in ZooKeeper{where}, and that registration did not "
        f"expire within {waited_ms} ms: another live broker uses this node id. Give every broker its "
        f"own --node-id."
    )
