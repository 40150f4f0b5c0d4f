"""README "Running a cluster", command by command: ``strom cluster up`` until Ctrl-C, and one
``strom broker --zookeeper ... --node-id N`` per broker with ``listeners`` / ``advertised.listeners``
(loopback addresses and free ports instead of the README's host names and 9092), ``strom topics
describe`` showing leader, replicas and ISR, and what a client sees across a ``kill -9`` and a
SIGTERM of a leader."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.cli.local_zookeeper import free_port

from .cluster_support import wait_until
from .zookeeper_server import ZooKeeperServer

STROM = [sys.executable, "-m", "strom.cli.main"]
COMMAND_TIMEOUT_S = 60
UP_TIMEOUT_S = 120
SESSION_TIMEOUT_MS = 6_000
CREATE_ARGUMENTS = ("--partitions", "3", "--replication-factor", "3", "--config", "min.insync.replicas=2")
FREE_PORTS = ("--base-port", "0", "--zookeeper-port", "0", "--metrics-base-port", "0")


def strom(*arguments: str, stdin: str | None = None) -> str:
    """Run one ``strom`` command; its stdout (it must succeed)."""
    done = subprocess.run(
        [*STROM, *arguments], input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S
    )
    assert done.returncode == 0, f"strom {' '.join(arguments)} exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def partitions(describe_output: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, ISR) from ``strom topics describe``'s table."""
    lines = describe_output.splitlines()
    header = next(index for index, line in enumerate(lines) if line.startswith("PARTITION"))
    assert lines[header].split()[:4] == ["PARTITION", "LEADER", "REPLICAS", "ISR"], lines[header]
    rows: dict[int, tuple[int, list[int], list[int]]] = {}
    for line in lines[header + 1 :]:
        if not line.strip():
            break
        partition, leader, replicas, isr = line.split()[:4]
        rows[int(partition)] = (
            int(leader),
            [int(r) for r in replicas.split(",")],
            [int(r) for r in isr.split(",") if r],
        )
    return rows


def create_orders(bootstrap: str) -> bool:
    """``strom topics create orders`` with replication factor 3 (refused until 3 brokers registered)."""
    created = subprocess.run(
        [*STROM, "topics", "create", "orders", *CREATE_ARGUMENTS, "--bootstrap-server", bootstrap],
        capture_output=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    return created.returncode == 0


def produce(bootstrap: str, lines: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*STROM, "produce", "orders", "--acks", "all", "--bootstrap-server", bootstrap],
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )


def scrape(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return bytes(answer.read())


def test_cluster_up_serves_a_replicated_topic_until_ctrl_c(tmp_path: Path) -> None:
    command = [
        *STROM,
        "cluster",
        "up",
        "--brokers",
        "3",
        "--data-dir",
        str(tmp_path / "cluster-data"),
        *FREE_PORTS,
    ]
    pids: list[int] = []
    with (
        (tmp_path / "up.err").open("w") as errors,
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True) as up,
    ):
        try:
            assert up.stdout is not None
            printed: list[str] = []
            deadline = time.monotonic() + UP_TIMEOUT_S
            while not printed or printed[-1] != "Ctrl-C stops them all.":
                line = up.stdout.readline()
                assert line, f"cluster up exited: {printed} {(tmp_path / 'up.err').read_text()}"
                printed.append(line.rstrip("\n"))
                assert time.monotonic() < deadline, printed
            text = "\n".join(printed)
            pids = [int(pid) for pid in re.findall(r"\(pid (\d+)", text)]
            assert len(pids) == 4, printed  # ZooKeeper and three brokers
            bootstrap = next(line for line in printed if line.startswith("bootstrap servers: ")).split(": ")[
                1
            ]
            metrics_urls = re.findall(r"metrics (http://\S+/metrics)", text)
            assert len(metrics_urls) == 3, printed

            wait_until(
                lambda: create_orders(bootstrap), "a topic of replication factor 3 (every broker registered)"
            )
            produced = produce(bootstrap, [f"order-{n}" for n in range(100)])
            assert produced.returncode == 0 and "produced 100 of 100" in produced.stderr, produced.stderr
            described = partitions(strom("topics", "describe", "orders", "--bootstrap-server", bootstrap))
            assert sorted(described) == [0, 1, 2]
            assert sorted(leader for leader, _, _ in described.values()) == [1, 2, 3]  # spread
            for leader, replicas, isr in described.values():
                assert sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3] and leader == replicas[0]
            active = [
                b"\nkafka_controller_kafkacontroller_activecontrollercount 1\n" in scrape(url)
                for url in metrics_urls
            ]
            assert sorted(active) == [False, False, True]
        finally:
            up.send_signal(signal.SIGINT)  # Ctrl-C
            assert up.wait(UP_TIMEOUT_S) == 130
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


