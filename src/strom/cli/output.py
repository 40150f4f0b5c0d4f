"""What the commands print: aligned tables for people, JSON for programs, and the errors.

A command that returns data builds a ``Report`` (one JSON value plus the tables that show it) and
``write_report`` prints it in the format the user chose with ``--output``. Diagnostics and
summaries go to stderr so that stdout stays data.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Literal

__all__ = [
    "CliError",
    "OutputFormat",
    "Report",
    "Table",
    "UsageError",
    "bytes_to_text",
    "render_table",
    "write_report",
]

OutputFormat = Literal["table", "json"]
OUTPUT_FORMATS: tuple[OutputFormat, ...] = ("table", "json")

# What an empty cell shows in a table (JSON keeps null).
MISSING_CELL = "-"


class CliError(Exception):
    """A failure of the environment or the cluster (cannot connect, topic exists...): exit code 1."""


class UsageError(Exception):
    """Arguments that parse but do not make sense together: exit code 2, like argparse's own."""


def bytes_to_text(data: bytes | None) -> str | None:
    """Bytes as text: UTF-8 where they are UTF-8, backslash escapes (``\\xff``) where not."""
    if data is None:
        return None
    return data.decode("utf-8", errors="backslashreplace")


@dataclass
class Table:
    """Rows under headers; an optional title line above them."""

    headers: Sequence[str]
    rows: list[Sequence[object]] = field(default_factory=list)
    title: str | None = None


@dataclass
class Report:
    """One command's data: ``value`` is printed with ``--output json``, ``tables`` with ``table``."""

    value: Any
    tables: list[Table] = field(default_factory=list)
    # Printed after the tables in table mode only (e.g. "no groups").
    notes: list[str] = field(default_factory=list)


def _cell(value: object) -> str:
    if value is None:
        return MISSING_CELL
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, bytes):
        return bytes_to_text(value) or ""
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(item) for item in value)
    return str(value)


def _is_number(text: str) -> bool:
    return text.lstrip("-").replace(".", "", 1).isdigit()


def render_table(table: Table) -> str:
    """Columns padded to their widest cell; numbers aligned right, text left; two spaces between."""
    cells = [[_cell(value) for value in row] for row in table.rows]
    for row in cells:
        assert len(row) == len(table.headers), f"row {row} does not match headers {table.headers}"
    widths = [len(header) for header in table.headers]
    for row in cells:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row)]
    # A column is numeric (aligned right) when every cell that has a value is a number.
    numeric = [
        any(row[index] != MISSING_CELL for row in cells)
        and all(row[index] == MISSING_CELL or _is_number(row[index]) for row in cells)
        for index in range(len(widths))
    ]

    def line(values: Sequence[str]) -> str:
        padded = [
            value.rjust(width) if is_numeric else value.ljust(width)
            for value, width, is_numeric in zip(values, widths, numeric)
        ]
        return "  ".join(padded).rstrip()

    lines = [] if table.title is None else [table.title]
    lines.append(line(list(table.headers)))
    lines.extend(line(row) for row in cells)
    return "\n".join(lines)


def write_report(report: Report, output_format: OutputFormat, stream: IO[str] | None = None) -> None:
    out = sys.stdout if stream is None else stream
    if output_format == "json":
        out.write(json.dumps(report.value, indent=2, sort_keys=False) + "\n")
        return
    blocks = [render_table(table) for table in report.tables]
    blocks.extend(report.notes)
    if blocks:
        out.write("\n\n".join(blocks) + "\n")
