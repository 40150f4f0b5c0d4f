"""How the message browser shows bytes (as text, pretty JSON or hex), what a search matches, and
the times it accepts. Pure functions: the pages escape what these return."""

from __future__ import annotations

import contextlib
import datetime
import json

from strom.base import limits
from strom.console.source import BrowsedRecord

__all__ = ["FORMATS", "matches", "parse_time_ms", "show_bytes"]

FORMATS = ("text", "json", "hex")


def show_bytes(data: bytes | None, form: str, chars_max: int = limits.console_field_chars_max) -> str:
    """``data`` for a person: ``text`` (UTF-8, undecodable bytes as \\xNN), ``json`` (pretty when
    it parses as JSON, else as text) or ``hex``; cut to ``chars_max`` with a note of the rest."""
    if data is None:
        return "null"
    # Never format more than the page shows: hex takes 3 characters a byte, text at most 4.
    head = data[: chars_max + 1]
    if form == "hex":
        shown = head.hex(" ")
    else:
        shown = head.decode("utf-8", errors="backslashreplace")
        if form == "json" and len(data) <= chars_max:
            with contextlib.suppress(ValueError):
                shown = json.dumps(json.loads(data), indent=2, ensure_ascii=False)
    if len(shown) > chars_max or len(data) > len(head):
        return f"{shown[:chars_max]}… ({len(data):,} bytes in all)"
    return shown


def matches(record: BrowsedRecord, needle: bytes) -> bool:
    """The search: ``needle`` in the key, the value, a header's name or a header's value."""
    if record.value is not None and needle in record.value:
        return True
    if record.key is not None and needle in record.key:
        return True
    for name, value in record.headers:
        if needle in name.encode("utf-8", errors="surrogateescape") or (
            value is not None and needle in value
        ):
            return True
    return False


def parse_time_ms(text: str) -> int:
    """Milliseconds since the epoch, from a number of them or an ISO 8601 time (UTC unless it
    names its offset; what a browser's datetime-local field sends has none). ValueError if neither."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def format_time_ms(time_ms: int) -> str:
    """UTC, to the millisecond (-1, a record without a timestamp: "-")."""
    if time_ms < 0:
        return "-"
    moment = datetime.datetime.fromtimestamp(time_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{time_ms % 1000:03d} UTC"
