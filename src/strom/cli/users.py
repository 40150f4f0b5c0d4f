"""``strom users add|list|remove``: SCRAM credentials (DescribeUserScramCredentials,
AlterUserScramCredentials), as kafka-configs' ``--entity-type users --alter --add-config
'SCRAM-SHA-512=[password=...]'`` does.

The password is salted and hashed here (a random salt, PBKDF2 with the mechanism's hash): the
broker receives the salted password, never the password. It comes from a prompt (typed twice,
not echoed), ``--password-file`` (its first line; ``-`` reads stdin), or ``--password`` (which
other users of the machine can see in the process list: for throwaway set-ups only).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from strom.cli.common import add_command, add_command_group, open_admin
from strom.cli.output import CliError, Report, Table, UsageError, write_report

__all__ = ["read_password", "register"]

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_MECHANISM = "SCRAM-SHA-512"


def _mechanism(text: str) -> str:
    name = text.strip().upper()
    if name not in MECHANISMS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a SCRAM mechanism (one of {', '.join(MECHANISMS)})"
        )
    return name


def register(commands: Any) -> None:
    from strom.security.scram import ITERATIONS_MAX, ITERATIONS_MIN

    subcommands = add_command_group(
        commands, "users", help_text="add, list and remove the SCRAM credentials users log in with"
    )

    add = add_command(
        subcommands,
        "add",
        help_text="add a user's SCRAM credential, or replace its password",
        description=(
            "Add a SCRAM credential for NAME (AlterUserScramCredentials), or replace the one it has for "
            "the mechanism. The password is salted and hashed here; the broker never receives it. "
            "Without --password or --password-file it is prompted for (twice)."
        ),
        run=_add,
        output=False,
    )
    add.add_argument("name", metavar="NAME", help="the user name (the principal is User:NAME)")
    add.add_argument(
        "--mechanism",
        type=_mechanism,
        action="append",
        default=[],
        metavar="MECHANISM",
        help=f"{' or '.join(MECHANISMS)} (default {DEFAULT_MECHANISM}; repeat it for both)",
    )
    password = add.add_mutually_exclusive_group()
    password.add_argument(
        "--password",
        default=None,
        help="the password (visible in the process list; prefer the prompt or --password-file)",
    )
    password.add_argument(
        "--password-file",
        default=None,
        metavar="FILE",
        help="read the password from the first line of FILE (- reads it from stdin)",
    )
    add.add_argument(
        "--iterations",
        type=int,
        default=ITERATIONS_MIN,
        metavar="N",
        help=f"PBKDF2 iterations, {ITERATIONS_MIN}..{ITERATIONS_MAX} (default {ITERATIONS_MIN})",
    )

    listing = add_command(
        subcommands,
        "list",
        help_text="list users with SCRAM credentials: mechanisms and iteration counts",
        run=_list,
    )
    listing.add_argument("names", nargs="*", metavar="NAME", help="users to list (default: all)")

    remove = add_command(
        subcommands,
        "remove",
        help_text="remove a user's SCRAM credentials",
        description=(
            "Remove NAME's SCRAM credential for each --mechanism given, or all its credentials without "
            "one. Connections already authenticated stay open until they re-authenticate "
            "(connections.max.reauth.ms) or close."
        ),
        run=_remove,
        output=False,
    )
    remove.add_argument("name", metavar="NAME", help="the user name")
    remove.add_argument(
        "--mechanism",
        type=_mechanism,
        action="append",
        default=[],
        metavar="MECHANISM",
        help=f"{' or '.join(MECHANISMS)} (repeatable; default: every credential the user has)",
    )


def read_password(arguments: argparse.Namespace) -> str:
    """The password from --password, --password-file or a prompt; never empty."""
    if arguments.password is not None:
        password: str = arguments.password
    elif arguments.password_file is not None:
        password = _password_from_file(arguments.password_file)
    else:
        if not sys.stdin.isatty():
            raise UsageError(
                "no terminal to prompt for the password: give --password-file FILE (- for stdin)"
            )
        password = getpass.getpass(f"password for {arguments.name}: ")
        if getpass.getpass("again: ") != password:
            raise UsageError("the two passwords differ")
    if not password:
        raise UsageError("the password must not be empty")
    return password


def _password_from_file(path: str) -> str:
    try:
        if path == "-":
            text = sys.stdin.readline()
        else:
            with open(path, encoding="utf-8") as stream:
                text = stream.readline()
    except OSError as error:
        raise CliError(f"cannot read the password from {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path} is not UTF-8 text") from None
    return text.rstrip("\r\n")


def _add(arguments: argparse.Namespace) -> int:
    from strom.client.admin import UserScramCredentialUpsertion
    from strom.security.scram import ITERATIONS_MAX, ITERATIONS_MIN

    if not ITERATIONS_MIN <= arguments.iterations <= ITERATIONS_MAX:
        raise UsageError(
            f"--iterations must be {ITERATIONS_MIN}..{ITERATIONS_MAX}, not {arguments.iterations}"
        )
    if not arguments.name:
        raise UsageError("the user name must not be empty")
    mechanisms = list(dict.fromkeys(arguments.mechanism)) or [DEFAULT_MECHANISM]
    password = read_password(arguments)
    with open_admin(arguments) as admin:
        admin.alter_user_scram_credentials(
            UserScramCredentialUpsertion(arguments.name, mechanism, password, arguments.iterations)
            for mechanism in mechanisms
        )
    print(
        f"set {', '.join(mechanisms)} credentials of user {arguments.name!r} ({arguments.iterations} iterations)"
    )
    return 0


def _list(arguments: argparse.Namespace) -> int:
    with open_admin(arguments) as admin:
        described = admin.describe_user_scram_credentials(arguments.names or None)
    rows = [
        {"user": user, "mechanism": info.mechanism, "iterations": info.iterations}
        for user, infos in sorted(described.items())
        for info in infos
    ]
    value = [
        {
            "user": user,
            "credentials": [{"mechanism": info.mechanism, "iterations": info.iterations} for info in infos],
        }
        for user, infos in sorted(described.items())
    ]
    table = Table(
        ["USER", "MECHANISM", "ITERATIONS"],
        [[row["user"], row["mechanism"], row["iterations"]] for row in rows],
    )
    notes = [
        f"user {user!r} has no SCRAM credentials" for user, infos in sorted(described.items()) if not infos
    ]
    if not described:
        notes.append("no users have SCRAM credentials")
    write_report(Report(value, [table] if rows else [], notes), arguments.output)
    return 0


def _remove(arguments: argparse.Namespace) -> int:
    from strom.client.admin import UserScramCredentialDeletion

    with open_admin(arguments) as admin:
        mechanisms = list(dict.fromkeys(arguments.mechanism))
        if not mechanisms:
            infos = admin.describe_user_scram_credentials([arguments.name]).get(arguments.name, [])
            mechanisms = [info.mechanism for info in infos]
            if not mechanisms:
                raise CliError(f"user {arguments.name!r} has no SCRAM credentials")
        admin.alter_user_scram_credentials(
            UserScramCredentialDeletion(arguments.name, mechanism) for mechanism in mechanisms
        )
    print(f"removed {', '.join(mechanisms)} credentials of user {arguments.name!r}")
    return 0
