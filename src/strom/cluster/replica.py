"""A partition's replica state on the broker that leads it, and on those that follow it.

**Leader** (``PartitionLeader``, one per leader epoch): the log end offset (LEO) of every
follower, learned from the offset each follower fetches at; when each last caught up; the high
watermark (HW) = the lowest LEO among the in-sync replicas, never moving back; ISR changes
proposed to the controller (AlterPartition), one at a time; and the produce requests with
acks=all parked until the HW passes their last offset. Time comes in as ``now_ms`` arguments; what
to do comes out of ``ready()``: requests to answer, an ISR change to send, whether the HW moved
(consumers' long polls wait for that).

While an ISR change is in flight, the HW counts the *maximal* ISR — the current one together with
the proposed one — so a record is acknowledged only when every replica that is or may become a
member of the ISR has it (KIP-497). That is what makes the election safe: the controller elects
from the ISR it holds, and that is always a subset of the maximal ISR.

* a follower joins (expansion) when its LEO reaches the HW and the start of the leader's epoch;
* a follower leaves (shrink) when it has not caught up with the leader's LEO for
  ``replica.lag.time.max.ms`` (caught up: it fetched at the LEO the leader had when it last fetched);
* acks=all is refused with NOT_ENOUGH_REPLICAS when the ISR is smaller than
  ``min.insync.replicas`` before the append, and answered NOT_ENOUGH_REPLICAS_AFTER_APPEND if it
  shrank below it by the time the HW passed the batch; REQUEST_TIMED_OUT when its deadline passes.

**Follower** (``PartitionFollower``): before fetching under a new leader epoch it asks the leader
where its own latest epoch ends (OffsetForLeaderEpoch) and truncates to the point where the two
logs agree (``truncation_offset``); its HW is the leader's, capped at its own LEO.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from strom.cluster.model import TopicPartition
from strom.protocol.errors import ErrorCode
from strom.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache

UNKNOWN_OFFSET = -1

# AlterPartition answers after which the proposal is dropped (the controller's LeaderAndIsr will
# bring the state it holds); any other error means "send it again".
_FINAL_ALTER_ERRORS = frozenset(
    {
        ErrorCode.INVALID_UPDATE_VERSION,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.INELIGIBLE_REPLICA,
        ErrorCode.NEW_LEADER_ELECTED,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.STALE_BROKER_EPOCH,
    }
)


def fence_leader_epoch(requested: int, current: int) -> ErrorCode:
    """Kafka's answer to a request carrying ``current_leader_epoch`` (Fetch, OffsetForLeaderEpoch,
    ListOffsets): -1 asks for no check; older than ours is fenced; newer means we lag behind."""
    if requested == -1 or requested == current:
        return ErrorCode.NONE
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


@dataclass
class FollowerProgress:
    log_end_offset: int = UNKNOWN_OFFSET  # unknown until the follower fetches under this leader
    last_caught_up_ms: int = 0
    last_fetch_ms: int = -1
    last_fetch_leader_end_offset: int = UNKNOWN_OFFSET


@dataclass(frozen=True)
class AlterIsrProposal:
    """What to send in AlterPartition: the ISR wanted, and the state it replaces."""

    topic_partition: TopicPartition
    new_isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int


@dataclass
class LeaderReady:
    completed: list[tuple[object, ErrorCode]] = field(default_factory=list)  # (request key, answer)
    alter_isr: AlterIsrProposal | None = None
    high_watermark_moved: bool = False


@dataclass
class _Waiter:
    required_offset: int  # the HW that acknowledges it (last offset of the batch + 1)
    key: object
    deadline_ms: int


class PartitionLeader:
    def __init__(
        self,
        topic_partition: TopicPartition,
        local_id: int,
        *,
        leader_epoch: int,
        partition_epoch: int,
        replicas: Iterable[int],
        isr: Iterable[int],
        log_end_offset: int,
        high_watermark: int,
        min_insync_replicas: int,
        replica_lag_time_max_ms: int,
        now_ms: int,
    ) -> None:
        self.topic_partition = topic_partition
        self.local_id = local_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        assert local_id in self.isr, f"{topic_partition}: leader {local_id} is not in its ISR {self.isr}"
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._log_end_offset = log_end_offset
        # The epoch starts at the log end the leader had when it took office; a follower must get
        # past it to join the ISR (it then has everything the previous leaders acknowledged).
        self.epoch_start_offset = log_end_offset
        self._high_watermark = min(high_watermark, log_end_offset)
        self._followers: dict[int, FollowerProgress] = {
            replica: FollowerProgress(last_caught_up_ms=now_ms if replica in self.isr else 0)
            for replica in self.replicas
            if replica != local_id
        }
        self._pending: AlterIsrProposal | None = None
        self._pending_sent = False
        self._waiters: list[_Waiter] = []
        self._ready = LeaderReady()
        self._update_high_watermark()

    # ---- reading ------------------------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def pending_isr(self) -> tuple[int, ...] | None:
        return self._pending.new_isr if self._pending is not None else None

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the HW is computed over: the current one plus members a pending change adds."""
        if self._pending is None:
            return self.isr
        return self.isr + tuple(r for r in self._pending.new_isr if r not in self.isr)

    def follower(self, replica_id: int) -> FollowerProgress:
        return self._followers[replica_id]

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    # ---- produce ----------------------------------------------------------------------------------------

    def check_acks_all(self) -> ErrorCode:
        """Before appending an acks=all batch: NOT_ENOUGH_REPLICAS if the ISR is too small."""
        if len(self.isr) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def on_append(self, log_end_offset: int) -> None:
        """The leader appended: its own LEO moved (the HW moves at once if it is the only ISR member)."""
        assert log_end_offset >= self._log_end_offset, (log_end_offset, self._log_end_offset)
        self._log_end_offset = log_end_offset
        self._update_high_watermark()

    def wait_for_replication(self, key: object, required_offset: int, deadline_ms: int) -> ErrorCode | None:
        """An acks=all request whose last batch ends before ``required_offset``: its answer now,
        or None if it waits (it comes out of ``ready().completed`` later)."""
        if self._high_watermark >= required_offset:
            return self._acks_all_answer()
        waiter = _Waiter(required_offset, key, deadline_ms)
        # Appends come in offset order, so this is almost always the end of the list.
        position = len(self._waiters)
        while position > 0 and self._waiters[position - 1].required_offset > required_offset:
            position -= 1
        self._waiters.insert(position, waiter)
        return None

    def cancel(self, key: object) -> None:
        """Forget a parked request (its connection went away)."""
        self._waiters = [waiter for waiter in self._waiters if waiter.key != key]

    def _acks_all_answer(self) -> ErrorCode:
        if len(self.isr) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    # ---- followers -----------------------------------------------------------------------------------------

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> ErrorCode:
        """A follower fetched at ``fetch_offset`` (its LEO): record its progress.

        NOT_LEADER_OR_FOLLOWER if it is not a replica; OFFSET_OUT_OF_RANGE if it claims more than
        the leader has (it must truncate first) — its progress is then left alone.
        """
        progress = self._followers.get(replica_id)
        if progress is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if fetch_offset > self._log_end_offset or fetch_offset < 0:
            return ErrorCode.OFFSET_OUT_OF_RANGE
        if fetch_offset >= self._log_end_offset:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
        elif fetch_offset >= progress.last_fetch_leader_end_offset >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.last_fetch_leader_end_offset = self._log_end_offset
        progress.last_fetch_ms = now_ms
        progress.log_end_offset = fetch_offset
        self._update_high_watermark()
        if (
            self._pending is None
            and replica_id not in self.isr
            and fetch_offset >= self._high_watermark
            and fetch_offset >= self.epoch_start_offset
        ):
            self._propose((*self.isr, replica_id))
        return ErrorCode.NONE

    def tick(self, now_ms: int) -> None:
        """Time passed: shrink the ISR of followers that fell behind; time out parked requests."""
        if self._waiters and any(waiter.deadline_ms <= now_ms for waiter in self._waiters):
            kept: list[_Waiter] = []
            for waiter in self._waiters:
                if waiter.deadline_ms <= now_ms:
                    self._ready.completed.append((waiter.key, ErrorCode.REQUEST_TIMED_OUT))
                else:
                    kept.append(waiter)
            self._waiters = kept
        if self._pending is not None:
            return
        lagging = {
            replica
            for replica in self.isr
            if replica != self.local_id
            and now_ms - self._followers[replica].last_caught_up_ms > self.replica_lag_time_max_ms
        }
        if lagging:
            self._propose(tuple(replica for replica in self.isr if replica not in lagging))

    def _propose(self, new_isr: tuple[int, ...]) -> None:
        self._pending = AlterIsrProposal(
            self.topic_partition, new_isr, self.leader_epoch, self.partition_epoch
        )
        self._pending_sent = False
        self._update_high_watermark()

    # ---- the controller's answers ---------------------------------------------------------------------------

    def on_alter_isr_response(
        self, error: ErrorCode, *, leader_epoch: int = -1, isr: Iterable[int] = (), partition_epoch: int = -1
    ) -> None:
        if self._pending is None:
            return
        if error is ErrorCode.NONE:
            self._pending = None
            if leader_epoch == self.leader_epoch and partition_epoch > self.partition_epoch:
                self.isr = tuple(isr)
                self.partition_epoch = partition_epoch
        elif error in _FINAL_ALTER_ERRORS:
            self._pending = None
        else:
            self._pending_sent = False  # a retriable error: the proposal goes out again
        self._update_high_watermark()

    def on_partition_state(
        self, *, leader_epoch: int, partition_epoch: int, isr: Iterable[int], replicas: Iterable[int]
    ) -> bool:
        """LeaderAndIsr for this same leader epoch (the controller changed the ISR); False if stale."""
        assert leader_epoch == self.leader_epoch, "a new leader epoch needs a new PartitionLeader"
        if partition_epoch <= self.partition_epoch:
            return False
        self.partition_epoch = partition_epoch
        self.isr = tuple(isr)
        self.replicas = tuple(replicas)
        for replica in self.replicas:
            if replica != self.local_id and replica not in self._followers:
                self._followers[replica] = FollowerProgress()
        if self._pending is not None and self._pending.partition_epoch < partition_epoch:
            self._pending = None
        self._update_high_watermark()
        return True

    def resign(self) -> list[tuple[object, ErrorCode]]:
        """Leadership lost: every parked request is answered NOT_LEADER_OR_FOLLOWER."""
        answers = [(waiter.key, ErrorCode.NOT_LEADER_OR_FOLLOWER) for waiter in self._waiters]
        self._waiters = []
        self._pending = None
        return answers

    # ---- high watermark -----------------------------------------------------------------------------------------

    def _update_high_watermark(self) -> None:
        lowest = self._log_end_offset
        for replica in self.maximal_isr:
            if replica == self.local_id:
                continue
            follower_end = self._followers[replica].log_end_offset
            if follower_end == UNKNOWN_OFFSET:
                return
            lowest = min(lowest, follower_end)
        if lowest <= self._high_watermark:
            return
        self._high_watermark = lowest
        self._ready.high_watermark_moved = True
        done = 0
        while done < len(self._waiters) and self._waiters[done].required_offset <= lowest:
            done += 1
        if done:
            answer = self._acks_all_answer()
            self._ready.completed.extend((waiter.key, answer) for waiter in self._waiters[:done])
            del self._waiters[:done]

    @property
    def has_output(self) -> bool:
        """Whether ``ready()`` has anything to hand out (most calls after a fetch find nothing)."""
        ready = self._ready
        return (
            bool(ready.completed)
            or ready.high_watermark_moved
            or (self._pending is not None and not self._pending_sent)
        )

    def ready(self) -> LeaderReady:
        ready, self._ready = self._ready, LeaderReady()
        if self._pending is not None and not self._pending_sent:
            ready.alter_isr = self._pending
            self._pending_sent = True
        return ready


