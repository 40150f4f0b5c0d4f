"""Options every client command shares and the clients built from them."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from strom.cli.output import OUTPUT_FORMATS, UsageError

if TYPE_CHECKING:
    from strom.client.admin import Admin

__all__ = [
    "DEFAULT_BOOTSTRAP_SERVER",
    "add_connection_arguments",
    "add_output_argument",
    "client_settings",
    "open_admin",
    "parse_key_value",
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


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        choices=OUTPUT_FORMATS,
        default="table",
        help="table for people (default), json for programs",
    )


def client_settings(arguments: argparse.Namespace) -> dict[str, Any]:
    """The settings every strom client takes, from the shared options."""
    if arguments.request_timeout_ms <= 0:
        raise UsageError(f"--request-timeout-ms must be positive, not {arguments.request_timeout_ms}")
    return {
        "bootstrap.servers": arguments.bootstrap_server,
        "request.timeout.ms": arguments.request_timeout_ms,
        "client.id": "strom-cli",
    }


@contextmanager
def open_admin(arguments: argparse.Namespace) -> Iterator[Admin]:
    from strom.client.admin import Admin

    admin = Admin(client_settings(arguments))
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
) -> argparse.ArgumentParser:
    """A subcommand with the shared options; ``commands`` is an argparse subparsers action."""
    parser: argparse.ArgumentParser = commands.add_parser(
        name, help=help_text, description=description or help_text[:1].upper() + help_text[1:] + "."
    )
    if connects:
        add_connection_arguments(parser)
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
