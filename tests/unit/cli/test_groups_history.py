"""``strom groups history``'s report: one row per rebalance, the moved partitions, the JSON."""

from __future__ import annotations

import io
import json

from strom.cli.groups import history_report
from strom.cli.output import write_report
from strom.protocol.group_history import PartitionMove, RebalanceEntry

ENTRIES = [
    RebalanceEntry(
        0,
        "classic",
        1,
        "member-joined",
        ("a",),
        1_700_000_000_000,
        1_700_000_000_003,
        1_700_000_000_010,
        "completed",
        (),
        ("a",),
        (PartitionMove("t", 0, None, "a"),),
    ),
    RebalanceEntry(
        1,
        "classic",
        -1,
        "member-left",
        ("b",),
        1_700_000_001_000,
        1_700_000_001_000,
        -1,
        "in-progress",
        ("a", "b"),
        (),
    ),
]


def test_the_table_lists_rebalances_and_moves() -> None:
    out = io.StringIO()
    write_report(history_report("g", ENTRIES), "table", out)
    text = out.getvalue()
    assert "member-joined" in text and "2023-11-14 22:13:20.000Z" in text
    assert "in-progress" in text and "partitions moved" in text
    lines = text.splitlines()
    moved = [line for line in lines if line.split()[:3] == ["1", "t", "0"]]
    assert len(moved) == 1 and moved[0].split()[-1] == "a"


def test_the_json_has_every_field() -> None:
    out = io.StringIO()
    write_report(history_report("g", ENTRIES), "json", out)
    printed = json.loads(out.getvalue())
    assert printed["group"] == "g"
    first = printed["rebalances"][0]
    assert first["join_ms"] == 3 and first["assignment_ms"] == 7 and first["duration_ms"] == 10
    assert first["moves"] == [{"topic": "t", "partition": 0, "from": None, "to": "a"}]


def test_no_history_says_so() -> None:
    out = io.StringIO()
    write_report(history_report("g", []), "table", out)
    assert "no rebalance recorded" in out.getvalue()
