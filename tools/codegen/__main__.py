"""Command line: `python -m tools.codegen --spec DIR [--output REPO] [--check]`."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.codegen.emit import (
    module_name_for_api,
    render_coordinator_init,
    render_errors,
    render_messages_init,
    render_module,
    render_transaction_init,
)
from tools.codegen.spec import MessageDef, load_errors, load_message, snake_case

REPO_ROOT = Path(__file__).resolve().parents[2]
MESSAGES_DIR = Path("src/strom/protocol/messages")
COORDINATOR_DIR = Path("src/strom/protocol/coordinator_records")
TRANSACTION_DIR = Path("src/strom/protocol/transaction_records")
ERRORS_FILE = Path("src/strom/protocol/errors.py")
# Formatting settings must match pyproject's [tool.ruff] so `ruff format --check` agrees.
RUFF_SETTINGS = ["--isolated", "--line-length", "110", "--target-version", "py311"]


def generate_sources(spec_dir: Path) -> dict[Path, str]:
    """Every generated file, relative to the repository root, before formatting."""
    files: dict[Path, str] = {}
    messages = [load_message(path) for path in sorted((spec_dir / "message").glob("*.json"))]
    by_name = {message.name: message for message in messages}
    apis: list[tuple[str, int, str, str, str]] = []
    for request in sorted((m for m in messages if m.kind == "request"), key=lambda m: m.api_key or 0):
        base = request.name.removesuffix("Request")
        response = by_name[base + "Response"]
        if response.api_key != request.api_key:
            raise ValueError(f"{request.name} and {response.name} disagree on the api key")
        module = module_name_for_api(request.name)
        files[MESSAGES_DIR / f"{module}.py"] = render_module(
            [request, response], f"{base} (API key {request.api_key}): {request.name} and {response.name}."
        )
        apis.append((module, request.api_key or 0, base, request.name, response.name))
    files[MESSAGES_DIR / "consumer_protocol.py"] = render_module(
        [by_name["ConsumerProtocolSubscription"], by_name["ConsumerProtocolAssignment"]],
        "The consumer embedded protocol: the bytes inside JoinGroup metadata and SyncGroup assignments.",
    )
    for header in ("RequestHeader", "ResponseHeader"):
        files[MESSAGES_DIR / f"{snake_case(header)}.py"] = render_module(
            [by_name[header]], f"The {header} that precedes every body (see strom.protocol.headers)."
        )
    files[MESSAGES_DIR / "__init__.py"] = render_messages_init(apis)

    records = {
        m.name: m for m in (load_message(p) for p in sorted((spec_dir / "group-coordinator").glob("*.json")))
    }
    coordinator_pairs = []
    for name in sorted(records):
        if not name.endswith("Key"):
            continue
        base = name.removesuffix("Key")
        key: MessageDef = records[name]
        value: MessageDef = records[base + "Value"]
        module = snake_case(base)
        files[COORDINATOR_DIR / f"{module}.py"] = render_module(
            [key, value], f"The {base} record of `__consumer_offsets`: {key.name} and {value.name}."
        )
        coordinator_pairs.append((module, key.name, value.name, key.valid_versions))
    files[COORDINATOR_DIR / "__init__.py"] = render_coordinator_init(coordinator_pairs)
    files.update(_transaction_records(spec_dir))
    files[ERRORS_FILE] = render_errors(load_errors(spec_dir / "ERRORS.md"))
    return files


def _transaction_records(spec_dir: Path) -> dict[Path, str]:
    """The records of `__transaction_state`, one module per key/value pair (today one pair)."""
    files: dict[Path, str] = {}
    records = {
        m.name: m
        for m in (load_message(p) for p in sorted((spec_dir / "transaction-coordinator").glob("*.json")))
    }
    pairs = []
    for name in sorted(records):
        if not name.endswith("Key"):
            continue
        base = name.removesuffix("Key")
        key: MessageDef = records[name]
        value: MessageDef = records[base + "Value"]
        module = snake_case(base)
        files[TRANSACTION_DIR / f"{module}.py"] = render_module(
            [key, value], f"The {base} record of `__transaction_state`: {key.name} and {value.name}."
        )
        pairs.append((module, key.name, value.name, key.valid_versions))
    files[TRANSACTION_DIR / "__init__.py"] = render_transaction_init(pairs)
    return files


def _ruff_executable() -> str:
    beside_python = Path(sys.executable).parent / "ruff"
    if beside_python.exists():
        return str(beside_python)
    found = shutil.which("ruff")
    if found is None:
        raise SystemExit("codegen: ruff is needed to format the generated code (pip install ruff)")
    return found


def format_sources(files: dict[Path, str]) -> dict[Path, str]:
    """Runs ruff format over the generated text so the checked-in files are already formatted."""
    with tempfile.TemporaryDirectory(prefix="strom-codegen-") as temporary:
        root = Path(temporary)
        for relative, text in files.items():
            target = root / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        subprocess.run(
            [_ruff_executable(), "format", "--quiet", "--no-cache", *RUFF_SETTINGS, str(root)],
            check=True,
        )
        return {relative: (root / relative).read_text(encoding="utf-8") for relative in files}


def generate(spec_dir: Path) -> dict[Path, str]:
    return format_sources(generate_sources(spec_dir))


def existing_generated_files(output: Path) -> set[Path]:
    found: set[Path] = set()
    for directory in (MESSAGES_DIR, COORDINATOR_DIR, TRANSACTION_DIR):
        found.update(path.relative_to(output) for path in (output / directory).glob("*.py"))
    if (output / ERRORS_FILE).exists():
        found.add(ERRORS_FILE)
    return found


def check(files: dict[Path, str], output: Path) -> list[str]:
    """Names every generated file that is missing, different, or extra."""
    problems: list[str] = []
    for relative, text in sorted(files.items()):
        path = output / relative
        if not path.exists():
            problems.append(f"missing: {relative}")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"differs: {relative}")
    for relative in sorted(existing_generated_files(output) - set(files)):
        problems.append(f"extra: {relative}")
    return problems


def write(files: dict[Path, str], output: Path) -> None:
    for relative in sorted(existing_generated_files(output) - set(files)):
        (output / relative).unlink()
    for relative, text in files.items():
        path = output / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.codegen", description=__doc__)
    parser.add_argument("--spec", type=Path, required=True, help="the kafka-protocol reference directory")
    parser.add_argument("--output", type=Path, default=REPO_ROOT, help="repository root to write into")
    parser.add_argument("--check", action="store_true", help="only verify the checked-in files are current")
    arguments = parser.parse_args(argv)
    files = generate(arguments.spec)
    if arguments.check:
        problems = check(files, arguments.output)
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    write(files, arguments.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
