"""``strom cluster up``: a ZooKeeper and N brokers on this machine, for development."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from strom.cli.common import add_command, add_command_group
from strom.cli.output import CliError

__all__ = ["register"]

# Settings of a development cluster: brokers notice a dead peer within seconds, and a stopping
# broker does not wait long for leaderships it cannot move.
DEV_SETTINGS = {
    "zookeeper.session.timeout.ms": "6000",
    "controlled.shutdown.retry.backoff.ms": "1000",
}


def register(commands: Any) -> None:
    subcommands = add_command_group(commands, "cluster", help_text="run a cluster of brokers on this machine")
    up = add_command(
        subcommands,
        "up",
        help_text="start a ZooKeeper and N brokers on 127.0.0.1 until Ctrl-C",
        description=(
            "Start a ZooKeeper (Debian's zookeeper package, run with java) and N strom brokers "
            "(node ids 1..N) on 127.0.0.1, print how to reach them, and wait. Ctrl-C (or SIGTERM) "
            "stops the brokers one after the other (each moves its leaderships to the others) and "
            "then ZooKeeper, all by PID. Data and logs stay in --data-dir: running the command "
            "again brings the same cluster back. Broker 1 serves the web console (docs/console.md) "
            "unless --no-console. For development: the brokers of a real cluster "
            "run on their own machines, one `strom broker --zookeeper ... --node-id N` each."
        ),
        run=_up,
        output=False,
        connects=False,
    )
    up.add_argument("--brokers", type=int, default=3, metavar="N", help="how many brokers (default 3)")
    up.add_argument(
        "--data-dir",
        type=Path,
        default=Path("./cluster-data"),
        help="where ZooKeeper's and the brokers' data and logs go (default ./cluster-data)",
    )
    up.add_argument(
        "--base-port",
        type=int,
        default=9092,
        metavar="PORT",
        help="broker N listens on PORT+N-1 (default 9092; 0 picks free ports)",
    )
    up.add_argument(
        "--zookeeper-port",
        type=int,
        default=2181,
        metavar="PORT",
        help="ZooKeeper's port (default 2181; 0: free)",
    )
    up.add_argument(
        "--metrics-base-port",
        type=int,
        default=None,
        metavar="PORT",
        help="broker N serves Prometheus metrics at http://127.0.0.1:PORT+N-1/metrics (default off; 0: free ports)",
    )
    up.add_argument(
        "--console-port",
        type=int,
        default=None,
        metavar="PORT",
        help="broker 1 serves the web console at http://127.0.0.1:PORT/ (default: a free port)",
    )
    up.add_argument("--no-console", action="store_true", help="serve no web console")
    up.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        default=[],
        help="a configuration key for every broker (repeatable), as strom broker --set",
    )


def _up(arguments: argparse.Namespace) -> int:
    from strom.cli.dev_cluster import BrokerStartError, LocalCluster
    from strom.cli.local_zookeeper import ZooKeeperMissingError, ZooKeeperStartError, free_port

    if not 1 <= arguments.brokers <= 64:
        raise CliError(f"--brokers must be between 1 and 64, not {arguments.brokers}")
    settings = dict(DEV_SETTINGS)
    # __consumer_offsets is made only once offsets.topic.replication.factor brokers are alive
    # (Kafka's default 3): a smaller development cluster replicates it on every broker it has.
    settings["offsets.topic.replication.factor"] = str(min(3, arguments.brokers))
    for assignment in arguments.set:
        key, separator, value = assignment.partition("=")
        if not separator or not key.strip():
            raise CliError(f"--set takes key=value, got {assignment!r}")
        settings[key.strip()] = value.strip()
    data_dir: Path = arguments.data_dir.resolve()
    try:
        cluster = LocalCluster(
            data_dir,
            arguments.brokers,
            settings=settings,
            base_port=arguments.base_port,
            zookeeper_port=arguments.zookeeper_port,
            metrics_base_port=arguments.metrics_base_port,
            console_port=None if arguments.no_console else arguments.console_port or free_port(),
        )
    except ZooKeeperMissingError as error:
        raise CliError(f"{error} (or: make cluster)") from None
    try:
        try:
            cluster.start()
        except (ZooKeeperStartError, BrokerStartError) as error:
            raise CliError(str(error)) from None
        print(f"ZooKeeper  {cluster.zookeeper_connect}  (pid {cluster.zookeeper.pid})")
        for node_id, broker in cluster.brokers.items():
            metrics = f", metrics {broker.metrics_url}" if broker.metrics_url else ""
            print(f"broker {node_id}   {broker.address}  (pid {broker.pid}, log {broker.log_path}{metrics})")
        console_port = cluster.brokers[1].console_port
        if console_port is not None:
            print(f"console    http://127.0.0.1:{console_port}/  (served by broker 1)")
        print(f"bootstrap servers: {cluster.bootstrap}")
        print("Ctrl-C stops them all.", flush=True)
        while True:
            for node_id, broker in cluster.brokers.items():
                if not broker.running:
                    raise CliError(f"broker {node_id} exited:\n{broker.log_tail()}")
            if not cluster.zookeeper.running:
                raise CliError("ZooKeeper exited:\n" + cluster.zookeeper.log_tail())
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("stopping the brokers and ZooKeeper", file=sys.stderr, flush=True)
        raise
    finally:
        cluster.stop()