# ---- follower -------------------------------------------------------------------------------------------------


class FollowerPhase(Enum):
    TRUNCATING = "truncating"  # asking the leader where our latest epoch ends
    FETCHING = "fetching"


def truncation_offset(
    answer_epoch: int,
    answer_end_offset: int,
    local_cache: LeaderEpochCache,
    local_log_end_offset: int,
    local_high_watermark: int,
) -> int:
    """Where a follower cuts its log, from the leader's OffsetForLeaderEpoch answer.

    The leader answered for our latest epoch with the largest epoch it has at or below it and
    where that epoch ends in its log. Our logs agree up to the end of that epoch in *both* logs
    (KIP-279): below the smaller of the two ends. Without an answer (the leader knows no epoch at
    or below ours, or we have no epochs) only the high watermark is known to be common.
    """
    if answer_epoch == UNDEFINED_EPOCH or answer_end_offset == UNDEFINED_OFFSET:
        return min(local_high_watermark, local_log_end_offset)
    local_epoch, local_end = local_cache.end_offset_for(answer_epoch, local_log_end_offset)
    if local_epoch == UNDEFINED_EPOCH:
        return min(local_high_watermark, local_log_end_offset)
    return min(answer_end_offset, local_end, local_log_end_offset)


class PartitionFollower:
    """A follower under one leader epoch: truncate first, then fetch."""

    def __init__(
        self, topic_partition: TopicPartition, *, leader_id: int, leader_epoch: int, high_watermark: int
    ) -> None:
        self.topic_partition = topic_partition
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.high_watermark = high_watermark
        self.phase = FollowerPhase.TRUNCATING

    def epoch_question(self, local_cache: LeaderEpochCache) -> int | None:
        """The epoch to ask the leader about, or None if there is nothing to compare (empty log
        without epochs): then no truncation is needed beyond the high watermark check."""
        latest = local_cache.latest_epoch
        return None if latest == UNDEFINED_EPOCH else latest

    def on_epoch_answer(
        self,
        error: ErrorCode,
        answer_epoch: int,
        answer_end_offset: int,
        local_cache: LeaderEpochCache,
        local_log_end_offset: int,
    ) -> int | None:
        """The offset to truncate to, then fetch from; None if the question must be asked again
        (the leader does not know our epoch yet, or is not the leader any more)."""
        if error is not ErrorCode.NONE:
            return None
        offset = truncation_offset(
            answer_epoch, answer_end_offset, local_cache, local_log_end_offset, self.high_watermark
        )
        self.phase = FollowerPhase.FETCHING
        self.high_watermark = min(self.high_watermark, offset)
        return offset

    def skip_truncation(self, local_log_end_offset: int) -> int:
        """No epochs locally: keep only what is below the high watermark."""
        self.phase = FollowerPhase.FETCHING
        return min(self.high_watermark, local_log_end_offset)

    def on_fetch_response(self, leader_high_watermark: int, local_log_end_offset: int) -> int:
        """After appending what the leader sent: our HW is the leader's, capped at our LEO."""
        self.high_watermark = max(self.high_watermark, min(leader_high_watermark, local_log_end_offset))
        return self.high_watermark
