"""This broker's role for each partition it replicates: leader or follower, and the data path.

``PartitionRoles`` owns one ``PartitionLeader`` (``strom.cluster.replica``) per partition this
broker leads and hands the followed ones to the ``ReplicaFetchers``. It is the event loop's side of
the replica state: produce and fetch ask it whether they may append or read (``writable``,
``readable``), appends and follower fetches are fed into the leader's state, and whatever that
state outputs is carried out at once (``_carry_out``): acks=all requests answered, consumers woken
when the high watermark moves, ISR changes queued for the controller (``alter_isr_proposals``).
Time moves the leaders with ``tick`` (ISR shrink after ``replica.lag.time.max.ms``, acks=all
deadlines).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from strom.base.clock import Clock
from strom.broker.cluster.fetcher import FollowedPartition, ReplicaFetchers
from strom.broker.cluster.peer import PLAINTEXT_DIALER, PeerDialer
from strom.broker.replication import ReadAccess
from strom.cluster.actions import PartitionInfo
from strom.cluster.config import ReplicationConfig
from strom.cluster.model import TopicPartition
from strom.cluster.replica import AlterIsrProposal, PartitionFollower, PartitionLeader
from strom.protocol.errors import ErrorCode
from strom.storage import PartitionLog

log = logging.getLogger("strom.broker.cluster")


@dataclass
class LedPartition:
    topic_partition: TopicPartition
    topic_id: uuid.UUID
    log: PartitionLog
    leader: PartitionLeader


class PartitionRoles:
    def __init__(
        self,
        node_id: int,
        config: ReplicationConfig,
        clock: Clock,
        *,
        wake_readers: Callable[[str, int], None],
        wake_replicas: Callable[[str, int], None],
        alter_isr: Callable[[], None],
        dialer: PeerDialer = PLAINTEXT_DIALER,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self._clock = clock
        self._wake_readers = wake_readers
        self._wake_replicas = wake_replicas
        self._alter_isr = alter_isr
        self.led: dict[TopicPartition, LedPartition] = {}
        self.fetchers = ReplicaFetchers(node_id, config, clock, self._after_follower_append, dialer)
        self.followed: dict[TopicPartition, FollowedPartition] = {}
        # acks=all requests parked in a leader: key -> (its future, the leader holding it)
        self._acks: dict[int, tuple[asyncio.Future[ErrorCode], PartitionLeader]] = {}
        self._keys = itertools.count()
        # ISR changes to send to the controller, newest per partition.
        self.alter_isr_proposals: dict[TopicPartition, tuple[uuid.UUID, AlterIsrProposal]] = {}
        self._isr_changes_total = {"shrink": 0, "expand": 0}
        self._proposals_logged: dict[TopicPartition, tuple[int, int, tuple[int, ...]]] = {}
        self._shutting_down = False  # see begin_shutdown

    # ---- becoming leader, follower, nothing ---------------------------------------------------------

    def become_leader(self, info: PartitionInfo, partition_log: PartitionLog) -> None:
        tp = info.topic_partition
        self._stop_following(tp)
        self._resign(tp)
        partition_log.become_leader(info.leader_epoch)
        leader = PartitionLeader(
            tp,
            self.node_id,
            leader_epoch=info.leader_epoch,
            partition_epoch=info.partition_epoch,
            replicas=info.replicas,
            isr=info.isr if self.node_id in info.isr else (*info.isr, self.node_id),
            log_end_offset=partition_log.log_end_offset,
            high_watermark=partition_log.high_watermark,
            min_insync_replicas=partition_log.config.min_insync_replicas,
            replica_lag_time_max_ms=self.config.replica_lag_time_max_ms,
            now_ms=self._clock.monotonic_ms(),
        )
        entry = LedPartition(tp, info.topic_id, partition_log, leader)
        self.led[tp] = entry
        log.debug(
            "%s: leader in epoch %d (ISR %s, log end %d)",
            tp,
            info.leader_epoch,
            list(leader.isr),
            partition_log.log_end_offset,
        )
        self._carry_out(entry)

    def become_follower(
        self, info: PartitionInfo, partition_log: PartitionLog, leader_address: tuple[str, int] | None
    ) -> None:
        tp = info.topic_partition
        self._stop_following(tp)
        self._resign(tp)
        partition_log.become_follower()
        follower = PartitionFollower(
            tp,
            leader_id=info.leader,
            leader_epoch=info.leader_epoch,
            high_watermark=partition_log.high_watermark,
        )
        followed = FollowedPartition(tp, info.topic_id, partition_log, follower)
        self.followed[tp] = followed
        if self._leaving(info):
            log.debug("%s: not fetching from broker %d: shutting down, out of the ISR", tp, info.leader)
        elif info.leader >= 0 and info.leader != self.node_id and leader_address is not None:
            self.fetchers.follow(followed, info.leader, *leader_address)
            log.debug("%s: following broker %d in epoch %d", tp, info.leader, info.leader_epoch)
        else:
            log.debug("%s: no leader in epoch %d; waiting", tp, info.leader_epoch)

    def begin_shutdown(self, isr_of: Callable[[TopicPartition], Sequence[int]]) -> None:
        """A controlled shutdown began: from now on a partition this broker follows is fetched
        only while the ISR holds this broker (``isr_of``: each followed partition's ISR as last
        told). Out of the ISR, fetching serves nobody — the broker is about to stop — and it
        harms: the leader sees the follower catch up and proposes it back into the ISR, and its
        high watermark then counts a replica that is going away (the acks=all writes of a
        partition just moved here waited for the controller to take it out again, ~200 ms).
        Kafka's controller sends such followers StopReplica; its KRaft leaders never propose a
        broker in controlled shutdown."""
        self._shutting_down = True
        for tp in list(self.followed):
            if self.node_id not in isr_of(tp):
                self.fetchers.stop(tp)
                log.debug("%s: stopped fetching: shutting down, out of the ISR", tp)

    def _leaving(self, info: PartitionInfo) -> bool:
        return self._shutting_down and self.node_id not in info.isr

    def isr_changed(self, info: PartitionInfo) -> None:
        tp = info.topic_partition
        if tp in self.followed:
            if self._leaving(info):
                self.fetchers.stop(tp)
                log.debug("%s: stopped fetching: shutting down, out of the ISR", tp)
            return
        entry = self.led.get(tp)
        if entry is None or entry.leader.leader_epoch != info.leader_epoch:
            return
        before = entry.leader.isr
        if entry.leader.on_partition_state(
            leader_epoch=info.leader_epoch,
            partition_epoch=info.partition_epoch,
            isr=info.isr,
            replicas=info.replicas,
        ):
            self._count_isr_change(before, entry.leader.isr)
            self._carry_out(entry)

    def stop(self, tp: TopicPartition) -> None:
        self._stop_following(tp)
        self._resign(tp)

    def _stop_following(self, tp: TopicPartition) -> None:
        if self.followed.pop(tp, None) is not None:
            self.fetchers.stop(tp)

    def _resign(self, tp: TopicPartition) -> None:
        entry = self.led.pop(tp, None)
        if entry is None:
            return
        self._proposals_logged.pop(tp, None)
        entry.log.become_follower()
        self.alter_isr_proposals.pop(tp, None)
        self._answer(entry.leader.resign())

    def reconfigure(self, tp: TopicPartition) -> None:
        """The topic's config changed (min.insync.replicas)."""
        entry = self.led.get(tp)
        if entry is not None:
            entry.leader.min_insync_replicas = entry.log.config.min_insync_replicas

    # ---- the data path ---------------------------------------------------------------------------------

    def follower_fetched(self, access: ReadAccess, replica_id: int, fetch_offset: int) -> ErrorCode:
        partition_log = access.log
        entry = self.led.get(TopicPartition(partition_log.topic, partition_log.partition))
        if entry is None or entry.log is not partition_log:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        error = entry.leader.on_follower_fetch(replica_id, fetch_offset, self._clock.monotonic_ms())
        self._carry_out(entry)
        return error

    def on_append(self, topic: str, partition: int) -> None:
        """The leader appended (produce, the group coordinator): followers are woken at once,
        consumers when the high watermark moves."""
        self._wake_replicas(topic, partition)
        entry = self.led.get(TopicPartition(topic, partition))
        if entry is None:
            return
        entry.leader.on_append(entry.log.log_end_offset)
        self._carry_out(entry)

    async def wait_for_acks(
        self, appended: Sequence[tuple[PartitionLog, int]], timeout_ms: int
    ) -> list[ErrorCode]:
        answers: list[ErrorCode | asyncio.Future[ErrorCode]] = []
        parked: list[int] = []
        deadline_ms = self._clock.monotonic_ms() + max(timeout_ms, 0)
        loop = asyncio.get_running_loop()
        for partition_log, end_offset in appended:
            entry = self.led.get(TopicPartition(partition_log.topic, partition_log.partition))
            if entry is None or entry.log is not partition_log:
                answers.append(ErrorCode.NOT_LEADER_OR_FOLLOWER)
                continue
            key = next(self._keys)
            answer = entry.leader.wait_for_replication(key, end_offset, deadline_ms)
            if answer is not None:
                answers.append(answer)
                continue
            future: asyncio.Future[ErrorCode] = loop.create_future()
            self._acks[key] = (future, entry.leader)
            parked.append(key)
            answers.append(future)
        try:
            return [answer if isinstance(answer, ErrorCode) else await answer for answer in answers]
        finally:
            for key in parked:
                waiting = self._acks.pop(key, None)
                if waiting is not None:  # cancelled: the connection went away
                    waiting[1].cancel(key)

    def _answer(self, completed: Iterable[tuple[object, ErrorCode]]) -> None:
        for key, error in completed:
            waiting = self._acks.pop(key, None)  # type: ignore[call-overload]
            if waiting is not None and not waiting[0].done():
                waiting[0].set_result(error)

    def _carry_out(self, entry: LedPartition) -> None:
        """Do what the leader's state asks: answer requests, wake consumers, queue ISR changes."""
        if not entry.leader.has_output:
            return
        ready = entry.leader.ready()
        if ready.completed:
            self._answer(ready.completed)
        if ready.high_watermark_moved:
            entry.log.set_high_watermark(entry.leader.high_watermark)
            tp = entry.topic_partition
            self._wake_readers(tp.topic, tp.partition)
        if ready.alter_isr is not None:
            proposal = ready.alter_isr
            # The same proposal again (refused, or the controller unreachable, and proposed again
            # at the next check) is logged once: a deposed leader cut off from the others, or a
            # replica waiting to register, would otherwise log it twice a second.
            said = (proposal.leader_epoch, proposal.partition_epoch, tuple(proposal.new_isr))
            level = (
                logging.DEBUG if self._proposals_logged.get(entry.topic_partition) == said else logging.INFO
            )
            self._proposals_logged[entry.topic_partition] = said
            log.log(
                level,
                "%s: proposing ISR %s (was %s) to the controller",
                entry.topic_partition,
                list(proposal.new_isr),
                list(entry.leader.isr),
            )
            self.alter_isr_proposals[entry.topic_partition] = (entry.topic_id, proposal)
            self._alter_isr()

    def alter_isr_answered(
        self,
        tp: TopicPartition,
        proposal: AlterIsrProposal,
        error: ErrorCode,
        *,
        leader_epoch: int = -1,
        isr: tuple[int, ...] = (),
        partition_epoch: int = -1,
    ) -> None:
        entry = self.led.get(tp)
        if entry is None or entry.leader.leader_epoch != proposal.leader_epoch:
            return
        before = entry.leader.isr
        entry.leader.on_alter_isr_response(
            error, leader_epoch=leader_epoch, isr=isr, partition_epoch=partition_epoch
        )
        self._count_isr_change(before, entry.leader.isr)
        self._carry_out(entry)

    def _count_isr_change(self, before: tuple[int, ...], after: tuple[int, ...]) -> None:
        """The ISR of a partition led here changed (the controller agreed to a proposal, or
        changed it itself: a follower gone or shutting down): Kafka's IsrShrinks / IsrExpands."""
        if before == after:
            return
        if any(replica not in after for replica in before):
            self._isr_changes_total["shrink"] += 1
        if any(replica not in before for replica in after):
            self._isr_changes_total["expand"] += 1

    @property
    def isr_changes_total(self) -> dict[str, int]:
        """ISR shrinks and expands of the partitions led here, since the broker started."""
        return dict(self._isr_changes_total)

    def replica_max_lag(self) -> int:
        """Records the furthest-behind followed partition lacks below its leader's high watermark
        (Kafka's ReplicaFetcherManager MaxLag), as of each partition's last fetch."""
        return max((followed.lag for followed in self.followed.values()), default=0)

    def _after_follower_append(self, followed: FollowedPartition) -> None:
        """A follower appended what it fetched (nothing to do yet: consumers read leaders)."""

    # ---- time --------------------------------------------------------------------------------------------

    def tick(self, *, all_leaders: bool) -> None:
        """Deadlines of parked acks=all requests (every call), ISR shrinks (``all_leaders``)."""
        now_ms = self._clock.monotonic_ms()
        for entry in list(self.led.values()):
            if all_leaders or entry.leader.waiting:
                entry.leader.tick(now_ms)
                self._carry_out(entry)

    async def close(self) -> None:
        for tp in list(self.led):
            self._resign(tp)
        self.followed.clear()
        await self.fetchers.close()
