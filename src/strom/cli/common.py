"""Options every client command shares and the clients built from them.

Client settings, security's included, come in by Kafka's key names from ``--command-config FILE``
(a properties file, as Kafka's tools take it) and ``-X KEY=VALUE`` (as kcat takes them), on every
command that talks to a broker: ``-X`` wins over the command's own options, which win over the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from strom.cli.output import OUTPUT_FORMATS, CliError, UsageError

if TYPE_CHECKING:
    from strom.client.admin import Admin
    from strom.client.config import ClientConfig

__all__ = [
    "DEFAULT_BOOTSTRAP_SERVER",
    "add_connection_arguments",
    "add_output_argument",
    "check_client_config",
    "check_reachable",
    "client_settings",
    "common_client_config",
    "given_client_config",
    "open_admin",
    "parse_key_value",
    "read_client_properties",
]

DEFAULT_BOOTSTRAP_SERVER = "localhost:9092"
# A command line tool should say it cannot connect after seconds, not after the client's default
# 30 s; --request-timeout-ms raises it for slow clusters.
DEFAULT_REQUEST_TIMEOUT_MS = 10_000


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=DEFAULT_BOOTSTRAP_SERVER,
        metavar="HOST:PORT",
        help=f"broker(s) to connect to, comma separated (default {DEFAULT_BOOTSTRAP_SERVER})",
    )
    parser.add_argument(
        "--request-timeout-ms",
        type=int,
        default=DEFAULT_REQUEST_TIMEOUT_MS,
        metavar="MS",
        help=f"how long one request may take before the command gives up (default {DEFAULT_REQUEST_TIMEOUT_MS})",
    )


# An example -X setting for each kind of client, for --help.
_EXAMPLE_SETTINGS = {
    "producer": "linger.ms=20",
    "consumer": "fetch.max.wait.ms=100",
    "admin": "retry.backoff.ms=200",
    "pipeline": "client.id=archiver",
}


def add_client_config_argument(parser: argparse.ArgumentParser, client: str) -> None:
    parser.add_argument(
        "-X",
        dest="client_config",
        type=parse_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"{'an' if client[0] in 'aeiou' else 'a'} {client} client setting by its Kafka name, such as -X {_EXAMPLE_SETTINGS[client]} or "
        "-X security.protocol=SASL_SSL (repeatable; wins over the options above and --command-config; "
        "docs/client.md and docs/security.md list the keys)",
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        default=None,
        help="a properties file of client settings by their Kafka names (key=value lines, # comments), "
        "as Kafka's tools take it: the place for security.protocol, ssl.ca.location, sasl.mechanism, "
        "sasl.username, sasl.password and the like (docs/security.md)",
    )


def read_client_properties(path: str) -> dict[str, str]:
    """A Java-style properties file: ``key=value``, ``key: value`` or ``key value`` lines, ``#``
    and ``!`` comments, a trailing backslash continuing a line; keys and values trimmed."""
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except OSError as error:
        raise UsageError(f"--command-config: cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--command-config: {path} is not UTF-8 text") from None
    settings: dict[str, str] = {}
    logical = ""
    for raw_line in text.splitlines():
        line = raw_line.strip() if not logical else raw_line.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        key, value = _split_property(logical)
        logical = ""
        if not key:
            raise UsageError(f"--command-config: {path}: a line without a key: {raw_line.strip()!r}")
        settings[key] = value
    if logical:
        key, value = _split_property(logical)
        settings[key] = value
    return settings


def _split_property(line: str) -> tuple[str, str]:
    for index, char in enumerate(line):
        if char in "=:":
            return line[:index].strip(), line[index + 1 :].strip()
        if char.isspace():
            rest = line[index:].lstrip()
            if rest[:1] in ("=", ":"):
                rest = rest[1:]
            return line[:index].strip(), rest.strip()
    return line.strip(), ""


def given_client_config(arguments: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``--command-config`` file's settings and the ``-X`` settings, each by key."""
    path = getattr(arguments, "command_config", None)
    from_file: dict[str, Any] = {} if path is None else read_client_properties(path)
    return from_file, dict(getattr(arguments, "client_config", None) or [])


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        choices=OUTPUT_FORMATS,
        default="table",
        help="table for people (default), json for programs",
    )


def client_settings(arguments: argparse.Namespace, *, passthrough: bool = False) -> dict[str, Any]:
    """The settings every strom client takes, from the shared options; with ``passthrough`` also
    the ``-X key=value`` settings (the command's main client takes them all; helper clients only
    the keys every client knows). The first call also checks that the cluster can be reached at
    all (see ``check_reachable``)."""
    if arguments.request_timeout_ms <= 0:
        raise UsageError(f"--request-timeout-ms must be positive, not {arguments.request_timeout_ms}")
    from_file, extra = given_client_config(arguments)
    settings: dict[str, Any] = {}
    settings.update(from_file if passthrough else _common_keys(from_file))
    settings.update(
        {
            "bootstrap.servers": arguments.bootstrap_server,
            "request.timeout.ms": arguments.request_timeout_ms,
            # A connection that is not set up within the request timeout will not help this command.
            "socket.connection.setup.timeout.ms": arguments.request_timeout_ms,
            "client.id": "strom-cli",
        }
    )
    settings.update(extra if passthrough else _common_keys(extra))
    if not getattr(arguments, "reachable_checked", False):
        check_reachable(settings["bootstrap.servers"], arguments.request_timeout_ms)
        arguments.reachable_checked = True
    return settings


