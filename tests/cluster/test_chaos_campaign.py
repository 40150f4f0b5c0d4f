"""The short fault campaign CI runs (``python -m tools.chaos``; docs/chaos.md): 65 seconds of
faults from a seed whose schedule holds one of each kind — first a broker (the first started,
usually the controller, and a leader) cut from ZooKeeper longer than its session (a zombie leader
that clients still reach), then a pause longer than the session, a kill -9 and restart, a
ZooKeeper restart, a broker cut from the clients, a broker cut from the other brokers both ways —
against three brokers under an idempotent acks=all workload, a consumer group committing after
processing and admin operations; then every invariant, checked from what the clients were told."""

from __future__ import annotations

from pathlib import Path

from tools.chaos.campaign import Settings, run, summary
from tools.chaos.schedule import FAULT_KINDS

# make_schedule(33064, 65, [1, 2, 3]) draws each kind of fault once, partition-zookeeper first
# (broker 1, 7.6 s: past the 6 s session) and partition-internal for 7.7 s (past the replica lag).
CI_SEED = 33064
CI_DURATION_S = 65.0


def test_a_short_seeded_campaign_keeps_every_promise(tmp_path: Path) -> None:
    outcome = run(
        Settings(CI_SEED, CI_DURATION_S, tmp_path / "cluster", tmp_path / "out"), log=lambda line: None
    )
    report = summary(outcome)
    print(f"\n{report}")
    assert set(outcome.faults_by_kind) == set(FAULT_KINDS), report
    assert outcome.findings.acknowledged > 1_000, report
    assert outcome.records_processed >= outcome.findings.acknowledged, report
    assert not outcome.violations, report
    assert outcome.timeline_path.exists()
