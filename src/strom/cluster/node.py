"""A broker's cluster thread: its ZooKeeper session, its registration, and the controller driver.

One thread per broker owns everything that talks to ZooKeeper, so the pure controller is stepped
from one thread only and the broker's event loop never blocks on ZooKeeper. Work reaches the
thread through one queue, in order:

* ZooKeeper watches and session events (posted from the ZooKeeper client's thread);
* requests addressed to the controller (AlterPartition, ControlledShutdown, ElectLeaders), posted
  by the event loop as controller events (``post``);
* ZooKeeper work for the broker's admin requests (create a topic, change a config, take a block of
  producer ids), whose result comes back as a ``concurrent.futures.Future`` (``submit``);
* ``Tick`` for the controller every ``tick_interval_ms``.

What comes out is handed to ``NodeOutputs`` callables on this thread; the broker's versions post
them to its event loop. No asyncio and no sockets here (the import contract says so): the loop
side is ``strom.broker.cluster``.

**Session expiry.** The ephemeral registration and every watch die with the session. When the
ZooKeeper client reports a new session after an expiry, the thread resigns the controllership if
it held it, registers again (a new broker epoch, told to the broker through
``on_registered``), watches again and competes for the controllership again; the controller
handles it as a bounced broker. The broker keeps serving meanwhile.

**Watches.** A newer watch on the same thing supersedes an older one: the older one's
notification is dropped (the read that armed the newer one saw that change already), so reading
again never piles watches up. The controller reads brokers, topics and deletions again every
``RESYNC_TICKS`` ticks and after a reconnection (``ControllerDriver.resync``): a notification
lost anywhere between ZooKeeper and this thread costs at most that interval, never the
controller's hearing for good. Ticks come on time however busy the queue is.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from strom.base.clock import Clock
from strom.cluster import znodes
from strom.cluster.actions import BrokerCommand, ControllerReply, UncleanElection
from strom.cluster.config import ControllerConfig
from strom.cluster.controller import Controller
from strom.cluster.controller_driver import CONTROLLER_WATCH, ControllerDriver
from strom.cluster.events import ControllerEvent, Tick
from strom.cluster.model import BrokerRegistration
from strom.cluster.zk_store import (
    ConnectionLossError,
    SessionEvent,
    Watch,
    WatchEvent,
    ZkError,
    ZkStore,
    zk_error_text,
)
from strom.cluster.zookeeper import ClusterZooKeeper

log = logging.getLogger("strom.cluster.node")

T = TypeVar("T")

CONFIG_CHANGES_WATCH = "config-changes"
# ACL change notifications (Kafka keeps literal and prefixed ones apart); read only by a broker
# that authorizes (``ClusterNode(watch_acls=True)``).
ACL_LITERAL_CHANGES_WATCH = "acl-changes"
ACL_EXTENDED_CHANGES_WATCH = "acl-extended-changes"
ACL_WATCHES = (ACL_LITERAL_CHANGES_WATCH, ACL_EXTENDED_CHANGES_WATCH)
# Joining asks again this long after a lost connection (kazoo holds a call until it reconnects or
# fails it at once; the pause keeps a call that fails at once from spinning).
JOIN_RETRY_BACKOFF_MS = 200
# Every this many ticks the controller checks its watches against ZooKeeper (see the docstring).
RESYNC_TICKS = 5


@dataclass
class NodeOutputs:
    """Where the cluster thread's results go (each called on the cluster thread)."""

    # A command of this broker's controller for a broker, with that broker's registration (its
    # address), or None when the controller no longer knows it.
    command: Callable[[BrokerCommand, BrokerRegistration | None], None]
    # The controller's answer to a request it was posted.
    reply: Callable[[ControllerReply], None]
    # This broker took (True) or left (False) the controllership, and the controller epoch.
    controller: Callable[[bool, int], None]
    # The controller's live brokers changed (only while this broker is the controller).
    live_brokers: Callable[[Mapping[int, BrokerRegistration]], None]
    # This broker registered again after its session expired: the registration with its new epoch.
    registered: Callable[[BrokerRegistration], None]
    # Topic configs changed in ZooKeeper: topic -> its overrides now.
    topic_configs: Callable[[Mapping[str, Mapping[str, str]]], None]
    unclean_election: Callable[[UncleanElection], None] = lambda election: None
    # ACLs read from ZooKeeper (``watch_acls`` only): resource -> its entries now; ``True`` when
    # they are every ACL there is (on joining), ``False`` for the resources a notification named.
    acls: Callable[[Mapping[znodes.AclResourceKey, frozenset[znodes.AclEntryText]], bool], None] = (
        lambda acls, whole: None
    )
    # Users named by config change notifications (``users/<user>``): each one's configs now (its
    # SCRAM credentials, beside its quotas), None for a user whose znode is gone.
    user_configs: Callable[[Mapping[str, Mapping[str, str] | None]], None] = lambda users: None
    # Client quotas changed in ZooKeeper: every entity's quotas now.
    client_quotas: Callable[[Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]]], None] = (
        lambda quotas: None
    )
    # Groups named by config change notifications (``groups/<group>``): each one's configs now
    # (empty: removed).
    group_configs: Callable[[Mapping[str, Mapping[str, str]]], None] = lambda groups: None