def _common_keys(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings every client takes (security's among them), for a command's helper clients."""
    from strom.client.config import KEY_ALIASES, ClientConfig

    common = {ClientConfig.key_of(field.name) for field in dataclasses.fields(ClientConfig)} | set(
        KEY_ALIASES
    )
    return {key: value for key, value in settings.items() if key in common}


def common_client_config(arguments: argparse.Namespace) -> dict[str, Any]:
    """The ``--command-config`` and ``-X`` settings every client takes (``-X`` winning)."""
    from_file, extra = given_client_config(arguments)
    return _common_keys({**from_file, **extra})


def check_client_config(arguments: argparse.Namespace, config_class: type[ClientConfig]) -> None:
    """Refuse ``--command-config`` and ``-X`` keys or values the client would refuse, as a usage
    error before connecting."""
    from strom.client.errors import ConfigError

    from_file, extra = given_client_config(arguments)
    if not from_file and not extra:
        return
    given = "-X" if not from_file else "--command-config" if not extra else "--command-config/-X"
    try:
        config_class.from_settings({**from_file, **extra})
    except ConfigError as error:
        raise UsageError(f"{given}: {error}") from None


def check_reachable(bootstrap_servers: str, timeout_ms: int) -> None:
    """Fail at once, with the reason, when no bootstrap server accepts a TCP connection.

    The clients retry refused connections until their timeouts run out, as a library must (a
    broker may be restarting); a person at a terminal wants to know now that nothing listens there.
    One connection attempt per server, all within ``timeout_ms``; the first that connects ends it.
    """
    from strom.client.config import parse_bootstrap
    from strom.client.errors import ConfigError

    try:
        addresses = parse_bootstrap(bootstrap_servers)
    except ConfigError as error:
        raise UsageError(f"--bootstrap-server: {error}") from None
    if not addresses:
        raise UsageError("--bootstrap-server names no broker")
    deadline = time.monotonic() + timeout_ms / 1000
    reasons: list[str] = []
    refused_only = True
    for host, port in addresses:
        remaining_s = deadline - time.monotonic()
        if remaining_s <= 0:
            refused_only = False
            break
        try:
            with socket.create_connection((host, port), timeout=remaining_s):
                return
        except ConnectionRefusedError:
            reasons.append(f"{host}:{port}: connection refused")
        except TimeoutError:
            refused_only = False
            reasons.append(f"{host}:{port}: no answer to the connection attempt")
        except socket.gaierror as error:
            refused_only = False
            reasons.append(f"{host}:{port}: cannot resolve {host!r} ({error.strerror})")
        except OSError as error:
            refused_only = False
            reasons.append(f"{host}:{port}: {error.strerror or error}")
    where = reasons[0] if len(reasons) == 1 else f"{bootstrap_servers} ({'; '.join(reasons)})"
    if refused_only:
        raise CliError(f"cannot connect to {where} (is a broker running there? `strom broker` starts one)")
    raise CliError(
        f"cannot connect to {where} after {timeout_ms / 1000:.1f} s (--request-timeout-ms {timeout_ms})"
    )


@contextmanager
def open_admin(arguments: argparse.Namespace, *, passthrough: bool = True) -> Iterator[Admin]:
    """An admin client for the command; ``passthrough=False`` where the admin only helps a producer
    or consumer (then it takes just the ``-X`` keys every client knows)."""
    from strom.client.admin import Admin
    from strom.client.config import AdminConfig

    if passthrough:
        check_client_config(arguments, AdminConfig)
    admin = Admin(client_settings(arguments, passthrough=passthrough))
    try:
        yield admin
    finally:
        admin.close()


def parse_key_value(text: str) -> tuple[str, str]:
    """``key=value`` (the value may itself contain ``=``); an argparse ``type``."""
    key, separator, value = text.partition("=")
    if not separator or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


Runner = Callable[[argparse.Namespace], int]


def add_command(
    commands: Any,
    name: str,
    *,
    help_text: str,
    run: Runner,
    description: str | None = None,
    output: bool = True,
    connects: bool = True,
    client: str = "admin",
) -> argparse.ArgumentParser:
    """A subcommand with the shared options; ``commands`` is an argparse subparsers action.
    ``client`` names the client the command's ``-X`` settings go to."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help_text, description=description or help_text[:1].upper() + help_text[1:] + "."
    )
    if connects:
        add_connection_arguments(parser)
        add_client_config_argument(parser, client)
    if output:
        add_output_argument(parser)
    parser.set_defaults(run=run, command_parser=parser)
    return parser


def add_command_group(commands: Any, name: str, *, help_text: str) -> Any:
    """A command with subcommands of its own (``strom topics list``); returns their subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help_text, description=help_text[:1].upper() + help_text[1:] + "."
    )
    subcommands = parser.add_subparsers(dest=f"{name}_command", metavar="COMMAND")
    subcommands.required = True
    return subcommands