class BrokerCommand:
    """``strom broker --zookeeper ZK/strom --node-id N`` with its own listener, as on its own machine
    (or the same in a ``server.properties``: ``strom broker --config FILE``)."""

    def __init__(self, node_id: int, zookeeper_connect: str, work_dir: Path, *, config_file: bool) -> None:
        self.node_id = node_id
        self.port = free_port()
        self.log_path = work_dir / f"broker-{node_id}.log"
        data_dir = work_dir / f"broker-{node_id}"
        if config_file:
            # The README's server.properties (a Kafka ZooKeeper-mode one).
            properties = work_dir / f"server-{node_id}.properties"
            properties.write_text(
                f"broker.id={node_id}\n"
                f"zookeeper.connect={zookeeper_connect}\n"
                f"listeners=PLAINTEXT://127.0.0.1:{self.port}\n"
                f"advertised.listeners=PLAINTEXT://localhost:{self.port}\n"
                f"log.dirs={data_dir}\n"
                "default.replication.factor=3\n"
                "min.insync.replicas=2\n"
                f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}\n",
                encoding="utf-8",
            )
            self.command = [*STROM, "broker", "--config", str(properties)]
        else:
            self.command = [
                *STROM,
                "broker",
                "--zookeeper",
                zookeeper_connect,
                "--node-id",
                str(node_id),
                "--data-dir",
                str(data_dir),
                "--set",
                f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--set",
                f"advertised.listeners=PLAINTEXT://localhost:{self.port}",
                "--set",
                f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
            ]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def start(self) -> None:
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                self.command, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
            )

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)
        self.process.wait(COMMAND_TIMEOUT_S)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.signal(signal.SIGTERM)


@pytest.fixture
def brokers(zookeeper_server: ZooKeeperServer, tmp_path: Path) -> Iterator[dict[int, BrokerCommand]]:
    # Two addresses of the one server: the connect string's list form, and a chroot.
    connect = f"127.0.0.1:{zookeeper_server.port},localhost:{zookeeper_server.port}/strom"
    started = {
        node_id: BrokerCommand(node_id, connect, tmp_path, config_file=node_id == 3) for node_id in (1, 2, 3)
    }
    try:
        for broker in started.values():
            broker.start()
        yield started
    finally:
        for broker in started.values():
            broker.stop()


def test_one_broker_command_per_machine_and_failover_as_a_client_sees_it(
    brokers: dict[int, BrokerCommand],
) -> None:
    bootstrap = ",".join(broker.address for broker in brokers.values())
    wait_until(lambda: create_orders(bootstrap), "a topic of replication factor 3 (every broker registered)")

    def described() -> dict[int, tuple[int, list[int], list[int]]]:
        return partitions(strom("topics", "describe", "orders", "--bootstrap-server", bootstrap))

    wait_until(lambda: all(len(isr) == 3 for _, _, isr in described().values()), "every ISR whole")
    victim, _, _ = described()[0]
    brokers[victim].signal(signal.SIGKILL)  # kill -9
    live = ",".join(b.address for n, b in brokers.items() if n != victim)
    # Until its session expires, metadata still names the dead broker: describe still prints every
    # partition's leader, replicas and ISR, and says what it could not ask.
    during = subprocess.run(
        [*STROM, "topics", "describe", "orders", "--bootstrap-server", live, "--request-timeout-ms", "2000"],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    assert during.returncode == 0, during.stderr
    assert sorted(partitions(during.stdout)) == [0, 1, 2]

    def moved() -> bool:
        after = partitions(strom("topics", "describe", "orders", "--bootstrap-server", live))
        return all(leader not in (victim, -1) and victim not in isr for leader, _, isr in after.values())

    wait_until(moved, f"leaders moved off broker {victim} and it left every ISR")
    # Two in-sync replicas of three are still min.insync.replicas=2: acks=all goes on.
    produced = produce(live, ["after the kill"])
    assert produced.returncode == 0, produced.stderr
    brokers[victim].start()
    wait_until(
        lambda: all(len(isr) == 3 for _, _, isr in described().values()), f"broker {victim} back in every ISR"
    )

    # SIGTERM: the broker hands its leaderships over before it stops (controlled shutdown).
    leading = {leader for leader, _, _ in described().values()}
    stopping = next(iter(sorted(leading)))
    brokers[stopping].signal(signal.SIGTERM)
    live = ",".join(b.address for n, b in brokers.items() if n != stopping)
    after = partitions(strom("topics", "describe", "orders", "--bootstrap-server", live))
    assert all(leader not in (stopping, -1) and stopping not in isr for leader, _, isr in after.values()), (
        after
    )