class ClusterNode:
    def __init__(
        self,
        store: ZkStore,
        registration: BrokerRegistration,
        controller_config: ControllerConfig,
        clock: Clock,
        outputs: NodeOutputs,
        *,
        stale_registration_wait_ms: int,
        tick_interval_ms: int = 1_000,
        join_retry_ms: int = 0,
        watch_acls: bool = False,
    ) -> None:
        self.store = store
        self._watch_acls = watch_acls
        self._acl_changes_seen: tuple[str | None, str | None] = (None, None)
        self.zk = ClusterZooKeeper(store, clock)
        self.registration = registration
        self._outputs = outputs
        self._stale_wait_ms = stale_registration_wait_ms
        self._join_retry_ms = join_retry_ms
        self._tick_interval_s = tick_interval_ms / 1000
        self._queue: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._session_lost = False
        self._config_changes_seen: str | None = None
        self._controller_epoch = -1
        self._live_brokers: Mapping[int, BrokerRegistration] = {}
        # The newest watch of each kind (see ``_watch``), and the kinds whose notification waits
        # in the queue.
        self._watch_generations: dict[str, int] = {}
        self._queued_watches: set[str] = set()
        self._ticks = 0
        self.cluster_id = ""
        self.driver = ControllerDriver(
            self.zk,
            Controller(registration.node_id, controller_config, clock),
            watch=self._watch,
            send=self._send,
            reply=outputs.reply,
            on_unclean=outputs.unclean_election,
        )
        store.add_listener(self._on_session_event)

    @property
    def node_id(self) -> int:
        return self.registration.node_id

    @property
    def is_controller(self) -> bool:
        return self.driver.lease is not None

    # ---- starting and stopping -------------------------------------------------------------------

    def join(self, proposed_cluster_id: str | None = None) -> str:
        """Create the layout, read (or write) the cluster id and register this broker; blocks the
        caller. Raises BrokerIdInUseError when another live broker has this node id, ZkError when
        ZooKeeper fails. Returns the cluster id.

        A connection lost on the way (a ZooKeeper server restarting while this broker starts) is
        waited out for up to ``join_retry_ms``, then every step is done again: each is idempotent
        within the session (the layout and the cluster id are created only where missing, and a
        registration this session already holds is taken as it is)."""
        deadline = time.monotonic() + self._join_retry_ms / 1000
        while True:
            try:
                self.zk.ensure_layout()
                self.cluster_id = self.zk.ensure_cluster_id(proposed_cluster_id)
                self.registration = self.zk.register_broker(
                    self.registration, stale_wait_ms=self._stale_wait_ms
                )
                watch = self._watch(CONFIG_CHANGES_WATCH)
                self._config_changes_seen = self.zk.read_config_changes(watch=watch).last
                if self._watch_acls:
                    self._read_all_acls()
                return self.cluster_id
            except ConnectionLossError as error:
                if time.monotonic() >= deadline:
                    raise
                log.info("joining the cluster: %s; trying again", zk_error_text(error))
                time.sleep(JOIN_RETRY_BACKOFF_MS / 1000)

    def start(self) -> None:
        """Start the thread; it competes for the controllership at once."""
        assert self._thread is None, "started twice"
        self._thread = threading.Thread(target=self._run, name=f"strom-cluster-{self.node_id}", daemon=True)
        self._thread.start()
        self._queue.put(("elect", None))

    def stop(self, timeout_s: float = 10.0) -> None:
        """Resign the controllership, deregister and end the session (a clean shutdown: the
        others see this broker go at once instead of after the session timeout)."""
        if self._thread is not None:
            self._queue.put(("stop", None))
            self._thread.join(timeout_s)
            self._thread = None
        else:
            self._leave()

    def _leave(self) -> None:
        self._stopping = True
        try:
            if self.driver.lease is not None:
                self.driver.resign("this broker is stopping")
            self.zk.deregister_broker(self.node_id)
        except ZkError as error:
            log.warning("leaving the cluster: %s", zk_error_text(error))
        finally:
            self.store.close()

    # ---- the loop side's entry points (any thread) ----------------------------------------------

    def post(self, event: ControllerEvent) -> None:
        """A request for the controller; its reply comes out of ``outputs.reply``."""
        self._queue.put(("event", event))

    def submit(self, work: Callable[[ClusterZooKeeper], T]) -> concurrent.futures.Future[T]:
        """Run ``work`` on the cluster thread (ZooKeeper calls block there, never on the loop)."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._queue.put(("work", (work, future)))
        return future

    # ---- the thread ----------------------------------------------------------------------------------

    def _watch(self, kind: str) -> Watch:
        """A watch of ``kind`` that supersedes the earlier ones of that kind: when one of those
        fires, nothing is queued (the read arming this one saw that change already)."""
        generation = self._watch_generations.get(kind, 0) + 1
        self._watch_generations[kind] = generation

        def fire(_event: WatchEvent) -> None:
            if self._watch_generations.get(kind) != generation:
                return
            self._queued_watches.add(kind)
            self._queue.put(("watch", kind))

        return fire

    def _on_session_event(self, event: SessionEvent) -> None:
        self._queue.put(("session", event))

    def _run(self) -> None:
        next_tick = time.monotonic() + self._tick_interval_s
        while True:
            now = time.monotonic()
            if now >= next_tick:
                # On time even when the queue never empties (ISR proposals under load).
                kind, item = "tick", None
                next_tick = now + self._tick_interval_s
            else:
                try:
                    kind, item = self._queue.get(timeout=next_tick - now)
                except queue.Empty:
                    continue
            if kind == "stop":
                self._leave()
                return
            was_controller = self.driver.lease is not None
            try:
                self._handle(kind, item)
            except Exception:
                log.exception("the cluster thread failed on %s", kind)
            if was_controller and self.driver.lease is None and not self._session_lost and not self._stopping:
                # Resigned after a failed ZooKeeper call, perhaps without removing /controller
                # (still ours while the session lives): compete again soon, whatever the watch does.
                self._retry_later("elect")
            self._report_controller()

    def _handle(self, kind: str, item: Any) -> None:
        if kind == "work":
            work, future = item
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(work(self.zk))
            except BaseException as error:
                future.set_exception(error)
        elif kind == "event":
            self.driver.handle(item)
        elif kind == "watch":
            self._queued_watches.discard(item)
            if item == CONFIG_CHANGES_WATCH:
                self._read_config_changes()
            elif item in ACL_WATCHES:
                self._read_acl_changes()
            elif item == CONTROLLER_WATCH:
                # Competing again arms the watch again; when ZooKeeper fails it is tried again
                # (a broker that lost this watch would never compete again).
                self._elect()
            else:
                self.driver.refresh(item)
        elif kind == "tick":
            self._ticks += 1
            if self.driver.lease is not None:
                self.driver.handle(Tick())
                if self._ticks % RESYNC_TICKS == 0:
                    self._resync()

        elif kind == "elect":
            self._elect()
        elif kind == "session":
            self._session_changed(item)
        elif kind == "rejoin" and self._session_lost and not self._stopping:
            self._rejoin()

    def _elect(self) -> None:
        try:
            self.driver.elect()
        except ZkError as error:
            log.warning("competing for the controllership failed (%s); trying again", zk_error_text(error))
            self._retry_later("elect")

    def _retry_later(self, kind: str, item: Any = None) -> None:
        timer = threading.Timer(self._tick_interval_s, lambda: self._queue.put((kind, item)))
        timer.daemon = True
        timer.start()

    def _session_changed(self, event: SessionEvent) -> None:
        if event is SessionEvent.EXPIRED:
            self._session_lost = True
            log.warning("broker %d: the ZooKeeper session expired", self.node_id)
            if self.driver.lease is not None:
                self.driver.resign("the ZooKeeper session expired")
            return
        if event is SessionEvent.CONNECTED and self._session_lost and not self._stopping:
            self._rejoin()
        elif event is SessionEvent.CONNECTED:
            # The same session again: the watches lost with the connection fire RECONNECTED;
            # check them all the same.
            self._resync()
            self._read_config_changes()
            if self._watch_acls:
                self._read_acl_changes()

    def _resync(self) -> None:
        self.driver.resync(skip=frozenset(self._queued_watches))

    def _rejoin(self) -> None:
        try:
            self.registration = self.zk.register_broker(self.registration, stale_wait_ms=self._stale_wait_ms)
        except ZkError as error:
            log.warning(
                "registering again after the session expired failed (%s); trying again", zk_error_text(error)
            )
            self._retry_later("rejoin")
            return
        self._session_lost = False
        log.info("broker %d registered again (broker epoch %d)", self.node_id, self.registration.epoch)
        self._outputs.registered(self.registration)
        self._elect()
        # The watches of the expired session are gone: what changed meanwhile is read now (the
        # notifications stay in ZooKeeper), and the watches set again.
        self._read_config_changes()
        if self._watch_acls:
            self._read_acl_changes()

    def _read_all_acls(self) -> None:
        """Every ACL, after arming the change watches (a change meanwhile is read again)."""
        changes = self.zk.read_acl_changes(
            None, None, self._watch(ACL_LITERAL_CHANGES_WATCH), self._watch(ACL_EXTENDED_CHANGES_WATCH)
        )
        self._acl_changes_seen = (changes.last_literal, changes.last_extended)
        self._outputs.acls(self.zk.read_all_acls(), True)

    def _read_acl_changes(self) -> None:
        try:
            changes = self.zk.read_acl_changes(
                *self._acl_changes_seen,
                self._watch(ACL_LITERAL_CHANGES_WATCH),
                self._watch(ACL_EXTENDED_CHANGES_WATCH),
            )
            self._acl_changes_seen = (changes.last_literal, changes.last_extended)
            if not changes.resources:
                return
            acls = self.zk.read_acls(list(changes.resources))
        except ZkError as error:
            log.warning("reading ACL changes failed (%s); trying again", zk_error_text(error))
            self._retry_later("watch", ACL_LITERAL_CHANGES_WATCH)
            return
        self._outputs.acls(acls, False)

    def _read_config_changes(self) -> None:
        try:
            changes = self.zk.read_config_changes(
                self._config_changes_seen, watch=self._watch(CONFIG_CHANGES_WATCH)
            )
            if changes.quotas:
                self._outputs.client_quotas(self.zk.read_client_quotas())
            if changes.users:
                self._outputs.user_configs({user: self.zk.read_user_config(user) for user in changes.users})
            if changes.groups:
                self._outputs.group_configs(
                    {group: self.zk.read_group_config(group) for group in changes.groups}
                )
            configs = self.zk.read_topic_configs(list(changes.topics)) if changes.topics else {}
        except ZkError as error:
            # Its watch may not be set again: read again soon, whatever ZooKeeper says then. The
            # notifications count as seen only once all they name is read: the retry reads it all
            # again (an output given twice is the same state given twice).
            log.warning("reading config changes failed (%s); trying again", zk_error_text(error))
            self._retry_later("watch", CONFIG_CHANGES_WATCH)
            return
        self._config_changes_seen = changes.last
        if not changes.topics:
            return
        self._outputs.topic_configs({topic: configs.get(topic, {}) for topic in changes.topics})
        for topic in changes.topics:
            self.driver.refresh_topic_config(topic)

    def _send(self, command: BrokerCommand) -> None:
        self._outputs.command(command, self.driver.controller.live_brokers.get(command.broker_id))

    def _report_controller(self) -> None:
        lease = self.driver.lease
        epoch = lease.epoch if lease is not None else -1
        if epoch != self._controller_epoch:
            self._controller_epoch = epoch
            self._live_brokers = {}
            self._outputs.controller(lease is not None, epoch)
        if lease is not None:
            live = self.driver.controller.live_brokers
            if live != self._live_brokers:
                self._live_brokers = dict(live)
                self._outputs.live_brokers(self._live_brokers)
