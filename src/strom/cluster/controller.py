"""The controller: a pure state machine deciding who leads each partition.

``step(event)`` feeds an event in (see ``events``); ``ready()`` hands out what to do (see
``actions``): conditional ZooKeeper writes, commands to brokers, replies. The caller performs the
writes and steps ``WritesCompleted`` with their outcomes; no socket, thread or ZooKeeper client is
touched here, so every interleaving of failures can be replayed in a unit test.

**Level-triggered.** Events only update what the controller knows (live brokers, assignments,
states) and mark partitions *dirty*; then every dirty partition is reconciled against the rules
below, which are idempotent: once a partition's state obeys them, reconciling it again changes
nothing. A partition with a write in flight is *busy* and is reconciled again when its outcome
arrives — so a conflict (another writer got there first) is handled by adopting what ZooKeeper
holds and deciding again, never by guessing.

The rules, for a partition of a topic not being deleted:

1. no state yet (a new partition): its live replicas form the ISR, the first leads (epoch 0);
2. no leader, or a leader that is gone: ``election.elect_offline`` (clean first; unclean only if
   ``unclean.leader.election.enable`` for the topic or an ElectLeaders(unclean) asked for it);
3. a leader in controlled shutdown: ``election.elect_for_shutdown`` if another ISR member can lead;
4. a preferred election asked for (ElectLeaders, auto rebalance): the preferred replica if eligible;
5. a reassignment (see below) whose joining replicas are all in the ISR: it ends;
6. the ISR without gone or shutting-down followers, or members no longer among the replicas (the
   leader stays; the epoch does not move).

**Reassignments** (AlterPartitionReassignments, KIP-455 as Kafka's ZooKeeper controller runs them).
The topic's assignment is written first with the partition's replicas = target + original ones
leaving, and its ``adding`` and ``removing`` members; then its state is written again (only the
partition epoch moves) so that every replica hears of the new set: the joining ones start
following and the leader counts them. Once every joining replica is in the ISR the reassignment
ends: a state with the ISR cut to the target and a new leader epoch (a new leader from the target
if the leader leaves), then the assignment without the leaving replicas, then StopReplica(delete)
to those. A cancellation is a reassignment back to the original replicas (none joins: it ends at
once). Assignment writes are conditional on the topic znode's version and one per topic at a
time; a conflicting write (partitions added meanwhile) is adopted and the assignment written again.

A leader change always bumps the leader epoch; an ISR change alone does not (only the partition
epoch, the znode version, moves). Every write carries the version it replaces.

**Fencing.** Writes are fenced by the controller epoch (the shell wraps them with a check of
``/controller_epoch``); commands carry the controller epoch and the addressee's broker epoch, which
brokers check. A controller whose write fails the fence is stepped ``Resigned`` and forgets all.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from strom.base.clock import Clock
from strom.cluster import election, znodes
from strom.cluster.actions import (
    AlterPartitionReply,
    AlterPartitionResult,
    ControlledShutdownReply,
    ControllerReady,
    ControllerReply,
    ControllerWrite,
    ElectLeadersReply,
    LeaderAndIsrCommand,
    OngoingReassignment,
    PartitionInfo,
    ReassignmentsListReply,
    ReassignmentsReply,
    StopPartition,
    StopReplicaCommand,
    UncleanElection,
    UpdateMetadataCommand,
    WriteOutcome,
)
from strom.cluster.config import ControllerConfig
from strom.cluster.events import (
    Activated,
    AlterPartitionItem,
    AlterPartitionReceived,
    BrokersChanged,
    ControlledShutdownReceived,
    ControllerEvent,
    DeletionsRequested,
    ElectionType,
    ElectLeadersReceived,
    ReassignmentsListed,
    ReassignmentsReceived,
    Resigned,
    Tick,
    TopicConfigChanged,
    TopicsChanged,
    WritesCompleted,
)
from strom.cluster.model import (
    LEADER_DURING_DELETE,
    NO_LEADER,
    BrokerRegistration,
    LeaderAndIsr,
    PartitionState,
    TopicAssignment,
    TopicPartition,
    replica_list_fault,
)
from strom.cluster.zk_store import Create, Delete, NoNodeError, SetData, Stat
from strom.protocol.errors import ErrorCode

UNCLEAN_CONFIG_KEY = "unclean.leader.election.enable"
# StopReplica's leader epoch for a partition being deleted (Kafka's EpochDuringDelete).
EPOCH_DURING_DELETE = -2


def partition_write_key(tp: TopicPartition) -> str:
    return f"partition/{tp.topic}/{tp.partition}"


def delete_topic_write_key(topic: str) -> str:
    return f"delete-topic/{topic}"


def assignment_write_key(topic: str) -> str:
    return f"assignment/{topic}"


@dataclass
class _PartitionWrite:
    tp: TopicPartition
    new: LeaderAndIsr
    notify_replicas: bool  # send LeaderAndIsr (an AlterPartition's leader learns from its reply)
    unclean: bool
    ends_reassignment_to: tuple[int, ...] | None = None  # the target of the reassignment it ends


@dataclass
class _AssignmentWrite:
    written: TopicAssignment


@dataclass
class _Waiter:
    partitions: frozenset[TopicPartition]
    finish: Callable[[], ControllerReply]
    refusal: ControllerReply  # the answer if this controller resigns first
    topics: frozenset[str] = frozenset()  # topics whose assignment must be written first


class Controller:
    def __init__(self, node_id: int, config: ControllerConfig, clock: Clock) -> None:
        self.node_id = node_id
        self._config = config
        self._clock = clock
        self._reset()

    def _reset(self) -> None:
        self.active = False
        self.epoch = 0
        self.epoch_version = -1
        self._brokers: dict[int, BrokerRegistration] = {}
        self._shutting_down: set[int] = set()
        self._topics: dict[str, TopicAssignment] = {}
        self._topic_names: dict[uuid.UUID, str] = {}
        self._states: dict[TopicPartition, PartitionState] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._delete_markers: set[str] = set()
        self._deleting: set[str] = set()  # being deleted: no elections, gone from metadata
        self._deletions_in_flight: set[str] = set()
        # Ids of topics this controller deleted, until no view of the topics names them any more:
        # a view read before the deletion (the driver's map, refreshed by one topic's watch while
        # the topics watch is not read yet) must not bring one back as a new topic.
        self._deleted_ids: set[uuid.UUID] = set()
        # Partitions whose state write found nothing in ZooKeeper (their topic gone): reconciled
        # again at the next Tick, not at once (a lasting failure must not spin).
        self._retry_on_tick: set[TopicPartition] = set()
        # write key -> partition write / assignment write / topic being deleted
        self._in_flight: dict[str, _PartitionWrite | _AssignmentWrite | str] = {}
        # Assignments as ZooKeeper last confirmed them, and the topics whose assignment here
        # (self._topics) differs and is to be written.
        self._confirmed: dict[str, TopicAssignment] = {}
        self._unwritten: set[str] = set()
        # Partitions whose replicas changed: their state is written again so every replica hears
        # (members joined: the partition epoch moves; members left: the leader epoch moves too,
        # fencing them, unless the state ending a reassignment did already: _fenced_for).
        self._replicas_changed: set[TopicPartition] = set()
        self._replicas_dropped: set[TopicPartition] = set()
        self._fenced_for: dict[TopicPartition, tuple[int, ...]] = {}
        # States AlterPartition asked for, as written (the answer names them even when another
        # write, such as the end of a reassignment, followed at once).
        self._isr_written: dict[TopicPartition, PartitionState] = {}
        self._busy: set[TopicPartition] = set()
        self._dirty: set[TopicPartition] = set()
        self._preferred_wanted: set[TopicPartition] = set()
        self._unclean_wanted: set[TopicPartition] = set()
        self._waiters: list[_Waiter] = []
        self._next_rebalance_check_ms = 0
        # What ready() will hand out.
        self._writes: list[ControllerWrite] = []
        self._leader_and_isr: dict[int, set[TopicPartition]] = {}
        self._leader_and_isr_full: set[int] = set()
        self._update_metadata: dict[int, set[TopicPartition]] = {}
        self._update_metadata_all: set[int] = set()
        self._deleted_for_metadata: dict[TopicPartition, PartitionInfo] = {}
        self._stop_replica: dict[int, list[StopPartition]] = {}
        self._replies: list[ControllerReply] = []
        self._unclean: list[UncleanElection] = []
        self._notices: list[str] = []

    # ---- queries --------------------------------------------------------------------------------

    def partition_state(self, tp: TopicPartition) -> PartitionState | None:
        return self._states.get(tp)

    def topic(self, name: str) -> TopicAssignment | None:
        return self._topics.get(name)

    @property
    def live_brokers(self) -> dict[int, BrokerRegistration]:
        return dict(self._brokers)

    @property
    def shutting_down(self) -> frozenset[int]:
        return frozenset(self._shutting_down)

    @property
    def topics_to_delete(self) -> frozenset[str]:
        """The deletion markers under ``/admin/delete_topics`` as last reported."""
        return frozenset(self._delete_markers)

    def offline_partitions(self) -> list[TopicPartition]:
        return sorted(
            tp
            for tp, state in self._states.items()
            if state.leader == NO_LEADER and tp.topic not in self._deleting
        )

    # ---- input ----------------------------------------------------------------------------------

    def step(self, event: ControllerEvent) -> None:
        if isinstance(event, Activated):
            self._activate(event)
        elif isinstance(event, Resigned):
            self._resign(event.reason)
            return
        elif not self.active:
            self._refuse(event)
            return
        elif isinstance(event, BrokersChanged):
            self._brokers_changed(event)
        elif isinstance(event, TopicsChanged):
            self._topics_changed(event)
        elif isinstance(event, DeletionsRequested):
            self._delete_markers = set(event.topics)
            self._start_deletions()
        elif isinstance(event, TopicConfigChanged):
            self._configs[event.topic] = dict(event.config)
            assignment = self._topics.get(event.topic)
            if assignment is not None:
                self._dirty.update(assignment.partitions())
        elif isinstance(event, WritesCompleted):
            self._writes_completed(event.outcomes)
        elif isinstance(event, AlterPartitionReceived):
            self._alter_partition(event)
        elif isinstance(event, ControlledShutdownReceived):
            self._controlled_shutdown(event)
        elif isinstance(event, ElectLeadersReceived):
            self._elect_leaders(event)
        elif isinstance(event, ReassignmentsReceived):
            self._reassign(event)
        elif isinstance(event, ReassignmentsListed):
            self._list_reassignments(event)
        elif isinstance(event, Tick):
            self._dirty.update(tp for tp in self._retry_on_tick if tp.topic in self._topics)
            self._retry_on_tick.clear()
            self._start_deletions()
            self._maybe_rebalance()
        self._reconcile()
        self._finish_waiters()

    def _refuse(self, event: ControllerEvent) -> None:
        if isinstance(event, AlterPartitionReceived):
            self._replies.append(AlterPartitionReply(event.key, ErrorCode.NOT_CONTROLLER))
        elif isinstance(event, ControlledShutdownReceived):
            self._replies.append(ControlledShutdownReply(event.key, ErrorCode.NOT_CONTROLLER))
        elif isinstance(event, ElectLeadersReceived):
            self._replies.append(ElectLeadersReply(event.key, ErrorCode.NOT_CONTROLLER))
        elif isinstance(event, ReassignmentsReceived):
            self._replies.append(ReassignmentsReply(event.key, ErrorCode.NOT_CONTROLLER))
        elif isinstance(event, ReassignmentsListed):
            self._replies.append(ReassignmentsListReply(event.key, ErrorCode.NOT_CONTROLLER))

    # ---- taking and leaving office ------------------------------------------------------------------

    def _activate(self, event: Activated) -> None:
        replies, notices = self._replies, self._notices
        self._reset()
        self._replies, self._notices = replies, notices
        self.active = True
        self.epoch = event.epoch
        self.epoch_version = event.epoch_version
        snapshot = event.snapshot
        self._brokers = dict(snapshot.brokers)
        for assignment in snapshot.topics.values():
            self._add_topic(assignment)
        self._states = {
            tp: state for tp, state in snapshot.partition_states.items() if tp.topic in self._topics
        }
        self._configs = {name: dict(config) for name, config in snapshot.topic_configs.items()}
        self._delete_markers = set(snapshot.topics_to_delete)
        for node_id in self._brokers:
            self._leader_and_isr_full.add(node_id)
            self._update_metadata_all.add(node_id)
        for assignment in self._topics.values():
            self._dirty.update(assignment.partitions())
            # The controller before may have stopped between writing a reassignment and telling
            # the replicas: they hear of it again.
            self._replicas_changed.update(
                TopicPartition(assignment.name, index)
                for index in assignment.replicas
                if assignment.reassigning(index)
            )
        self._next_rebalance_check_ms = (
            self._clock.monotonic_ms() + self._config.leader_imbalance_check_interval_ms
        )
        self._notices.append(f"controller {self.node_id} active with epoch {self.epoch}")
        self._start_deletions()

    def _resign(self, reason: str) -> None:
        was_active = self.active
        waiters, replies, notices = self._waiters, self._replies, self._notices
        self._reset()
        self._replies, self._notices = replies, notices
        self._replies.extend(waiter.refusal for waiter in waiters)
        if was_active:
            self._notices.append(f"controller {self.node_id} resigned: {reason}")

    # ---- brokers ------------------------------------------------------------------------------------

    def _partitions_on(self, node_ids: set[int]) -> set[TopicPartition]:
        found: set[TopicPartition] = set()
        for assignment in self._topics.values():
            for index, replicas in assignment.replicas.items():
                if node_ids.intersection(replicas):
                    found.add(TopicPartition(assignment.name, index))
        return found

    def _brokers_changed(self, event: BrokersChanged) -> None:
        new = dict(event.brokers)
        old = self._brokers
        gone = {node_id for node_id in old if node_id not in new}
        bounced = {node_id for node_id in old if node_id in new and new[node_id].epoch != old[node_id].epoch}
        arrived = {node_id for node_id in new if node_id not in old}
        updated = {node_id for node_id in old if node_id in new and new[node_id] != old[node_id]} - bounced
        if gone or bounced:
            # A bounced broker lost its in-memory state: handle it as gone, then as arrived.
            for node_id in gone | bounced:
                del self._brokers[node_id]
                self._shutting_down.discard(node_id)
            self._notices.append(f"brokers gone: {sorted(gone | bounced)}")
            self._dirty.update(self._partitions_on(gone | bounced))
            self._reconcile()
        for node_id in arrived | bounced | updated:
            self._brokers[node_id] = new[node_id]
        if arrived or bounced:
            self._notices.append(f"brokers arrived: {sorted(arrived | bounced)}")
            self._dirty.update(self._partitions_on(arrived | bounced))
            for node_id in arrived | bounced:
                self._leader_and_isr_full.add(node_id)
                self._update_metadata_all.add(node_id)
        if gone or bounced or arrived or updated:
            for node_id in self._brokers:
                self._update_metadata.setdefault(node_id, set())

    def _eligible(self) -> set[int]:
        return set(self._brokers) - self._shutting_down

    # ---- topics ---------------------------------------------------------------------------------------

    def _add_topic(self, assignment: TopicAssignment) -> None:
        self._topics[assignment.name] = assignment
        self._confirmed[assignment.name] = assignment
        self._topic_names[assignment.topic_id] = assignment.name

    def _forget_topic(self, name: str) -> None:
        assignment = self._topics.pop(name, None)
        if assignment is None:
            return
        self._topic_names.pop(assignment.topic_id, None)
        self._confirmed.pop(name, None)
        self._unwritten.discard(name)
        for tp in assignment.partitions():
            self._states.pop(tp, None)
            self._dirty.discard(tp)
            self._replicas_changed.discard(tp)
            self._replicas_dropped.discard(tp)
            self._fenced_for.pop(tp, None)
            self._preferred_wanted.discard(tp)
            self._unclean_wanted.discard(tp)
            for pending in (self._leader_and_isr, self._update_metadata):
                for partitions in pending.values():
                    partitions.discard(tp)
        self._configs.pop(name, None)

    def _topics_changed(self, event: TopicsChanged) -> None:
        for name, assignment in event.topics.items():
            if assignment.topic_id in self._deleted_ids:
                continue  # read before this controller deleted it
            known = self._topics.get(name)
            if known is not None and known.topic_id != assignment.topic_id:
                # Deleted and created again between two reads: a different topic.
                self._forget_topic(name)
                known = None
            if known is None:
                self._add_topic(assignment)
                self._dirty.update(assignment.partitions())
                continue
            self._topic_read(known, assignment)
        for name in [name for name in self._topics if name not in event.topics]:
            if name not in self._deleting:
                self._notices.append(f"topic {name} vanished from ZooKeeper")
                self._broadcast_deletion(name)
            self._forget_topic(name)
        self._deleted_ids.intersection_update(assignment.topic_id for assignment in event.topics.values())

    def _topic_read(self, known: TopicAssignment, read: TopicAssignment) -> None:
        """ZooKeeper holds ``read`` for a topic this controller knows as ``known``: partitions
        added (CreatePartitions) are taken; the replicas of existing partitions are this
        controller's to change (reassignments), so a change of them made by hand is ignored, and
        one it has not written yet is written again over what ZooKeeper holds."""
        name = known.name
        if read.version <= self._confirmed[name].version and read.version != -1:
            return  # what this controller wrote, or older
        merged = dict(known.replicas)
        for index, replicas in read.replicas.items():
            if index not in merged:
                merged[index] = replicas
                self._dirty.add(TopicPartition(name, index))
            elif self._assignment_settled(name) and (
                merged[index],
                known.adding.get(index),
                known.removing.get(index),
            ) != (replicas, read.adding.get(index), read.removing.get(index)):
                # (Unsettled, the difference is this controller's change, about to be written.)
                self._notices.append(
                    f"ignored a change of the replicas of {name}-{index} made outside the controller "
                    f"({list(merged[index])} -> {list(replicas)}): AlterPartitionReassignments moves replicas"
                )
        adding = {index: members for index, members in read.adding.items() if index not in known.replicas}
        removing = {index: members for index, members in read.removing.items() if index not in known.replicas}
        adopted = TopicAssignment(
            name,
            known.topic_id,
            dict(sorted(merged.items())),
            read.version,
            {**known.adding, **adding},
            {**known.removing, **removing},
        )
        self._topics[name] = adopted
        self._confirmed[name] = read
        if _content(adopted) != _content(read) and not self._assignment_settled(name):
            self._unwritten.add(name)

    def _assignment_settled(self, topic: str) -> bool:
        """ZooKeeper holds this controller's assignment of ``topic`` (none to write or in flight)."""
        return topic not in self._unwritten and assignment_write_key(topic) not in self._in_flight

    def _start_deletions(self) -> None:
        """Delete every topic with a marker under /admin/delete_topics (again, if a try failed)."""
        for name in sorted(self._delete_markers):
            if name in self._deletions_in_flight:
                continue
            first_try = name not in self._deleting
            self._deleting.add(name)
            self._deletions_in_flight.add(name)
            assignment = self._topics.get(name)
            trees: tuple[str, ...] = ()
            if assignment is not None:
                trees = (znodes.topic_path(name), znodes.topic_config_path(name))
            if assignment is not None and first_try:
                self._broadcast_deletion(name)
                for tp in assignment.partitions():
                    self._dirty.discard(tp)
                    state = self._states.get(tp)
                    for replica in assignment.replicas[tp.partition]:
                        if replica in self._brokers:
                            self._stop_replica.setdefault(replica, []).append(
                                StopPartition(
                                    tp.topic,
                                    tp.partition,
                                    EPOCH_DURING_DELETE if state is not None else -1,
                                    delete=True,
                                )
                            )
            key = delete_topic_write_key(name)
            self._in_flight[key] = name
            self._writes.append(
                ControllerWrite(key, ops=(Delete(znodes.delete_topic_path(name)),), delete_trees=trees)
            )

    def _broadcast_deletion(self, name: str) -> None:
        assignment = self._topics.get(name)
        if assignment is None:
            return
        for tp in assignment.partitions():
            state = self._states.get(tp)
            self._deleted_for_metadata[tp] = PartitionInfo(
                tp.topic,
                tp.partition,
                assignment.topic_id,
                LEADER_DURING_DELETE,
                state.leader_epoch if state is not None else 0,
                state.isr if state is not None else (),
                state.version if state is not None else 0,
                assignment.replicas[tp.partition],
                self.epoch,
            )
        for node_id in self._brokers:
            self._update_metadata.setdefault(node_id, set())

    def _unclean_enabled(self, topic: str) -> bool:
        override = self._configs.get(topic, {}).get(UNCLEAN_CONFIG_KEY)
        if override is not None:
            return override.strip().lower() == "true"
        return self._config.unclean_leader_election_enable

    # ---- reconciliation ---------------------------------------------------------------------------------

    def _reconcile(self) -> None:
        if not self.active:
            return
        for tp in sorted(self._dirty):
            if tp in self._busy:
                continue
            self._dirty.discard(tp)
            self._reconcile_partition(tp)
        self._write_assignments()

    def _reconcile_partition(self, tp: TopicPartition) -> None:
        assignment = self._topics.get(tp.topic)
        if assignment is None or tp.topic in self._deleting or tp.partition not in assignment.replicas:
            self._preferred_wanted.discard(tp)
            self._unclean_wanted.discard(tp)
            return
        replicas = assignment.replicas[tp.partition]
        eligible = self._eligible()
        state = self._states.get(tp)
        if state is None:
            chosen = election.elect_for_new_partition(replicas, eligible)
            if chosen is not None:
                self._write_partition(tp, None, LeaderAndIsr(chosen.leader, 0, chosen.isr, self.epoch))
            return
        current = state.leader_and_isr
        if (
            current.leader == NO_LEADER
            or current.leader not in self._brokers
            or current.leader not in replicas
        ):
            unclean_allowed = tp in self._unclean_wanted or self._unclean_enabled(tp.topic)
            self._unclean_wanted.discard(tp)
            in_sync = tuple(replica for replica in current.isr if replica in replicas)
            chosen = election.elect_offline(replicas, in_sync, eligible, unclean_allowed=unclean_allowed)
            if chosen.leader == NO_LEADER and current.leader == NO_LEADER:
                self._preferred_wanted.discard(tp)
                if chosen.isr != current.isr:
                    self._write_partition(tp, state, current.with_isr(chosen.isr, self.epoch))
                return
            self._write_partition(
                tp, state, current.with_leader(chosen.leader, chosen.isr, self.epoch), unclean=chosen.unclean
            )
            return
        self._unclean_wanted.discard(tp)
        if current.leader in self._shutting_down:
            moved = election.elect_for_shutdown(replicas, current.isr, eligible, self._shutting_down)
            if moved is not None:
                self._write_partition(tp, state, current.with_leader(moved.leader, moved.isr, self.epoch))
                return
        if tp in self._preferred_wanted:
            self._preferred_wanted.discard(tp)
            preferred = election.preferred_leader(replicas, current.isr, eligible)
            if preferred is not None and preferred != current.leader:
                isr = tuple(r for r in current.isr if r in self._brokers)
                self._write_partition(tp, state, current.with_leader(preferred, isr, self.epoch))
                return
        if self._assignment_settled(assignment.name):
            # What follows needs the assignment in ZooKeeper first (Kafka's order of writes).
            if assignment.reassigning(tp.partition):
                ending = self._end_reassignment(tp, assignment, current)
                if ending is not None:
                    target, new = ending
                    self._replicas_changed.discard(tp)
                    self._write_partition(tp, state, new, ends_reassignment_to=target)
                    return
            if tp in self._replicas_dropped:
                # Replicas left without a reassignment ending (a cancellation, a change of
                # target): a new leader epoch fences them, the ISR loses them.
                self._replicas_dropped.discard(tp)
                self._replicas_changed.discard(tp)
                isr = tuple(replica for replica in current.isr if replica in replicas)
                self._write_partition(tp, state, current.with_leader(current.leader, isr, self.epoch))
                return
            if tp in self._replicas_changed:
                self._replicas_changed.discard(tp)
                self._write_partition(tp, state, current.with_isr(current.isr, self.epoch))
                return
        pruned = tuple(
            replica
            for replica in current.isr
            if replica == current.leader
            or (replica in self._brokers and replica not in self._shutting_down and replica in replicas)
        )
        if pruned != current.isr:
            self._write_partition(tp, state, current.with_isr(pruned, self.epoch))

    def _end_reassignment(
        self, tp: TopicPartition, assignment: TopicAssignment, current: LeaderAndIsr
    ) -> tuple[tuple[int, ...], LeaderAndIsr] | None:
        """The state that ends the partition's reassignment, with its target; None while a
        joining replica is not in the ISR yet (or no member of the target can lead)."""
        if not all(replica in current.isr for replica in assignment.adding.get(tp.partition, ())):
            return None
        target = assignment.target(tp.partition)
        isr = tuple(replica for replica in current.isr if replica in target)
        leader = current.leader
        if leader not in target:
            eligible = self._eligible()
            chosen = next((replica for replica in target if replica in isr and replica in eligible), None)
            if chosen is None:
                return None
            leader = chosen
        # A new leader epoch even when the leader stays, as Kafka's: the replicas leaving are fenced.
        return target, current.with_leader(leader, isr, self.epoch)

    def _write_partition(
        self,
        tp: TopicPartition,
        state: PartitionState | None,
        new: LeaderAndIsr,
        *,
        unclean: bool = False,
        notify_replicas: bool = True,
        ends_reassignment_to: tuple[int, ...] | None = None,
    ) -> None:
        data = znodes.encode_partition_state(tp.topic, tp.partition, new)
        path = znodes.partition_state_path(tp.topic, tp.partition)
        key = partition_write_key(tp)
        assert key not in self._in_flight, f"{tp} already has a write in flight"
        if state is None:
            write = ControllerWrite(
                key,
                ops=(Create(path, data),),
                parents=(znodes.partitions_path(tp.topic), znodes.partition_path(tp.topic, tp.partition)),
            )
        else:
            write = ControllerWrite(key, ops=(SetData(path, data, state.version),))
        self._in_flight[key] = _PartitionWrite(tp, new, notify_replicas, unclean, ends_reassignment_to)
        self._busy.add(tp)
        self._writes.append(write)

    def _writes_completed(self, outcomes: Iterable[WriteOutcome]) -> None:
        for outcome in outcomes:
            pending = self._in_flight.pop(outcome.key, None)
            if pending is None:
                continue
            if isinstance(pending, str):
                self._deletion_completed(pending, outcome)
                continue
            if isinstance(pending, _AssignmentWrite):
                self._assignment_written(pending.written, outcome)
                continue
            tp = pending.tp
            self._busy.discard(tp)
            self._dirty.add(tp)
            if tp.topic not in self._topics or tp.topic in self._deleting:
                continue
            if outcome.ok:
                assert outcome.results is not None
                last = outcome.results[-1]
                version = last.version if isinstance(last, Stat) else 0
                self._states[tp] = PartitionState(pending.new, version)
                if not pending.notify_replicas:
                    self._isr_written[tp] = self._states[tp]
                if pending.ends_reassignment_to is not None:
                    self._reassignment_ended(tp, pending.ends_reassignment_to)
                if pending.unclean:
                    self._unclean.append(UncleanElection(tp, pending.new.leader, pending.new.leader_epoch))
                    self._notices.append(
                        f"unclean election of {tp}: broker {pending.new.leader} leads epoch "
                        f"{pending.new.leader_epoch} from outside the ISR (acknowledged records may be lost)"
                    )
                self._announce(tp, to_replicas=pending.notify_replicas)
                continue
            self._notices.append(f"write of {tp} failed ({outcome.error!r}); adopting what ZooKeeper holds")
            if outcome.current is None:
                self._states.pop(tp, None)
                self._dirty.discard(tp)
                self._retry_on_tick.add(tp)
                continue
            data, version = outcome.current
            try:
                adopted = znodes.decode_partition_state(tp.topic, tp.partition, data)
            except znodes.ZnodeFormatError as error:
                self._notices.append(str(error))
                continue
            self._states[tp] = PartitionState(adopted, version)
            self._announce(tp, to_replicas=True)

    def _reassignment_ended(self, tp: TopicPartition, target: tuple[int, ...]) -> None:
        """The state ending a reassignment is written: the assignment drops the leaving replicas
        (unless the reassignment changed meanwhile: it goes on)."""
        assignment = self._topics[tp.topic]
        index = tp.partition
        if not assignment.reassigning(index) or assignment.target(index) != target:
            return
        self._topics[tp.topic] = replace(
            assignment,
            replicas={**assignment.replicas, index: target},
            adding={i: members for i, members in assignment.adding.items() if i != index},
            removing={i: members for i, members in assignment.removing.items() if i != index},
        )
        self._unwritten.add(tp.topic)
        self._fenced_for[tp] = target
        self._notices.append(f"reassignment of {tp} ends: replicas {list(target)}")

    def _write_assignments(self) -> None:
        """Write each assignment changed here, one write per topic at a time."""
        for name in sorted(self._unwritten):
            key = assignment_write_key(name)
            if key in self._in_flight:
                continue
            self._unwritten.discard(name)
            assignment = self._topics.get(name)
            if assignment is None or name in self._deleting:
                continue
            self._in_flight[key] = _AssignmentWrite(assignment)
            self._writes.append(
                ControllerWrite(
                    key,
                    ops=(
                        SetData(znodes.topic_path(name), znodes.encode_topic(assignment), assignment.version),
                    ),
                )
            )

    def _assignment_written(self, written: TopicAssignment, outcome: WriteOutcome) -> None:
        name = written.name
        known = self._topics.get(name)
        if known is None or known.topic_id != written.topic_id or name in self._deleting:
            return
        if not outcome.ok:
            self._notices.append(
                f"write of the assignment of {name} failed ({outcome.error!r}); writing it again"
            )
            self._unwritten.add(name)
            if outcome.current is not None:
                data, version = outcome.current
                try:
                    read = znodes.decode_topic(name, data, version)
                except znodes.ZnodeFormatError as error:
                    self._notices.append(str(error))
                    return
                if read.topic_id == known.topic_id:
                    self._topic_read(known, read)
                    self._unwritten.add(name)
            return
        assert outcome.results is not None
        last = outcome.results[-1]
        version = last.version if isinstance(last, Stat) else written.version + 1
        before = self._confirmed.get(name, written)
        confirmed = replace(written, version=version)
        self._confirmed[name] = confirmed
        self._topics[name] = replace(known, version=version)
        for index, replicas in written.replicas.items():
            tp = TopicPartition(name, index)
            if before.reassigning(index) or written.reassigning(index):
                self._dirty.add(tp)  # it may end now
            previous = before.replicas.get(index, replicas)
            if previous == replicas:
                continue
            self._dirty.add(tp)
            if any(replica not in previous for replica in replicas):
                self._replicas_changed.add(tp)
            if self._fenced_for.pop(tp, None) != replicas and any(r not in replicas for r in previous):
                self._replicas_dropped.add(tp)
            state = self._states.get(tp)
            for replica in previous:
                if replica not in replicas and replica in self._brokers:
                    self._stop_replica.setdefault(replica, []).append(
                        StopPartition(
                            name, index, state.leader_epoch if state is not None else -1, delete=True
                        )
                    )
            for node_id in self._brokers:
                self._update_metadata.setdefault(node_id, set()).add(tp)

    def _deletion_completed(self, name: str, outcome: WriteOutcome) -> None:
        self._deletions_in_flight.discard(name)
        if not outcome.ok and not isinstance(outcome.error, NoNodeError):
            # Tried again at the next Tick (not at once: a lasting failure must not spin).
            self._notices.append(f"deleting topic {name} failed ({outcome.error!r}); will retry")
            return
        self._deleting.discard(name)
        self._delete_markers.discard(name)
        deleted = self._topics.get(name)
        if deleted is not None:
            self._deleted_ids.add(deleted.topic_id)
        self._forget_topic(name)
        self._notices.append(f"topic {name} deleted")

    def _announce(self, tp: TopicPartition, *, to_replicas: bool) -> None:
        assignment = self._topics[tp.topic]
        if to_replicas:
            for replica in assignment.replicas[tp.partition]:
                if replica in self._brokers:
                    self._leader_and_isr.setdefault(replica, set()).add(tp)
        for node_id in self._brokers:
            self._update_metadata.setdefault(node_id, set()).add(tp)

    # ---- requests answered by the controller --------------------------------------------------------------

    def _broker_epoch_error(self, broker_id: int, broker_epoch: int) -> ErrorCode | None:
        registration = self._brokers.get(broker_id)
        if registration is None:
            return ErrorCode.BROKER_NOT_AVAILABLE
        if broker_epoch != -1 and broker_epoch != registration.epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        return None

    def _alter_partition(self, event: AlterPartitionReceived) -> None:
        error = self._broker_epoch_error(event.broker_id, event.broker_epoch)
        if error is not None:
            if error is ErrorCode.BROKER_NOT_AVAILABLE:
                error = ErrorCode.STALE_BROKER_EPOCH
            self._replies.append(AlterPartitionReply(event.key, error))
            return
        immediate: dict[int, AlterPartitionResult] = {}
        written: dict[int, tuple[TopicPartition, LeaderAndIsr]] = {}
        for position, item in enumerate(event.items):
            result = self._check_alter_item(event.broker_id, item)
            if isinstance(result, AlterPartitionResult):
                immediate[position] = result
            else:
                tp, new = result
                written[position] = (tp, new)
                self._write_partition(tp, self._states[tp], new, notify_replicas=False)

        def finish() -> ControllerReply:
            results: list[AlterPartitionResult] = []
            for position, item in enumerate(event.items):
                if position in immediate:
                    results.append(immediate[position])
                    continue
                tp, wanted = written[position]
                state = self._isr_written.pop(tp, None)
                if state is not None and state.leader_and_isr == wanted:
                    results.append(_alter_result(item, ErrorCode.NONE, state))
                else:
                    results.append(
                        AlterPartitionResult(item.topic_id, item.partition, ErrorCode.INVALID_UPDATE_VERSION)
                    )
            return AlterPartitionReply(event.key, ErrorCode.NONE, tuple(results))

        self._wait_for(
            frozenset(tp for tp, _ in written.values()),
            finish,
            AlterPartitionReply(event.key, ErrorCode.NOT_CONTROLLER),
        )

    def _check_alter_item(
        self, broker_id: int, item: AlterPartitionItem
    ) -> AlterPartitionResult | tuple[TopicPartition, LeaderAndIsr]:
        def refuse(error: ErrorCode) -> AlterPartitionResult:
            return AlterPartitionResult(item.topic_id, item.partition, error)

        name = self._topic_names.get(item.topic_id)
        if name is None or name in self._deleting:
            return refuse(ErrorCode.UNKNOWN_TOPIC_ID)
        assignment = self._topics[name]
        tp = TopicPartition(name, item.partition)
        state = self._states.get(tp)
        if item.partition not in assignment.replicas or state is None:
            return refuse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if tp in self._busy:
            return refuse(ErrorCode.INVALID_UPDATE_VERSION)
        if state.leader != broker_id:
            return refuse(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if item.leader_epoch != state.leader_epoch:
            return refuse(ErrorCode.FENCED_LEADER_EPOCH)
        if item.partition_epoch != state.version:
            return refuse(ErrorCode.INVALID_UPDATE_VERSION)
        replicas = assignment.replicas[item.partition]
        new_isr = item.new_isr
        if broker_id not in new_isr or len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(replicas):
            return refuse(ErrorCode.INVALID_REQUEST)
        for member in new_isr:
            if member not in state.isr and (member not in self._brokers or member in self._shutting_down):
                return refuse(ErrorCode.INELIGIBLE_REPLICA)
        if new_isr == state.isr:
            return _alter_result(item, ErrorCode.NONE, state)
        return tp, state.leader_and_isr.with_isr(new_isr, self.epoch)

    def _controlled_shutdown(self, event: ControlledShutdownReceived) -> None:
        error = self._broker_epoch_error(event.broker_id, event.broker_epoch)
        if error is not None:
            self._replies.append(ControlledShutdownReply(event.key, error))
            return
        node_id = event.broker_id
        self._shutting_down.add(node_id)
        affected = self._partitions_on({node_id})
        self._dirty.update(affected)
        self._notices.append(f"controlled shutdown of broker {node_id}: {len(affected)} partition(s) to move")

        def finish() -> ControllerReply:
            remaining = tuple(
                sorted(
                    tp
                    for tp in affected
                    if (state := self._states.get(tp)) is not None
                    and state.leader == node_id
                    and tp.topic in self._topics
                    and len(self._topics[tp.topic].replicas[tp.partition]) > 1
                )
            )
            return ControlledShutdownReply(event.key, ErrorCode.NONE, remaining)

        self._wait_for(
            frozenset(affected), finish, ControlledShutdownReply(event.key, ErrorCode.NOT_CONTROLLER)
        )

    def _elect_leaders(self, event: ElectLeadersReceived) -> None:
        wanted = (
            list(event.partitions)
            if event.partitions is not None
            else [tp for assignment in self._topics.values() for tp in assignment.partitions()]
        )
        immediate: dict[TopicPartition, ErrorCode] = {}
        started: set[TopicPartition] = set()
        eligible = self._eligible()
        for tp in wanted:
            assignment = self._topics.get(tp.topic)
            state = self._states.get(tp)
            if assignment is None or tp.topic in self._deleting or tp.partition not in assignment.replicas:
                immediate[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            replicas = assignment.replicas[tp.partition]
            if state is None:
                immediate[tp] = (
                    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                    if event.election_type is ElectionType.PREFERRED
                    else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                )
                continue
            if event.election_type is ElectionType.PREFERRED:
                if state.leader == replicas[0]:
                    immediate[tp] = ErrorCode.ELECTION_NOT_NEEDED
                elif election.preferred_leader(replicas, state.isr, eligible) is None:
                    immediate[tp] = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                else:
                    self._preferred_wanted.add(tp)
                    started.add(tp)
            else:
                if state.leader != NO_LEADER and state.leader in self._brokers:
                    immediate[tp] = ErrorCode.ELECTION_NOT_NEEDED
                elif not eligible.intersection(replicas):
                    immediate[tp] = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                else:
                    self._unclean_wanted.add(tp)
                    started.add(tp)
        self._dirty.update(started)

        def finish() -> ControllerReply:
            results = dict(immediate)
            for tp in started:
                state = self._states.get(tp)
                assignment = self._topics.get(tp.topic)
                if state is None or assignment is None:
                    results[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif event.election_type is ElectionType.PREFERRED:
                    preferred = assignment.replicas[tp.partition][0]
                    results[tp] = (
                        ErrorCode.NONE
                        if state.leader == preferred
                        else ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                    )
                else:
                    results[tp] = (
                        ErrorCode.NONE
                        if state.leader != NO_LEADER
                        else ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                    )
            return ElectLeadersReply(event.key, ErrorCode.NONE, results)

        self._wait_for(frozenset(started), finish, ElectLeadersReply(event.key, ErrorCode.NOT_CONTROLLER))

    def _reassign(self, event: ReassignmentsReceived) -> None:
        results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        changed: set[str] = set()
        for tp in sorted(event.targets):
            error, message = self._reassign_partition(tp, event.targets[tp])
            results[tp] = (error, message)
            if error is ErrorCode.NONE:
                changed.add(tp.topic)

        def finish() -> ControllerReply:
            return ReassignmentsReply(event.key, ErrorCode.NONE, results)

        self._wait_for(
            frozenset(),
            finish,
            ReassignmentsReply(event.key, ErrorCode.NOT_CONTROLLER),
            topics=frozenset(changed),
        )

    def _reassign_partition(
        self, tp: TopicPartition, target: tuple[int, ...] | None
    ) -> tuple[ErrorCode, str | None]:
        """Start (or change, or cancel) the partition's reassignment in this controller's
        assignment; written by ``_write_assignments``."""
        assignment = self._topics.get(tp.topic)
        if assignment is None or tp.topic in self._deleting or tp.partition not in assignment.replicas:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp} does not exist"
        index = tp.partition
        original = assignment.original(index)
        if target is None:
            if not assignment.reassigning(index):
                return ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"no reassignment of {tp} is in progress"
            target = original
        else:
            fault = replica_list_fault(target)
            if fault is not None:
                return ErrorCode.INVALID_REPLICA_ASSIGNMENT, fault
            missing = sorted(replica for replica in target if replica not in self._brokers)
            if missing:
                return (
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"brokers {missing} are not registered (not alive)",
                )
        adding = tuple(replica for replica in target if replica not in original)
        removing = tuple(replica for replica in original if replica not in target)
        replicas = target + removing
        others_adding = {i: members for i, members in assignment.adding.items() if i != index}
        others_removing = {i: members for i, members in assignment.removing.items() if i != index}
        self._topics[tp.topic] = replace(
            assignment,
            replicas={**assignment.replicas, index: replicas},
            adding={**others_adding, index: adding} if adding else others_adding,
            removing={**others_removing, index: removing} if removing else others_removing,
        )
        if self._topics[tp.topic] != assignment:
            self._unwritten.add(tp.topic)
            self._dirty.add(tp)
            if adding or removing:
                self._notices.append(
                    f"reassignment of {tp}: {list(original)} -> {list(target)} "
                    f"(adding {list(adding)}, removing {list(removing)})"
                )
        return ErrorCode.NONE, None

    def _list_reassignments(self, event: ReassignmentsListed) -> None:
        ongoing: dict[TopicPartition, OngoingReassignment] = {}
        if event.partitions is None:
            wanted = [tp for assignment in self._topics.values() for tp in assignment.partitions()]
        else:
            wanted = list(event.partitions)
        for tp in wanted:
            assignment = self._topics.get(tp.topic)
            if assignment is None or tp.topic in self._deleting or tp.partition not in assignment.replicas:
                continue
            if assignment.reassigning(tp.partition):
                ongoing[tp] = OngoingReassignment(
                    assignment.replicas[tp.partition],
                    assignment.adding.get(tp.partition, ()),
                    assignment.removing.get(tp.partition, ()),
                )
        self._replies.append(ReassignmentsListReply(event.key, ErrorCode.NONE, ongoing))

    def _maybe_rebalance(self) -> None:
        if not self._config.auto_leader_rebalance_enable:
            return
        now_ms = self._clock.monotonic_ms()
        if now_ms < self._next_rebalance_check_ms:
            return
        self._next_rebalance_check_ms = now_ms + self._config.leader_imbalance_check_interval_ms
        if self._deleting:
            return
        eligible = self._eligible()
        preferred_of: dict[int, list[TopicPartition]] = {}
        for assignment in self._topics.values():
            for index, replicas in assignment.replicas.items():
                tp = TopicPartition(assignment.name, index)
                if tp in self._states:
                    preferred_of.setdefault(replicas[0], []).append(tp)
        for node_id, partitions in sorted(preferred_of.items()):
            if node_id not in eligible:
                continue
            elsewhere = [tp for tp in partitions if self._states[tp].leader != node_id]
            if len(elsewhere) * 100 > self._config.leader_imbalance_per_broker_percentage * len(partitions):
                for tp in elsewhere:
                    if node_id in self._states[tp].isr:
                        self._preferred_wanted.add(tp)
                        self._dirty.add(tp)

    # ---- replies that wait for writes -----------------------------------------------------------------------

    def _wait_for(
        self,
        partitions: frozenset[TopicPartition],
        finish: Callable[[], ControllerReply],
        refusal: ControllerReply,
        *,
        topics: frozenset[str] = frozenset(),
    ) -> None:
        self._waiters.append(_Waiter(partitions, finish, refusal, topics))

    def _finish_waiters(self) -> None:
        if not self._waiters:
            return
        unsettled = self._busy | self._preferred_wanted | self._unclean_wanted
        remaining: list[_Waiter] = []
        for waiter in self._waiters:
            if waiter.partitions & unsettled or not all(
                self._assignment_settled(topic) for topic in waiter.topics
            ):
                remaining.append(waiter)
            else:
                self._replies.append(waiter.finish())
        self._waiters = remaining

    # ---- output ---------------------------------------------------------------------------------------------

    def _info(self, tp: TopicPartition) -> PartitionInfo:
        assignment = self._topics[tp.topic]
        state = self._states[tp]
        replicas = assignment.replicas[tp.partition]
        return PartitionInfo(
            topic=tp.topic,
            partition=tp.partition,
            topic_id=assignment.topic_id,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=state.isr,
            partition_epoch=state.version,
            replicas=replicas,
            controller_epoch=state.leader_and_isr.controller_epoch,
            offline_replicas=tuple(r for r in replicas if r not in self._brokers),
            is_new=state.version == 0,
        )

    def _hosted_by(self, node_id: int) -> list[TopicPartition]:
        return sorted(
            tp
            for assignment in self._topics.values()
            if assignment.name not in self._deleting
            for tp in assignment.partitions()
            if node_id in assignment.replicas[tp.partition] and tp in self._states
        )

    def ready(self) -> ControllerReady:
        """Everything decided since the last call; the caller carries it out."""
        ready = ControllerReady(
            writes=self._writes,
            replies=self._replies,
            unclean_elections=self._unclean,
            notices=self._notices,
        )
        self._writes, self._replies, self._unclean, self._notices = [], [], [], []
        if not self.active:
            self._clear_commands()
            return ready
        live = tuple(self._brokers[node_id] for node_id in sorted(self._brokers))
        all_partitions = sorted(tp for tp in self._states if tp.topic not in self._deleting)
        deferred_full: set[int] = set()
        for node_id in sorted(self._brokers):
            registration = self._brokers[node_id]
            full = node_id in self._leader_and_isr_full
            if full:
                leading = self._hosted_by(node_id)
                if self._busy.intersection(leading):
                    # A full command lists every partition the broker keeps: wait until their
                    # states settle rather than send one that is about to change.
                    deferred_full.add(node_id)
                    full = False
                    leading = []
            else:
                leading = sorted(tp for tp in self._leader_and_isr.get(node_id, ()) if tp not in self._busy)
            if leading or full:
                infos = tuple(self._info(tp) for tp in leading if tp in self._states)
                leaders = {info.leader for info in infos if info.leader in self._brokers}
                ready.commands.append(
                    LeaderAndIsrCommand(
                        node_id,
                        registration.epoch,
                        self.node_id,
                        self.epoch,
                        infos,
                        tuple(self._brokers[leader] for leader in sorted(leaders)),
                        full=full,
                    )
                )
            if node_id in self._update_metadata_all or node_id in self._update_metadata:
                if node_id in self._update_metadata_all:
                    changed = all_partitions
                else:
                    changed = sorted(tp for tp in self._update_metadata[node_id] if tp in self._states)
                infos = tuple(
                    self._info(tp)
                    for tp in changed
                    if tp not in self._busy or node_id in self._update_metadata_all
                )
                deleted = tuple(self._deleted_for_metadata[tp] for tp in sorted(self._deleted_for_metadata))
                ready.commands.append(
                    UpdateMetadataCommand(
                        node_id, registration.epoch, self.node_id, self.epoch, infos + deleted, live
                    )
                )
            stops = self._stop_replica.get(node_id)
            if stops:
                ready.commands.append(
                    StopReplicaCommand(node_id, registration.epoch, self.node_id, self.epoch, tuple(stops))
                )
        # Partitions still busy stay pending: they are announced once their write settles.
        self._leader_and_isr = {
            node_id: {tp for tp in partitions if tp in self._busy}
            for node_id, partitions in self._leader_and_isr.items()
            if node_id in self._brokers and partitions & self._busy
        }
        self._update_metadata = {
            node_id: {tp for tp in partitions if tp in self._busy}
            for node_id, partitions in self._update_metadata.items()
            if node_id in self._brokers and partitions & self._busy
        }
        self._leader_and_isr_full = deferred_full
        self._update_metadata_all.clear()
        self._deleted_for_metadata.clear()
        self._stop_replica.clear()
        return ready

    def _clear_commands(self) -> None:
        self._leader_and_isr.clear()
        self._leader_and_isr_full.clear()
        self._update_metadata.clear()
        self._update_metadata_all.clear()
        self._deleted_for_metadata.clear()
        self._stop_replica.clear()


def _alter_result(item: AlterPartitionItem, error: ErrorCode, state: PartitionState) -> AlterPartitionResult:
    return AlterPartitionResult(
        item.topic_id,
        item.partition,
        error,
        leader=state.leader,
        leader_epoch=state.leader_epoch,
        isr=state.isr,
        partition_epoch=state.version,
    )


def _content(assignment: TopicAssignment) -> tuple[object, ...]:
    """An assignment without its znode version."""
    return (
        assignment.topic_id,
        dict(assignment.replicas),
        dict(assignment.adding),
        dict(assignment.removing),
    )
