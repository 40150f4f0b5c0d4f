"""Seeded random scenarios: one RF=3 partition on three simulated brokers under faults.

Everything real except the bytes: the controller (through its driver, on the in-memory ZooKeeper),
the brokers' fencing of its commands (``BrokerControl``), the leader's replica state
(``PartitionLeader``: ISR, HW, acks=all, AlterPartition), the followers' truncation through the
leader-epoch caches. A log is a list of record ids; each record remembers its epoch.

Faults: crashes (the process and its memory go; the log stays), isolation (the broker loses its
ZooKeeper session and every connection but keeps running: a zombie leader keeps taking acks=1
writes under its old epoch), restarts and heals, time passing (ISR shrinks). Invariants, checked
after every step:

* at most one leader per leader epoch, and leader epochs never go back (ZooKeeper's history);
* a leader elected cleanly has every acknowledged (acks=all) record, at its offset;
* no offset is ever acknowledged with two different records;
* a follower's log is always a prefix of its leader's after it truncates and after each fetch;
* every member of a current leader's ISR has a log at least as long as the leader's HW;
* in the end, with the faults healed: all logs identical, the ISR full, nothing acknowledged lost.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from strom.cluster.actions import AlterPartitionReply
from strom.cluster.broker_control import BecomeFollower, BecomeLeader, IsrChanged, StopReplica
from strom.cluster.events import AlterPartitionItem, AlterPartitionReceived
from strom.cluster.model import TopicPartition
from strom.cluster.replica import (
    AlterIsrProposal,
    FollowerPhase,
    PartitionFollower,
    PartitionLeader,
    fence_leader_epoch,
)
from strom.protocol.errors import ErrorCode
from strom.storage.leader_epoch import LeaderEpochCache

from .harness import ClusterHarness

TP = TopicPartition("t", 0)
LAG_MS = 5_000
REQUEST_TIMEOUT_MS = 3_000
NODES = (1, 2, 3)


@dataclass
class Replica:
    node_id: int
    log: list[tuple[int, int]] = field(default_factory=list)  # (epoch, record id)
    cache: LeaderEpochCache = field(default_factory=LeaderEpochCache)
    leader: PartitionLeader | None = None
    follower: PartitionFollower | None = None
    high_watermark: int = 0
    crashed: bool = False
    isolated: bool = False

    def append(self, entries: list[tuple[int, int]]) -> None:
        for epoch, record in entries:
            if epoch > self.cache.latest_epoch:
                self.cache.assign(epoch, len(self.log))
            self.log.append((epoch, record))

    def truncate(self, offset: int) -> None:
        del self.log[offset:]
        self.cache.truncate_from_end(offset)
        self.high_watermark = min(self.high_watermark, offset)


class Simulation:
    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.seed = seed
        self.min_insync = self.random.choice((1, 2))
        self.cluster = ClusterHarness()
        self.replicas = {node_id: Replica(node_id) for node_id in NODES}
        self.processed: dict[int, int] = {}
        self.next_record = 0
        self.acked: dict[int, int] = {}  # offset -> record id, acknowledged with acks=all
        self.waiting: dict[int, tuple[int, list[int]]] = {}  # request key -> (start offset, record ids)
        self.next_key = 0
        self.alters: list[tuple[Replica, PartitionLeader, AlterIsrProposal]] = []
        for node_id in NODES:
            self.cluster.start(node_id)
        self.cluster.create_topic("t", assignment={0: (1, 2, 3)})
        self.apply_commands()

    def fail(self, message: str) -> None:
        raise AssertionError(f"seed {self.seed}: {message}")

    @property
    def now_ms(self) -> int:
        return self.cluster.clock.monotonic_ms()

    # ---- the brokers carry out the controller's commands ---------------------------------------------

    def apply_commands(self) -> None:
        for node_id, broker in self.cluster.brokers.items():
            replica = self.replicas[node_id]
            start = self.processed.get(node_id, 0)
            for outcome in broker.outcomes[start:]:
                for transition in outcome.transitions:
                    self.transition(replica, transition)
            self.processed[node_id] = len(broker.outcomes)
        self.check_history()

    def transition(self, replica: Replica, transition: object) -> None:
        if isinstance(transition, BecomeLeader):
            info = transition.info
            self.resign(replica)
            self.check_clean_leader(replica, info.leader_epoch)
            replica.cache.assign(info.leader_epoch, len(replica.log))
            replica.leader = PartitionLeader(
                TP,
                replica.node_id,
                leader_epoch=info.leader_epoch,
                partition_epoch=info.partition_epoch,
                replicas=info.replicas,
                isr=info.isr,
                log_end_offset=len(replica.log),
                high_watermark=replica.high_watermark,
                min_insync_replicas=self.min_insync,
                replica_lag_time_max_ms=LAG_MS,
                now_ms=self.now_ms,
            )
        elif isinstance(transition, BecomeFollower):
            info = transition.info
            self.resign(replica)
            replica.follower = PartitionFollower(
                TP,
                leader_id=info.leader,
                leader_epoch=info.leader_epoch,
                high_watermark=replica.high_watermark,
            )
        elif isinstance(transition, IsrChanged):
            info = transition.info
            if replica.leader is None:
                return  # a follower's ISR changed: nothing for it to do here
            replica.leader.on_partition_state(
                leader_epoch=info.leader_epoch,
                partition_epoch=info.partition_epoch,
                isr=info.isr,
                replicas=info.replicas,
            )
            self.drain(replica)
        elif isinstance(transition, StopReplica):
            self.fail(f"unexpected {transition}")

    def resign(self, replica: Replica) -> None:
        if replica.leader is not None:
            for key, error in replica.leader.resign():
                assert error is ErrorCode.NOT_LEADER_OR_FOLLOWER
                self.waiting.pop(key)
        replica.leader = None
        replica.follower = None

    def check_clean_leader(self, replica: Replica, epoch: int) -> None:
        for offset, record in self.acked.items():
            if offset >= len(replica.log) or replica.log[offset][1] != record:
                self.fail(
                    f"broker {replica.node_id} leads epoch {epoch} without acknowledged offset {offset}"
                )

    def check_history(self) -> None:
        leaders: dict[int, int] = {}
        last_epoch = -1
        for tp, state in self.cluster.history:
            if tp != TP:
                continue
            if leaders.setdefault(state.leader_epoch, state.leader) != state.leader:
                self.fail(
                    f"epoch {state.leader_epoch} had leaders {leaders[state.leader_epoch]} and {state.leader}"
                )
            if state.leader_epoch < last_epoch:
                self.fail(f"leader epoch went back from {last_epoch} to {state.leader_epoch}")
            last_epoch = state.leader_epoch

    # ---- the data path ------------------------------------------------------------------------------------

    def reachable(self, replica: Replica) -> bool:
        return not replica.crashed and not replica.isolated

    def produce(self) -> None:
        leaders = [r for r in self.replicas.values() if r.leader is not None and not r.crashed]
        if not leaders:
            return
        replica = self.random.choice(leaders)
        leader = replica.leader
        assert leader is not None
        acks_all = self.random.random() < 0.7
        if acks_all and leader.check_acks_all() is not ErrorCode.NONE:
            return
        count = self.random.randint(1, 4)
        start = len(replica.log)
        records = list(range(self.next_record, self.next_record + count))
        self.next_record += count
        replica.append([(leader.leader_epoch, record) for record in records])
        leader.on_append(len(replica.log))
        if acks_all:
            key = self.next_key
            self.next_key += 1
            self.waiting[key] = (start, records)
            answer = leader.wait_for_replication(key, len(replica.log), self.now_ms + REQUEST_TIMEOUT_MS)
            if answer is not None:
                self.complete(key, answer, leader)
        self.drain(replica)

    def complete(self, key: int, error: ErrorCode, leader: PartitionLeader) -> None:
        start, records = self.waiting.pop(key)
        if error is not ErrorCode.NONE:
            return
        if leader.high_watermark < start + len(records):
            self.fail("acknowledged above the high watermark")
        for offset, record in enumerate(records, start):
            if self.acked.setdefault(offset, record) != record:
                self.fail(f"offset {offset} acknowledged twice with different records")

    def drain(self, replica: Replica) -> None:
        leader = replica.leader
        if leader is None:
            return
        ready = leader.ready()
        for key, error in ready.completed:
            self.complete(key, error, leader)  # type: ignore[arg-type]
        if ready.alter_isr is not None:
            # In flight until a later step delivers it: other things happen meanwhile.
            self.alters.append((replica, leader, ready.alter_isr))

    def deliver_alter(self) -> None:
        if not self.alters:
            return
        replica, leader, proposal = self.alters.pop(self.random.randrange(len(self.alters)))
        if replica.leader is not leader:
            return  # the leader it came from is gone; so is the connection it would answer on
        if not self.reachable(replica):
            leader.on_alter_isr_response(ErrorCode.REQUEST_TIMED_OUT)
            self.drain(replica)
            return
        topic_id = self.cluster.reader.read_topic("t").topic_id  # type: ignore[union-attr]
        broker = self.cluster.brokers[replica.node_id]
        [reply] = self.cluster.handle(
            AlterPartitionReceived(
                ("alter", replica.node_id),
                replica.node_id,
                broker.registration.epoch,
                (
                    AlterPartitionItem(
                        topic_id, 0, proposal.leader_epoch, proposal.new_isr, proposal.partition_epoch
                    ),
                ),
            )
        )
        assert isinstance(reply, AlterPartitionReply)
        self.apply_commands()
        if replica.leader is not leader:
            return
        if reply.error is not ErrorCode.NONE:
            leader.on_alter_isr_response(reply.error)
        else:
            [result] = reply.partitions
            leader.on_alter_isr_response(
                result.error,
                leader_epoch=result.leader_epoch,
                isr=result.isr,
                partition_epoch=result.partition_epoch,
            )
        self.drain(replica)

    def fetch(self, replica: Replica) -> None:
        follower = replica.follower
        if follower is None or not self.reachable(replica):
            return
        source = self.replicas.get(follower.leader_id)
        if source is None or not self.reachable(source) or source.leader is None:
            return
        leader = source.leader
        if fence_leader_epoch(follower.leader_epoch, leader.leader_epoch) is not ErrorCode.NONE:
            return
        if follower.phase is FollowerPhase.TRUNCATING:
            question = follower.epoch_question(replica.cache)
            if question is None:
                offset = follower.skip_truncation(len(replica.log))
            else:
                epoch, end = source.cache.end_offset_for(question, len(source.log))
                found = follower.on_epoch_answer(ErrorCode.NONE, epoch, end, replica.cache, len(replica.log))
                assert found is not None
                offset = found
            replica.truncate(offset)
            if replica.log != source.log[: len(replica.log)]:
                self.fail(f"broker {replica.node_id} kept a divergent tail after truncating to {offset}")
            return
        if leader.on_follower_fetch(replica.node_id, len(replica.log), self.now_ms) is not ErrorCode.NONE:
            self.fail(f"fetch of broker {replica.node_id} at {len(replica.log)} refused")
        chunk = source.log[len(replica.log) : len(replica.log) + self.random.randint(1, 8)]
        replica.append(chunk)
        replica.high_watermark = follower.on_fetch_response(leader.high_watermark, len(replica.log))
        if replica.log != source.log[: len(replica.log)]:
            self.fail(f"broker {replica.node_id} is not a prefix of its leader after a fetch")
        self.drain(source)

    def check_isr(self) -> None:
        for replica in self.replicas.values():
            leader = replica.leader
            if leader is None or not self.reachable(replica):
                continue
            for member in leader.isr:
                if len(self.replicas[member].log) < leader.high_watermark:
                    self.fail(f"ISR member {member} is below the HW {leader.high_watermark}")

    # ---- faults ---------------------------------------------------------------------------------------------

    def crash(self, replica: Replica) -> None:
        self.resign(replica)
        replica.crashed = True
        replica.high_watermark = 0
        self.cluster.crash(replica.node_id)
        self.apply_commands()

    def isolate(self, replica: Replica) -> None:
        replica.isolated = True
        self.cluster.crash(replica.node_id)  # its session ends; the process runs on
        self.apply_commands()

    def recover(self, replica: Replica) -> None:
        replica.crashed = replica.isolated = False
        self.processed[replica.node_id] = 0
        self.cluster.start(replica.node_id)
        self.apply_commands()

    def tick(self) -> None:
        self.cluster.clock.advance(self.random.randint(1, 2_500))
        for replica in self.replicas.values():
            if replica.leader is not None and not replica.crashed:
                replica.leader.tick(self.now_ms)
                self.drain(replica)
        self.cluster.tick(0)
        self.apply_commands()

    def step(self) -> None:
        roll = self.random.random()
        down = [r for r in self.replicas.values() if r.crashed or r.isolated]
        up = [r for r in self.replicas.values() if not (r.crashed or r.isolated)]
        if roll < 0.30:
            self.produce()
        elif roll < 0.40:
            self.deliver_alter()
        elif roll < 0.75:
            for replica in self.random.sample(list(self.replicas.values()), 3):
                self.fetch(replica)
        elif roll < 0.85:
            self.tick()
        elif roll < 0.90 and len(up) > 1:
            self.crash(self.random.choice(up))
        elif roll < 0.93 and len(up) > 1:
            self.isolate(self.random.choice(up))
        elif down:
            self.recover(self.random.choice(down))
        self.check_isr()

    def converge(self) -> None:
        for replica in self.replicas.values():
            if replica.crashed or replica.isolated:
                self.recover(replica)
        for _ in range(400):
            for replica in self.replicas.values():
                self.fetch(replica)
            while self.alters:
                self.deliver_alter()
            self.tick()
            leaders = [r for r in self.replicas.values() if r.leader is not None]
            if len(leaders) == 1:
                leader = leaders[0]
                assert leader.leader is not None
                if all(r.log == leader.log for r in self.replicas.values()) and len(leader.leader.isr) == 3:
                    break
        else:
            self.fail("the cluster did not converge after the faults stopped")
        [leader] = [r for r in self.replicas.values() if r.leader is not None]
        for offset, record in self.acked.items():
            if leader.log[offset][1] != record:
                self.fail(f"acknowledged offset {offset} lost")
        state = self.cluster.state("t")
        assert state.leader == leader.node_id and set(state.isr) == set(NODES)


@pytest.mark.parametrize("seed", range(40))
def test_random_faults_keep_the_replication_invariants(seed: int) -> None:
    simulation = Simulation(seed)
    for _ in range(250):
        simulation.step()
    simulation.converge()
    assert simulation.next_record > 0
