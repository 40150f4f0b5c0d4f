"""Runs the pure controller against ZooKeeper: the loop around ``step`` and ``ready``.

One driver per broker, used from one thread (the broker's controller thread; a test's own). It
competes for the controllership, turns watch notifications into controller events by reading
ZooKeeper again, carries out the controller's writes and feeds their outcomes back, and hands
commands and replies to the callables it was given (the broker sends them over its connections).

Watches fire on the ZooKeeper client's thread; ``watch(kind)`` must return a callback that only
*posts* the kind to the owner's queue, whose loop then calls ``refresh(kind)`` on this thread.
Kinds: ``"controller"``, ``"brokers"``, ``"topics"``, ``"deletions"``, ``"topic:<name>"``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from strom.cluster.actions import BrokerCommand, ControllerReply, UncleanElection
from strom.cluster.controller import Controller
from strom.cluster.events import (
    Activated,
    BrokersChanged,
    ControllerEvent,
    DeletionsRequested,
    Resigned,
    TopicConfigChanged,
    TopicsChanged,
    WritesCompleted,
)
from strom.cluster.model import TopicAssignment
from strom.cluster.zk_store import Watch, ZkError, zk_error_text
from strom.cluster.zookeeper import ClusterZooKeeper, ControllerLease, ControllerMovedError

log = logging.getLogger("strom.cluster.controller")

CONTROLLER_WATCH = "controller"
BROKERS_WATCH = "brokers"
TOPICS_WATCH = "topics"
DELETIONS_WATCH = "deletions"
TOPIC_WATCH_PREFIX = "topic:"


class ControllerDriver:
    def __init__(
        self,
        zookeeper: ClusterZooKeeper,
        controller: Controller,
        *,
        watch: Callable[[str], Watch],
        send: Callable[[BrokerCommand], None],
        reply: Callable[[ControllerReply], None],
        on_unclean: Callable[[UncleanElection], None] = lambda election: None,
    ) -> None:
        self._zk = zookeeper
        self.controller = controller
        self._watch = watch
        self._send = send
        self._reply = reply
        self._on_unclean = on_unclean
        self.lease: ControllerLease | None = None
        self._topics: dict[str, TopicAssignment] = {}
        self._watched_topics: set[str] = set()

    @property
    def node_id(self) -> int:
        return self.controller.node_id

    def elect(self) -> bool:
        """Compete for the controllership (and watch ``/controller`` to compete again when it goes)."""
        holder = self._zk.read_controller(watch=self._watch(CONTROLLER_WATCH))
        if holder is not None and holder != self.node_id:
            if self.lease is not None:
                self.resign("another broker is the controller")
            return False
        if holder is not None and self.lease is not None:
            return True
        lease = self._zk.try_become_controller(self.node_id)
        if lease is None:
            return False
        self.lease = lease
        self._watched_topics.clear()
        try:
            snapshot = self._zk.read_snapshot(
                brokers_watch=self._watch(BROKERS_WATCH),
                topics_watch=self._watch(TOPICS_WATCH),
                deletions_watch=self._watch(DELETIONS_WATCH),
            )
        except ZkError as error:
            self.resign(f"could not read the cluster state: {zk_error_text(error)}")
            return False
        self._topics = dict(snapshot.topics)
        self._watch_topics()
        log.info("broker %d is the controller (epoch %d)", self.node_id, lease.epoch)
        self.handle(Activated(lease.epoch, lease.epoch_version, snapshot))
        return True

    def resign(self, reason: str) -> None:
        lease, self.lease = self.lease, None
        self.handle(Resigned(reason))
        if lease is not None:
            try:
                self._zk.resign_controller(lease)
            except ZkError as error:
                log.warning("could not remove /controller while resigning: %s", zk_error_text(error))

    def refresh(self, kind: str) -> None:
        """A watch fired: read what it watched (arming it again) and tell the controller."""
        if kind == CONTROLLER_WATCH:
            self.elect()
            return
        if self.lease is None:
            return
        try:
            if kind == BROKERS_WATCH:
                self.handle(BrokersChanged(self._zk.read_live_brokers(watch=self._watch(BROKERS_WATCH))))
            elif kind == TOPICS_WATCH:
                names = self._zk.read_topic_names(watch=self._watch(TOPICS_WATCH))
                self._topics = {name: self._topics[name] for name in names if name in self._topics}
                self._topics.update(
                    self._zk.read_topics([name for name in names if name not in self._topics])
                )
                self._watched_topics &= set(names)
                self._watch_topics()
                self.handle(TopicsChanged(dict(self._topics)))
            elif kind == DELETIONS_WATCH:
                self.handle(
                    DeletionsRequested(self._zk.read_topics_to_delete(watch=self._watch(DELETIONS_WATCH)))
                )
            elif kind.startswith(TOPIC_WATCH_PREFIX):
                name = kind[len(TOPIC_WATCH_PREFIX) :]
                assignment = self._zk.read_topic(name, watch=self._watch(kind))
                if assignment is None:
                    self._topics.pop(name, None)
                    self._watched_topics.discard(name)
                else:
                    self._topics[name] = assignment
                self.handle(TopicsChanged(dict(self._topics)))
        except ZkError as error:
            self.resign(f"ZooKeeper failed while reading after a watch: {zk_error_text(error)}")

    def resync(self, skip: frozenset[str] = frozenset()) -> None:
        """Read again what the brokers, topics and deletions watches report, and catch up where
        the controller's view differs (``skip``: kinds whose notification is queued already).

        A watch is the controller's only news of a broker coming or going, of a topic created or
        marked for deletion; one notification lost (a connection dropped at the wrong moment)
        would leave the controller deaf to it for good. Three small reads every few seconds bound
        that to the interval. A kind that differs is logged, then read again with a new watch, as
        if its watch had fired."""
        if self.lease is None:
            return
        missed: list[str] = []
        try:
            if BROKERS_WATCH not in skip and self._zk.read_live_brokers() != self.controller.live_brokers:
                missed.append(BROKERS_WATCH)
            if TOPICS_WATCH not in skip and set(self._zk.read_topic_names()) != set(self._topics):
                missed.append(TOPICS_WATCH)
            if (
                DELETIONS_WATCH not in skip
                and self._zk.read_topics_to_delete() != self.controller.topics_to_delete
            ):
                missed.append(DELETIONS_WATCH)
        except ZkError as error:
            self.resign(f"ZooKeeper failed while checking the watches: {zk_error_text(error)}")
            return
        for kind in missed:
            log.warning(
                "controller %d: ZooKeeper's %s differ from what the watch reported (a notification "
                "was lost or is late); reading them again",
                self.node_id,
                kind,
            )
            self.refresh(kind)

    def refresh_topic_config(self, name: str) -> None:
        if self.lease is None:
            return
        try:
            config = self._zk.read_topic_configs([name]).get(name, {})
        except ZkError as error:
            self.resign(f"ZooKeeper failed while reading the config of {name}: {zk_error_text(error)}")
            return
        self.handle(TopicConfigChanged(name, config))

    def _watch_topics(self) -> None:
        for name in sorted(set(self._topics) - self._watched_topics):
            self._watched_topics.add(name)
            kind = TOPIC_WATCH_PREFIX + name
            assignment = self._zk.read_topic(name, watch=self._watch(kind))
            if assignment is not None:
                self._topics[name] = assignment

    def handle(self, event: ControllerEvent) -> None:
        """Step the controller and carry out everything it asks, until it asks nothing more."""
        self.controller.step(event)
        while True:
            ready = self.controller.ready()
            if not ready:
                return
            for notice in ready.notices:
                log.info("%s", notice)
            for election in ready.unclean_elections:
                log.warning(
                    "unclean leader election: %s led by broker %d in epoch %d; acknowledged records may be lost",
                    election.topic_partition,
                    election.leader,
                    election.leader_epoch,
                )
                self._on_unclean(election)
            for command in ready.commands:
                self._send(command)
            for reply in ready.replies:
                self._reply(reply)
            if not ready.writes:
                continue
            lease = self.lease
            if lease is None:
                continue
            try:
                outcomes = self._zk.apply_controller_writes(lease, ready.writes)
            except (ControllerMovedError, ZkError) as error:
                # Deposed, or the outcome of the writes is unknown: start over from a full read,
                # by whichever broker wins the next election (perhaps this one).
                self.lease = None
                self.controller.step(Resigned(str(error)))
                with contextlib.suppress(ZkError):
                    self._zk.resign_controller(lease)
                continue
            self.controller.step(WritesCompleted(tuple(outcomes)))
