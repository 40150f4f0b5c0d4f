"""``strom console``: the web console (strom.console) against any Kafka-compatible cluster."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import TYPE_CHECKING, Any

from strom.cli.common import add_command, check_client_config, client_settings, given_client_config

if TYPE_CHECKING:
    from strom.broker.config import BrokerConfig

__all__ = ["broker_console_login_settings", "register"]

DEFAULT_PORT = 8080


def _port_number(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is out of range (0..65535; 0 picks a free port)")
    return port


def add_console_arguments(parser: argparse.ArgumentParser) -> None:
    """The options `strom console` shares with nothing else (the broker has its own --console-*)."""
    parser.add_argument(
        "--console-read-only",
        action="store_true",
        help="show everything, change nothing: no forms, and every POST is refused",
    )
    parser.add_argument(
        "--console-login",
        action="store_true",
        help="every page needs a login with a SASL username and password, and everything the"
        " user does runs through their own clients, so the brokers' ACLs decide (the cluster's"
        " security.protocol and sasl.mechanism from --command-config/-X; docs/console.md)",
    )
    parser.add_argument(
        "--lag-sample-interval-ms",
        type=int,
        default=None,
        metavar="MS",
        help="how often every group's lag is sampled for the lag charts (default 30000)",
    )


def register(commands: Any) -> None:
    parser = add_command(
        commands,
        "console",
        help_text="serve the web console (topics, messages, groups, lag) for a cluster",
        description=(
            "Serve strom's web console at http://HOST:PORT/ until Ctrl-C or SIGTERM: the cluster's "
            "brokers and partitions' health, topics (create, alter configs, delete), a message "
            "browser, and consumer groups with members, lag and an hour of lag trend. It talks to "
            "the cluster with strom's client over the Kafka protocol, so any Kafka-compatible "
            "cluster works. It listens on 127.0.0.1 unless told otherwise and has no login unless "
            "--console-login: see docs/console.md before opening it to a network."
        ),
        run=_console,
        output=False,
    )
    parser.add_argument(
        "--port",
        type=_port_number,
        default=DEFAULT_PORT,
        help=f"port to serve on (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    add_console_arguments(parser)


def _console(arguments: argparse.Namespace) -> int:
    from strom.base import limits
    from strom.cli.output import UsageError
    from strom.client.config import AdminConfig
    from strom.client.errors import ConfigError
    from strom.console.app import ConsoleOptions
    from strom.console.server import ConsoleServer
    from strom.console.source import ClientSource

    interval_ms = arguments.lag_sample_interval_ms
    if interval_ms is None:
        interval_ms = limits.console_lag_sample_interval_ms
    if interval_ms <= 0 or interval_ms > limits.console_lag_window_ms:
        raise UsageError(
            f"--lag-sample-interval-ms must be 1..{limits.console_lag_window_ms}, not {interval_ms}"
        )
    login = arguments.console_login
    from_file, extra = given_client_config(arguments)
    given = {**from_file, **extra}
    # Under --console-login the console may have no credentials of its own: then it has no lag
    # sampler (the users' pages need none), and its config is checked with a user's in place.
    own_credentials = "sasl.username" in given or "sasl.jaas.config" in given
    sasl = str(given.get("security.protocol", "PLAINTEXT")).upper().startswith("SASL_")
    if login and not sasl:
        raise UsageError(
            "--console-login needs security.protocol SASL_PLAINTEXT or SASL_SSL (and sasl.mechanism)"
            " in --command-config or -X: the login is a SASL login to the cluster"
        )
    if login and not own_credentials:
        try:
            AdminConfig.from_settings({**given, "sasl.username": "u", "sasl.password": "p"})
        except ConfigError as error:
            raise UsageError(f"--command-config/-X: {error}") from None
    else:
        check_client_config(arguments, AdminConfig)
    settings = client_settings(arguments, passthrough=True)
    options = ConsoleOptions(
        read_only=arguments.console_read_only,
        login=login,
        host=arguments.host,
        lag_sample_interval_ms=interval_ms,
    )
    # The users' clients: the console's settings without its own identity, plus theirs.
    user_base = {
        key: value
        for key, value in settings.items()
        if key not in {"sasl.username", "sasl.password", "sasl.jaas.config"}
    }

    def login_source(user: str, password: str) -> ClientSource:
        return ClientSource.for_user(user_base, user, password)

    async def serve() -> None:
        server = ConsoleServer(
            ClientSource(lambda: dict(settings)),
            options,
            arguments.port,
            login_source=login_source if login else None,
            sample_lag=own_credentials or not login,
        )
        await server.start()
        print(f"strom console on {server.url} (cluster {settings['bootstrap.servers']})", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signal_number in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signal_number, stop.set)
        try:
            await stop.wait()
        finally:
            await server.stop()

    try:
        asyncio.run(serve())
    except OSError as error:
        print(
            f"strom: error: cannot serve the console on {arguments.host}:{arguments.port}: {error}",
            file=sys.stderr,
        )
        return 1
    return 0


# What a console beside a broker may log its users in with (the client's SASL mechanisms).
_CLIENT_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


def broker_console_login_settings(config: BrokerConfig) -> dict[str, Any]:
    """The users' client settings of ``strom broker --console-port --console-login``: the
    broker's first SASL_PLAINTEXT listener (on a fixed port; a wildcard host is reached on
    127.0.0.1) with the first mechanism it enables that strom's client speaks.
    ``BrokerConfigError`` when there is none."""
    from strom.broker.config import BrokerConfigError
    from strom.broker.listener_security import listener_value

    for endpoint in config.listeners():
        if endpoint.security_protocol != "SASL_PLAINTEXT":
            continue
        if endpoint.port == 0:
            raise BrokerConfigError(
                f"--console-login: listener {endpoint} needs a fixed port for the console to log in through"
            )
        enabled = [
            name.strip().upper()
            for name in listener_value(config, endpoint.listener, "sasl.enabled.mechanisms").split(",")
        ]
        mechanism = next((name for name in enabled if name in _CLIENT_MECHANISMS), None)
        if mechanism is None:
            raise BrokerConfigError(
                f"--console-login: listener {endpoint} enables none of {', '.join(_CLIENT_MECHANISMS)}"
            )
        host = endpoint.host if endpoint.host not in {"", "0.0.0.0", "::"} else "127.0.0.1"
        return {
            "bootstrap.servers": f"[{host}]:{endpoint.port}" if ":" in host else f"{host}:{endpoint.port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
        }
    raise BrokerConfigError(
        "--console-login needs a SASL_PLAINTEXT listener to log the console's users in through"
    )
