"""The ``strom`` command."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import strom
from strom.cli import (
    acls,
    bench,
    cluster,
    configs,
    console,
    consume,
    groups,
    log_dump,
    produce,
    quotas,
    topics,
    transactions,
    users,
)
from strom.cli.errors import describe_kafka_error
from strom.cli.output import CliError, UsageError
from strom.cli.pipeline import add_pipeline_parser
from strom.client.errors import KafkaError


def _broker(arguments: argparse.Namespace) -> int:
    from strom.broker.config import BrokerConfig, BrokerConfigError, help_config_text, read_properties

    if arguments.help_config:
        print(help_config_text())
        return 0
    values: dict[str, str] = {}
    try:
        if arguments.config:
            values.update(read_properties(Path(arguments.config)))
        for assignment in arguments.set or []:
            key, separator, value = assignment.partition("=")
            if not separator or not key.strip():
                raise BrokerConfigError(f"--set takes key=value, got {assignment!r}")
            values[key.strip()] = value.strip()
        if arguments.zookeeper is not None:
            values["zookeeper.connect"] = arguments.zookeeper
        if arguments.node_id is not None:
            values["node.id"] = str(arguments.node_id)
        data_dir = arguments.data_dir or values.get("log.dirs") or values.get("log.dir") or "./data"
        if "," in data_dir:
            raise BrokerConfigError(
                f"log.dirs: {data_dir!r} names several directories; a strom broker keeps its data in one"
            )
        config = BrokerConfig(
            host=arguments.host, port=arguments.port, data_dir=Path(data_dir), values=values
        )
        from strom.broker.listener_security import check_listener_security
        from strom.security.credentials import parse_add_scram

        check_listener_security(config)  # keystores and JAAS users, before anything is created
        add_scram = [parse_add_scram(text) for text in arguments.add_scram or []]
    except (BrokerConfigError, OSError, ValueError) as error:
        print(f"strom broker: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, arguments.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from strom.broker.run import run_broker

    beside = None
    if arguments.console_port is not None:
        from strom.console.app import ConsoleOptions
        from strom.console.server import BrokerConsole

        login_settings = None
        if arguments.console_login:
            try:
                login_settings = console.broker_console_login_settings(config)
            except BrokerConfigError as error:
                print(f"strom broker: {error}", file=sys.stderr)
                return 2
        options = ConsoleOptions(read_only=arguments.console_read_only, login=arguments.console_login)
        beside = BrokerConsole(options, arguments.console_port, login_settings=login_settings)
    return run_broker(config, metrics_port=arguments.metrics_port, add_scram=add_scram, beside=beside)


def _port_number(text: str) -> int:
    """A TCP port for argparse: 0 (any free port) to 65535."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is out of range (0..65535; 0 picks a free port)")
    return port


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strom",
        description="strom: a Kafka-compatible streaming platform (broker, clients, tools).",
    )
    parser.add_argument("--version", action="version", version=f"strom {strom.__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="show the client library's log on stderr (-v: info, -vv: debug; default: warnings only)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    broker = commands.add_parser(
        "broker",
        help="run a broker",
        description=(
            "Run a strom broker that speaks the Kafka protocol: a single node, or with --zookeeper one "
            "broker of a replicated cluster. Stops cleanly on SIGTERM or SIGINT (in a cluster it first "
            "moves its leaderships to other brokers). "
            "It listens where `listeners` says (--config FILE or --set; PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL: "
            "docs/security.md), else on 127.0.0.1:9092; "
            "--host and --port replace the host and port of the first listener. Kafka settings strom does "
            "not use are accepted with a warning; unknown keys are refused. It locks its data directory "
            "(a second broker on the same directory exits, naming the first one's PID) and raises its "
            "open-files limit to the hard limit, which sets how many partitions it accepts."
        ),
    )
    broker.add_argument(
        "--host",
        default=None,
        help="address to listen on (default 127.0.0.1, or the host of the first entry of listeners)",
    )
    broker.add_argument(
        "--port",
        type=_port_number,
        default=None,
        help="port to listen on, 0..65535 (default 9092, or the port of the first entry of listeners;"
        " 0 picks a free one)",
    )
    broker.add_argument(
        "--data-dir", default=None, help="directory for the logs (default ./data, or log.dirs)"
    )
    broker.add_argument(
        "--config", default=None, metavar="FILE", help="a properties file with Kafka's key names"
    )
    broker.add_argument(
        "--zookeeper",
        default=None,
        metavar="HOST:PORT[,HOST:PORT][/chroot]",
        help="join the cluster coordinated by this ZooKeeper ensemble (zookeeper.connect); "
        "without it the broker is a single node",
    )
    broker.add_argument(
        "--node-id",
        type=int,
        default=None,
        metavar="N",
        help="this broker's id, unique in its cluster (node.id; default 0)",
    )
    broker.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="one configuration key (repeatable; wins over --config)",
    )
    broker.add_argument(
        "--metrics-port",
        type=_port_number,
        default=None,
        metavar="PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (off unless given; 0 picks a free port)",
    )
    broker.add_argument(
        "--console-port",
        type=_port_number,
        default=None,
        metavar="PORT",
        help="serve the web console for this broker at http://127.0.0.1:PORT/ (off unless given; it"
        " reads the broker through its first PLAINTEXT listener; docs/console.md)",
    )
    broker.add_argument(
        "--console-read-only", action="store_true", help="with --console-port: a console that changes nothing"
    )
    broker.add_argument(
        "--console-login",
        action="store_true",
        help="with --console-port: every page needs a login with a SASL username and password, checked"
        " through the broker's first SASL_PLAINTEXT listener, and the user's ACLs decide what the"
        " console shows and may change (docs/console.md)",
    )
    broker.add_argument(
        "--add-scram",
        action="append",
        metavar="MECHANISM=[name=USER,password=PASSWORD]",
        help="store SCRAM credentials of a user at start, in kafka-storage's form, e.g."
        " 'SCRAM-SHA-512=[name=admin,password=admin-secret]' (repeatable; iterations=N optional)",
    )
    broker.add_argument("--help-config", action="store_true", help="list every configuration key and exit")
    broker.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )
    broker.set_defaults(run=_broker)
    for command_group in (
        topics,
        configs,
        acls,
        quotas,
        produce,
        consume,
        groups,
        transactions,
        bench,
        log_dump,
        cluster,
        console,
    ):
        command_group.register(commands)
    users.register(commands)
    add_pipeline_parser(commands)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, like Ctrl-C's KeyboardInterrupt: the same clean-up
    runs (a consumer leaves its group and prints its summary, a producer delivers what it has)."""


def _raise_terminated(signal_number: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def _log_to_stderr(verbosity: int) -> Iterator[None]:
    """The client's log, one ``strom: LEVEL: message`` line each; warnings and worse unless -v.
    (Retries of a missing broker log at info: the command itself says what failed, once.)"""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("strom: %(levelname)s: %(message)s"))
    logger = logging.getLogger("strom")
    previous_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` in the main thread while the command runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``strom`` command. Exit codes: 0 ok, 1 runtime error, 2 usage error, 130 after
    Ctrl-C and 143 after SIGTERM (``consume`` stops on either and exits 0)."""
    parser = build_parser()
    arguments = parser.parse_args(argv)
    if arguments.command == "broker":
        # The broker sets up its own log and stops cleanly on SIGTERM by itself.
        result: int = arguments.run(arguments)
        return result
    with _log_to_stderr(arguments.verbose), _sigterm_raises():
        return _run_command(parser, arguments)


def _run_command(parser: argparse.ArgumentParser, arguments: argparse.Namespace) -> int:
    started = time.monotonic()
    try:
        result: int = arguments.run(arguments)
    except UsageError as error:
        # The same shape and code argparse gives its own usage errors.
        command_parser: argparse.ArgumentParser = getattr(arguments, "command_parser", parser)
        command_parser.print_usage(sys.stderr)
        print(f"{command_parser.prog}: error: {error}", file=sys.stderr)
        return 2
    except CliError as error:
        print(f"strom: error: {error}", file=sys.stderr)
        return 1
    except KafkaError as error:
        elapsed_s = time.monotonic() - started
        print(f"strom: error: {describe_kafka_error(error, arguments, elapsed_s)}", file=sys.stderr)
        return 1
    except Terminated:
        print("strom: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("strom: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (``strom consume ... | head``): not an error of ours.
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps Python from failing at exit
        return 0
    return result


if __name__ == "__main__":
    sys.exit(main())
