"""``strom transactions``: list the transactional ids the cluster knows and describe them (state,
producer id and epoch, timeout, and the open transaction's start and partitions), like Kafka's
kafka-transactions tool.

The admin client answers in its own types (``TransactionListing``, ``TransactionDescription``);
the reports below are built from them by pure functions the unit tests call directly.
"""

from __future__ import annotations

import argparse
import datetime
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from strom.cli.common import add_command, add_command_group, open_admin
from strom.cli.output import CliError, Report, Table, UsageError, write_report

if TYPE_CHECKING:
    from strom.client.admin import TransactionDescription, TransactionListing

__all__ = ["OPEN_STATES", "describe_transactions_report", "list_transactions_report", "register"]

# The coordinator's states in which a transaction is open (its records hold back read_committed
# consumers at the last stable offset).
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead")


def register(commands: Any) -> None:
    subcommands = add_command_group(
        commands, "transactions", help_text="list and describe transactional producers' transactions"
    )
    listing = add_command(
        subcommands,
        "list",
        help_text="list the transactional ids with their producer id and transaction state",
        description=(
            "List every transactional id the cluster's transaction coordinators know, with its "
            "producer id and the state of its transaction (Ongoing while one is open)."
        ),
        run=_list,
    )
    listing.add_argument(
        "--state",
        action="append",
        choices=STATES,
        metavar="STATE",
        help=f"only ids in STATE ({', '.join(STATES)}); repeatable",
    )
    listing.add_argument(
        "--producer-id", action="append", type=int, metavar="ID", help="only this producer id; repeatable"
    )
    listing.add_argument(
        "--older-than-ms",
        type=int,
        default=None,
        metavar="MS",
        help="only ids whose latest transaction began more than MS milliseconds ago (with --state "
        "Ongoing: transactions open that long, such as hanging ones)",
    )
    describe = add_command(
        subcommands,
        "describe",
        help_text="describe transactional ids: coordinator, state, producer, timeout, open transaction",
        description=(
            "Describe each transactional id as its coordinator knows it: the coordinator, the "
            "producer id and epoch, the transaction state and timeout, and for an open transaction "
            "when it started, how long it has run and the partitions it wrote to."
        ),
        run=_describe,
    )
    describe.add_argument("transactional_ids", nargs="+", metavar="ID", help="the transactional ids")


# -- reports (pure) ------------------------------------------------------------------------------------


def list_transactions_report(listings: Iterable[TransactionListing]) -> Report:
    rows = sorted(listings, key=lambda listing: listing.transactional_id)
    value = [
        {"transactional_id": row.transactional_id, "producer_id": row.producer_id, "state": row.state}
        for row in rows
    ]
    report = Report(
        value,
        [
            Table(
                ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"],
                [[row.transactional_id, row.producer_id, row.state] for row in rows],
            )
        ],
    )
    if not rows:
        report.notes.append("no transactional ids")
    return report


def _iso(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def describe_transactions_report(descriptions: Iterable[TransactionDescription], now_ms: int) -> Report:
    """One row (and one JSON object) per transactional id; the start, duration and partitions are
    those of the open transaction (none when no transaction is open)."""
    value: list[dict[str, Any]] = []
    rows: list[Sequence[object]] = []
    for description in descriptions:
        is_open = description.state in OPEN_STATES and description.start_time_ms >= 0
        start_ms = description.start_time_ms if is_open else None
        duration_ms = max(now_ms - description.start_time_ms, 0) if is_open else None
        partitions = [f"{topic}-{partition}" for topic, partition in description.partitions]
        value.append(
            {
                "transactional_id": description.transactional_id,
                "coordinator": description.coordinator_id,
                "state": description.state,
                "producer_id": description.producer_id,
                "producer_epoch": description.producer_epoch,
                "timeout_ms": description.timeout_ms,
                "start_time_ms": start_ms,
                "start_time": None if start_ms is None else _iso(start_ms),
                "duration_ms": duration_ms,
                "partitions": [
                    {"topic": topic, "partition": partition} for topic, partition in description.partitions
                ],
            }
        )
        rows.append(
            [
                description.transactional_id,
                description.coordinator_id,
                description.producer_id,
                description.producer_epoch,
                description.state,
                description.timeout_ms,
                None if start_ms is None else _iso(start_ms),
                duration_ms,
                partitions or None,
            ]
        )
    table = Table(
        [
            "TRANSACTIONAL-ID",
            "COORDINATOR",
            "PRODUCER-ID",
            "EPOCH",
            "STATE",
            "TIMEOUT-MS",
            "START-TIME",
            "DURATION-MS",
            "PARTITIONS",
        ],
        rows,
    )
    return Report(value, [table])


# -- commands ------------------------------------------------------------------------------------------


def _list(arguments: argparse.Namespace) -> int:
    if arguments.older_than_ms is not None and arguments.older_than_ms < 0:
        raise UsageError(f"--older-than-ms must not be negative, not {arguments.older_than_ms}")
    with open_admin(arguments) as admin:
        listings = admin.list_transactions(
            states=arguments.state, producer_ids=arguments.producer_id, duration_ms=arguments.older_than_ms
        )
    write_report(list_transactions_report(listings), arguments.output)
    return 0


def _describe(arguments: argparse.Namespace) -> int:
    from strom.client.errors import BrokerResponseError
    from strom.protocol.errors import ErrorCode

    descriptions: list[TransactionDescription] = []
    missing: list[str] = []
    with open_admin(arguments) as admin:
        for transactional_id in dict.fromkeys(arguments.transactional_ids):
            try:
                descriptions.extend(admin.describe_transactions([transactional_id]).values())
            except BrokerResponseError as error:
                if error.code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                    raise
                missing.append(transactional_id)
    if descriptions or arguments.output == "json":
        write_report(describe_transactions_report(descriptions, int(time.time() * 1000)), arguments.output)
    if missing:
        names = ", ".join(repr(transactional_id) for transactional_id in missing)
        verb = "does" if len(missing) == 1 else "do"
        raise CliError(
            f"transactional id {names} {verb} not exist; `strom transactions list` shows the ids there are"
        )
    return 0
