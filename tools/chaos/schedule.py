"""The fault schedule of a campaign: made from the seed alone, so one seed replays the same faults.

One fault at a time, each followed by a quiet gap: the cluster (three brokers, replication factor
3, min.insync.replicas 2) can stay available through any single fault, and every invariant must
hold through all of them. Targets are broker ids; which role a broker had when it was hit
(controller, a coordinator, a leader) is what the timeline records.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass

from .cluster import ZOOKEEPER_SESSION_TIMEOUT_MS

FAULT_KINDS = (
    "kill",
    "pause",
    "partition-internal",
    "partition-clients",
    "partition-zookeeper",
    "zookeeper-restart",
)
SESSION_TIMEOUT_S = ZOOKEEPER_SESSION_TIMEOUT_MS / 1000
# How long each kind lasts (seconds, drawn uniformly). A pause outlasts the ZooKeeper session (the
# broker's registration ends while it is stopped: it must come back from that). A cut from
# ZooKeeper is centred on the session timeout: the session ends 5.3-6.0 s into the cut (measured:
# the server counts from the broker's last request or ping), so a little over half the draws end
# it — the others elect new leaders while the cut broker, still reached by clients, believes it
# leads (a zombie) — and the rest heal with the session alive (the broker's ZooKeeper client has
# given up its connection after 4 s and reconnects to the same session).
DURATION_RANGE_S = {
    "kill": (2.0, 8.0),
    "pause": (SESSION_TIMEOUT_S + 1.0, SESSION_TIMEOUT_S + 5.0),
    "partition-internal": (3.0, 10.0),
    "partition-clients": (3.0, 10.0),
    "partition-zookeeper": (SESSION_TIMEOUT_S - 3.0, SESSION_TIMEOUT_S + 3.0),
    "zookeeper-restart": (1.0, 4.0),
}
GAP_RANGE_S = (3.0, 8.0)
FIRST_FAULT_AT_S = 5.0


@dataclass(frozen=True)
class Fault:
    at_s: float  # from the start of the campaign
    kind: str
    target: int | None  # a broker id; None for ZooKeeper
    duration_s: float

    def describe(self) -> str:
        where = "ZooKeeper" if self.target is None else f"broker {self.target}"
        return f"{self.kind} of {where} at {self.at_s:.1f} s for {self.duration_s:.1f} s"

    def as_json(self) -> dict[str, object]:
        return asdict(self)


def make_schedule(
    seed: int, duration_s: float, brokers: list[int], kinds: tuple[str, ...] = FAULT_KINDS
) -> list[Fault]:
    """Faults from ``FIRST_FAULT_AT_S`` until ``duration_s``, each ending before ``duration_s``."""
    assert kinds and set(kinds) <= set(FAULT_KINDS), kinds
    rng = random.Random(seed)
    faults: list[Fault] = []
    at_s = FIRST_FAULT_AT_S
    while True:
        kind = rng.choice(kinds)
        low, high = DURATION_RANGE_S[kind]
        fault_duration_s = round(rng.uniform(low, high), 1)
        target = None if kind == "zookeeper-restart" else rng.choice(brokers)
        if at_s + fault_duration_s > duration_s:
            return faults
        faults.append(Fault(round(at_s, 1), kind, target, fault_duration_s))
        at_s += fault_duration_s + rng.uniform(*GAP_RANGE_S)
