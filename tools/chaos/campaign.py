"""One campaign: start the cluster, run the workload, inject the seeded faults, heal, check.

The timeline of the run (faults with the roles their target had, leader, ISR and replica changes,
client errors, rebalances, reassignments with ``--reassign``) is written as JSON, and as a plot when
matplotlib is installed.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from strom.protocol.records.header import iter_batch_headers

from . import checker
from .cluster import ChaosCluster
from .schedule import FAULT_KINDS, Fault, make_schedule
from .workload import AdminThread, Evidence, GroupMember, Observer, ProducerThread, ReassignThread, Worker

TOPIC = "chaos-events"
GROUP = "chaos-group"
PARTITIONS = 6
PRODUCERS = 2
MEMBERS = 3
CONVERGE_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 120.0
CREATE_TIMEOUT_S = 180.0


@dataclass
class Settings:
    seed: int
    duration_s: float
    work_dir: Path
    output_dir: Path
    brokers: int = 3
    kinds: tuple[str, ...] = FAULT_KINDS
    # Also move replicas of the topic while the faults run (ReassignThread), and every partition
    # back to every broker before the convergence check.
    reassign: bool = False


@dataclass
class Outcome:
    settings: Settings
    schedule: list[Fault]
    findings: checker.Findings
    faults_by_kind: dict[str, int]
    converge_s: float | None
    sessions_ended: int  # partition-zookeeper faults that outlasted the broker's session
    producer_errors: int
    records_processed: int
    timeline_path: Path
    plot_path: Path | None
    worker_failures: list[str] = field(default_factory=list)
    broker_exits: list[str] = field(default_factory=list)
    # With --reassign: the ReassignThread's counts (started, refused, completed, changed in
    # progress, skipped; "restore ..." for the moves back to every broker), why moves were
    # refused, and how long the moves back took (None: not done in time).
    moves: dict[str, int] = field(default_factory=dict)
    refusals: dict[str, int] = field(default_factory=dict)
    restore_s: float | None = None

    @property
    def violations(self) -> dict[str, list[str]]:
        found = dict(self.findings.violations)
        if self.worker_failures:
            found["client failures"] = self.worker_failures
        if self.broker_exits:
            found["brokers that exited on their own"] = self.broker_exits
        return found


def run(settings: Settings, log: Any = print) -> Outcome:
    settings.output_dir.mkdir(parents=True, exist_ok=True)
    cluster = ChaosCluster(settings.work_dir, settings.brokers)
    schedule = make_schedule(settings.seed, settings.duration_s, cluster.node_ids, settings.kinds)
    log(f"seed {settings.seed}: {len(schedule)} faults over {settings.duration_s:.0f} s")
    evidence = Evidence()
    timeline: list[dict[str, Any]] = []
    failures: list[str] = []
    exits: list[str] = []
    sessions_ended = 0
    started = time.monotonic()
    try:
        cluster.start()
        _create_topic(cluster.bootstrap)
        observer = Observer("observer", evidence, cluster.bootstrap, GROUP, TOPIC, PARTITIONS)
        producers = [
            ProducerThread(f"producer-{i}", evidence, cluster.bootstrap, TOPIC) for i in range(PRODUCERS)
        ]
        members = [
            GroupMember(f"member-{i}", evidence, cluster.bootstrap, GROUP, TOPIC) for i in range(MEMBERS)
        ]
        admin = AdminThread("admin", evidence, cluster.bootstrap)
        workers: list[Worker] = [observer, *producers, *members, admin]
        reassigner = None
        if settings.reassign:
            reassigner = ReassignThread(
                "reassigner", evidence, cluster.bootstrap, TOPIC, PARTITIONS, cluster.node_ids, settings.seed
            )
            workers.append(reassigner)
        for worker in workers:
            worker.start()
        campaign_start = time.monotonic()
        for fault in schedule:
            _sleep_until(campaign_start + fault.at_s)
            roles = _roles(observer, fault)
            log(f"  {fault.describe()}{roles}")
            timeline.append(
                {"t": time.monotonic() - started, "event": "fault", **fault.as_json(), "roles": roles}
            )
            _note_exits(cluster, exits, timeline, started, log)
            session = _registration_session(cluster, fault)
            _inject(cluster, fault)
            _sleep_until(campaign_start + fault.at_s + fault.duration_s)
            healed: dict[str, Any] = {"kind": fault.kind, "target": fault.target}
            if session is not None:
                # Cut from ZooKeeper, the broker cannot register again before the cut heals: its
                # registration is gone or under another session only if the session ended.
                healed["session_ended"] = _registration_session(cluster, fault) != session
                sessions_ended += healed["session_ended"]
                log(f"    its ZooKeeper session {'ended' if healed['session_ended'] else 'lived'}")
            _heal(cluster, fault)
            timeline.append({"t": time.monotonic() - started, "event": "healed", **healed})
        _sleep_until(campaign_start + settings.duration_s)
        faults_end = time.monotonic()
        if reassigner is not None:
            reassigner.stopping.set()  # no move starts after the faults
        # The faults stop: everything back, then the cluster must converge.
        _note_exits(cluster, exits, timeline, started, log)
        cluster.heal_all()
        converge_deadline = time.monotonic() + CONVERGE_TIMEOUT_S
        unrestored: list[str] = []
        if reassigner is not None:
            # Every partition back on every broker, within the convergence budget: then the
            # checks below are the same as without moves.
            reassigner.stop()
            timeline.append({"t": time.monotonic() - started, "event": "restore"})
            if reassigner.restore(converge_deadline):
                log(f"  every partition back on every broker in {reassigner.restore_s:.1f} s")
            else:
                unrestored.append(
                    f"partitions not back on every broker (or still moving) within "
                    f"{CONVERGE_TIMEOUT_S:.0f} s of the faults stopping"
                )
                log("  not every partition back on every broker")
        converge_s = _wait_converged(cluster, faults_end, converge_deadline)
        log(
            f"  converged {converge_s:.1f} s after the faults stopped"
            if converge_s is not None
            else "  not converged"
        )
        for producer in producers:
            producer.stopping.set()
        for producer in producers:
            producer.stop()
            left = producer.flush(DRAIN_TIMEOUT_S)
            if left:
                failures.append(f"{producer.name}: {left} records never got a delivery report")
        admin.stop()
        _wait_drained(evidence, DRAIN_TIMEOUT_S)
        for worker in [*members, observer]:
            worker.stop()
        failures.extend(f"{worker.name}: {worker.failure}" for worker in workers if worker.failure)
        log_contents = _read_log(cluster.bootstrap)
        findings = _check(evidence, log_contents, campaign_start, faults_end)
        if converge_s is None:
            findings.not_converged.append(
                f"no full ISR within {CONVERGE_TIMEOUT_S:.0f} s of the faults stopping"
            )
        findings.not_converged.extend(unrestored)
    finally:
        cluster.stop()
    findings.not_converged.extend(checker.replicas_identical(_replica_batches(cluster)))
    timeline_path, plot_path = _write_timeline(settings, evidence, timeline, started)
    return Outcome(
        settings,
        schedule,
        findings,
        dict(Counter(fault.kind for fault in schedule)),
        converge_s,
        sessions_ended,
        len([e for e in evidence.client_errors if e[1].startswith("producer")]),
        len(evidence.processed),
        timeline_path,
        plot_path,
        failures,
        exits,
        dict(reassigner.counts) if reassigner is not None else {},
        dict(reassigner.refusals) if reassigner is not None else {},
        reassigner.restore_s if reassigner is not None else None,
    )


def _note_exits(
    cluster: ChaosCluster, exits: list[str], timeline: list[dict[str, Any]], started: float, log: Any
) -> None:
    """A broker that exited without being killed is a violation (it is started again, so the
    campaign goes on with every broker)."""
    for exit_text in cluster.exited_on_their_own():
        log(f"    {exit_text}")
        exits.append(exit_text)
        timeline.append({"t": time.monotonic() - started, "event": "exited", "detail": exit_text})


def _sleep_until(moment: float) -> None:
    delay = moment - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _create_topic(bootstrap: str) -> None:
    """The campaign's topic, once every broker is up (replication factor 3): retried until made."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + CREATE_TIMEOUT_S
    while True:
        try:
            admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)])[
                TOPIC
            ].result(30)
            break
        except KafkaException as error:
            if error.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                break
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
        except TimeoutError:  # no answer in 30 s (a busy machine): ask again
            if time.monotonic() > deadline:
                raise
    while time.monotonic() < deadline:
        described = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
        if (
            described is not None
            and described.error is None
            and all(p.leader >= 0 for p in described.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{TOPIC} has no leader for every partition")


def _roles(observer: Observer, fault: Fault) -> str:
    if fault.target is None:
        return ""
    snapshot = observer.snapshot
    roles = []
    if snapshot.get(-1, (None,))[0] == fault.target:
        roles.append("controller")
    led = [str(p) for p, (leader, _) in snapshot.items() if p >= 0 and leader == fault.target]
    if led:
        roles.append(f"leader of {TOPIC} {','.join(led)}")
    return f" ({'; '.join(roles)})" if roles else ""


def _inject(cluster: ChaosCluster, fault: Fault) -> None:
    if fault.kind == "kill":
        assert fault.target is not None
        cluster.kill(fault.target)
    elif fault.kind == "pause":
        assert fault.target is not None
        cluster.pause(fault.target)
    elif fault.kind == "partition-internal":
        assert fault.target is not None
        cluster.cut_from_brokers(fault.target)
    elif fault.kind == "partition-clients":
        assert fault.target is not None
        cluster.cut_from_clients(fault.target)
    elif fault.kind == "partition-zookeeper":
        assert fault.target is not None
        cluster.cut_from_zookeeper(fault.target)
    else:
        cluster.kill_zookeeper()


def _heal(cluster: ChaosCluster, fault: Fault) -> None:
    if fault.kind == "kill":
        assert fault.target is not None
        cluster.restart(fault.target)
    elif fault.kind == "pause":
        assert fault.target is not None
        cluster.resume(fault.target)
    elif fault.kind.startswith("partition-"):
        assert fault.target is not None
        cluster.heal_network(fault.target)
    else:
        cluster.start_zookeeper()


def _registration_session(cluster: ChaosCluster, fault: Fault) -> int | None:
    """For a cut from ZooKeeper, the session holding its target's registration (0: none); None for
    any other fault."""
    if fault.kind != "partition-zookeeper":
        return None
    assert fault.target is not None
    return cluster.registration_session(fault.target) or 0


def _wait_converged(cluster: ChaosCluster, since: float, deadline: float) -> float | None:
    """Every broker registered and every partition of every topic led with its full ISR, by
    ``deadline``; how long after ``since`` (None: not by then)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 5000})
    everyone = sorted(cluster.brokers)
    while time.monotonic() < deadline:
        try:
            metadata = admin.list_topics(timeout=5)
            whole = sorted(metadata.brokers) == everyone and metadata.controller_id in everyone
            for described in metadata.topics.values():
                if described.error is not None:
                    whole = False
                    continue
                for partition in described.partitions.values():
                    if partition.leader < 0 or sorted(partition.isrs) != sorted(partition.replicas):
                        whole = False
            if whole:
                return time.monotonic() - since
        except Exception:
            pass
        time.sleep(0.5)
    return None


def _wait_drained(evidence: Evidence, timeout_s: float) -> None:
    """Until the group has processed every acknowledged record (or the timeout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with evidence.lock:
            ends: dict[int, int] = {}
            for record in evidence.acked:
                if record.offset is not None:
                    ends[record.partition] = max(ends.get(record.partition, -1), record.offset)
            done: dict[int, int] = {}
            for event in evidence.processed:
                done[event.partition] = max(done.get(event.partition, -1), event.offset)
        if all(done.get(partition, -1) >= end for partition, end in ends.items()):
            return
        time.sleep(0.5)


def _read_log(bootstrap: str) -> dict[int, dict[int, bytes]]:
    """Every record of the topic from offset 0, as a consumer without a group reads it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "chaos-reader",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    found: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    try:
        deadline = time.monotonic() + 300
        ends: dict[int, int] = {}
        while len(ends) < PARTITIONS:
            for partition in range(PARTITIONS):
                if partition in ends:
                    continue
                try:
                    ends[partition] = consumer.get_watermark_offsets(
                        TopicPartition(TOPIC, partition), timeout=30
                    )[1]
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        while time.monotonic() < deadline and any(
            len(found[p]) < ends[p] and (max(found[p], default=-1) + 1) < ends[p] for p in range(PARTITIONS)
        ):
            for message in consumer.consume(1000, 1.0):
                index, offset, value = message.partition(), message.offset(), message.value()
                if message.error() is None and index is not None and offset is not None:
                    found[index][offset] = value if value is not None else b""
    finally:
        consumer.close()
    return found


def _check(
    evidence: Evidence, log: dict[int, dict[int, bytes]], start: float, end: float
) -> checker.Findings:
    with evidence.lock:
        acked = checker.with_offsets(evidence.acked, log)
        findings = checker.Findings(
            acknowledged=len(acked),
            acknowledged_without_offset=sum(1 for record in evidence.acked if record.offset is None),
        )
        findings.lost = checker.lost_records(acked, log)
        findings.duplicates = checker.duplicated_values(log)
        findings.consumption_gaps = checker.consumption_gaps(evidence.processed)
        findings.unprocessed = checker.unprocessed_records(acked, evidence.processed)
        findings.commit_regressions = checker.commit_regressions(
            evidence.committed, evidence.observed_commits
        )
        findings.double_ownerships = checker.double_ownerships(evidence.assigned)
        findings.longest_unavailability_s = checker.longest_unavailability(evidence.acked, start, end)
    return findings


def _replica_batches(cluster: ChaosCluster) -> dict[int, dict[int, list[tuple[int, int, int]]]]:
    """Each replica's batches of each partition of the topic, read from its files (brokers stopped)."""
    found: dict[int, dict[int, list[tuple[int, int, int]]]] = {}
    for node_id, broker in cluster.brokers.items():
        for partition in range(PARTITIONS):
            directory = broker.process.data_dir / f"{TOPIC}-{partition}"
            if not directory.is_dir():
                continue
            batches: list[tuple[int, int, int]] = []
            for segment in sorted(directory.glob("*.log")):
                batches.extend(
                    (h.base_offset, h.last_offset, h.crc) for h in iter_batch_headers(segment.read_bytes())
                )
            found.setdefault(partition, {})[node_id] = batches
    return found


def _write_timeline(
    settings: Settings, evidence: Evidence, timeline: list[dict[str, Any]], started: float
) -> tuple[Path, Path | None]:
    events = list(timeline)
    with evidence.lock:
        events += [
            {"t": at - started, "event": "leader", "partition": partition, "leader": leader, "isr": list(isr)}
            for at, partition, leader, isr in evidence.leaders
        ]
        events += [
            {"t": at - started, "event": "client-error", "client": client, "error": error}
            for at, client, error in evidence.client_errors
        ]
        events += [
            {"t": at - started, "event": "replicas", "partition": partition, "replicas": list(replicas)}
            for at, partition, replicas in evidence.replicas
        ]
        events += [
            {"t": at - started, "event": "move", "partition": partition, "target": list(target), "what": what}
            for at, partition, target, what in evidence.moves
        ]
        events += [
            {
                "t": e.at - started,
                "event": "assigned",
                "member": e.member,
                "generation": e.generation,
                "partitions": list(e.partitions),
            }
            for e in evidence.assigned
        ]
        acknowledged_per_second = Counter(int(record.at - started) for record in evidence.acked)
    events.sort(key=lambda event: event["t"])
    throughput = sorted(acknowledged_per_second.items())
    path = settings.output_dir / f"timeline-seed-{settings.seed}.json"
    path.write_text(
        json.dumps(
            {
                "seed": settings.seed,
                "duration_s": settings.duration_s,
                "events": events,
                "acknowledged_per_second": throughput,
            },
            indent=1,
        )
    )
    return path, _plot(settings, events, throughput)


FAULT_COLOURS = {
    "kill": "tab:red",
    "pause": "tab:orange",
    "partition-internal": "tab:purple",
    "partition-clients": "tab:blue",
    "partition-zookeeper": "tab:pink",
    "zookeeper-restart": "tab:brown",
}


def _plot(settings: Settings, events: list[dict[str, Any]], throughput: list[tuple[int, int]]) -> Path | None:
    """Faults as shaded spans; each partition's leader (and the controller) as a step line;
    reassignments started and completed as triangles under their partition; client errors as
    ticks; below, records acknowledged per second."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, (axis, rate) = plt.subplots(
        2, 1, figsize=(14, 7), sharex=True, gridspec_kw={"height_ratios": [3, 1]}
    )
    end = max([event["t"] for event in events] + [float(second) for second, _ in throughput] + [0.0])
    starts: dict[tuple[str, Any], float] = {}
    for event in events:
        if event["event"] == "fault":
            starts[(event["kind"], event["target"])] = event["t"]
        elif event["event"] == "healed":
            begin = starts.pop((event["kind"], event["target"]), None)
            if begin is not None:
                for panel in (axis, rate):
                    panel.axvspan(begin, event["t"], color=FAULT_COLOURS[event["kind"]], alpha=0.2)
                where = "ZooKeeper" if event["target"] is None else f"broker {event['target']}"
                label = f"{event['kind']} {where}"
                if "session_ended" in event:
                    label += " (session ended)" if event["session_ended"] else " (session lived)"
                axis.text(begin, PARTITIONS + 0.3, label, fontsize=7, rotation=20)
    for partition in range(-1, PARTITIONS):
        points = [
            (e["t"], e["leader"]) for e in events if e["event"] == "leader" and e["partition"] == partition
        ]
        if points:
            points.append((end, points[-1][1]))
            times, leaders = zip(*points, strict=True)
            axis.step(
                times,
                [partition + 0.1 * leader for leader in leaders],
                where="post",
                label="controller" if partition < 0 else f"partition {partition}",
            )
    for what, marker, colour in (("started", "v", "tab:green"), ("completed", "^", "tab:olive")):
        moves = [e for e in events if e["event"] == "move" and e["what"].endswith(what)]
        if moves:
            axis.plot(
                [e["t"] for e in moves],
                [e["partition"] - 0.3 for e in moves],
                marker,
                color=colour,
                markersize=4,
                label=f"reassignments {what}",
            )
    errors = [e["t"] for e in events if e["event"] == "client-error"]
    axis.plot(errors, [-1.6] * len(errors), "|", color="black", label="client errors")
    axis.set_ylabel("partition + 0.1 x leader id\n(-1: the controller)")
    axis.set_title(f"chaos campaign, seed {settings.seed}")
    axis.legend(loc="upper right", fontsize=7, ncol=4)
    if throughput:
        seconds, counts = zip(*throughput, strict=True)
        rate.bar(seconds, counts, width=1.0, align="edge", color="tab:green")
    rate.set_ylabel("acknowledged / s")
    rate.set_xlabel("seconds since the cluster started")
    path = settings.output_dir / f"timeline-seed-{settings.seed}.png"
    figure.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(figure)
    return path


def summary(outcome: Outcome) -> str:
    findings = outcome.findings
    lines = [
        f"chaos campaign: seed {outcome.settings.seed}, {outcome.settings.duration_s:.0f} s of faults, "
        f"{outcome.settings.brokers} brokers",
        "",
        "| | |",
        "|---|---:|",
        *(f"| faults: {kind} | {count} |" for kind, count in sorted(outcome.faults_by_kind.items())),
        f"| partition-zookeeper that outlasted the session | {outcome.sessions_ended} |",
        f"| records acknowledged | {findings.acknowledged:,} |",
        f"| acknowledged without an offset (found by value) | {findings.acknowledged_without_offset:,} |",
        f"| records processed by the group | {outcome.records_processed:,} |",
        f"| producer errors reported (retried) | {outcome.producer_errors} |",
        f"| lost | {len(findings.lost)} |",
        f"| duplicates | {len(findings.duplicates)} |",
        f"| consumption gaps | {len(findings.consumption_gaps)} |",
        f"| acknowledged but never processed | {len(findings.unprocessed)} |",
        f"| committed offset regressions | {len(findings.commit_regressions)} |",
        f"| double ownerships | {len(findings.double_ownerships)} |",
        f"| brokers that exited on their own | {len(outcome.broker_exits)} |",
        f"| converged after the faults (s) | {'no' if outcome.converge_s is None else f'{outcome.converge_s:.1f}'} |",
        f"| replicas identical | {'yes' if not any('replicas differ' in item for item in findings.not_converged) else 'no'} |",
        *_move_rows(outcome),
        "",
        "longest unavailability per partition (s): "
        + ", ".join(f"{p}: {s:.1f}" for p, s in sorted(findings.longest_unavailability_s.items())),
        f"timeline: {outcome.timeline_path}" + (f", plot: {outcome.plot_path}" if outcome.plot_path else ""),
    ]
    violations = outcome.violations
    if violations:
        lines.append("")
        lines.append("VIOLATIONS:")
        for name, items in violations.items():
            lines.append(f"  {name}: {len(items)}, e.g. {items[:3]}")
    else:
        lines.append("no violation")
    return "\n".join(lines)


def _move_rows(outcome: Outcome) -> list[str]:
    """The summary's rows about reassignments (--reassign only)."""
    if not outcome.settings.reassign:
        return []
    moves = outcome.moves
    refusals = ", ".join(f"{reason} {count}" for reason, count in sorted(outcome.refusals.items()))
    restored = "not in time" if outcome.restore_s is None else f"{outcome.restore_s:.1f} s"
    return [
        f"| reassignments started (accepted by the controller) | {moves.get('started', 0)} |",
        f"| of which changed a move in progress | {moves.get('changed in progress', 0)} |",
        f"| reassignments refused (error or no answer) | {moves.get('refused', 0)} |",
        f"| reassignments completed (ended on their target) | {moves.get('completed', 0)} |",
        f"| draws without a move (no answer, or Metadata behind) | {moves.get('skipped', 0)} |",
        f"| moves back to every broker after the faults: started (changing a move in progress) "
        f"/ refused / completed | {moves.get('restore started', 0)} "
        f"({moves.get('restore changed in progress', 0)}) / {moves.get('restore refused', 0)} / "
        f"{moves.get('restore completed', 0)} |",
        f"| every partition back on every broker after | {restored} |",
        *([f"| refusals by reason | {refusals} |"] if refusals else []),
    ]
