"""BENCHMARKS.md is shared: each benchmark owns one section between its own markers."""

from __future__ import annotations

from pathlib import Path

HEADER = "# strom benchmarks\n\nEach section is written by the benchmark named in it; figures are ratios measured side by side in one run.\n"


def replace_section(path: Path, name: str, section: str) -> None:
    """Put ``section`` between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path``,
    appending the markers when absent and leaving every other section alone."""
    start_marker, end_marker = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = path.read_text(encoding="utf-8") if path.exists() else HEADER
    block = f"{start_marker}\n{section.rstrip()}\n{end_marker}"
    start = text.find(start_marker)
    end = text.find(end_marker, start + 1) if start >= 0 else -1
    if start >= 0 and end >= 0:
        text = text[:start] + block + text[end + len(end_marker) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")
