"""Argument parsing, usage errors (exit 2) caught before any connection, and the pure input helpers."""

from __future__ import annotations

import argparse
import datetime
import io

import pytest

from strom.cli.consume import parse_timestamp_ms
from strom.cli.main import build_parser, main
from strom.cli.output import UsageError
from strom.cli.produce import acks_setting, read_records, split_line

COMMANDS = [
    ["topics", "list"],
    ["topics", "create"],
    ["topics", "describe"],
    ["topics", "alter"],
    ["topics", "delete"],
    ["produce"],
    ["consume"],
    ["groups", "list"],
    ["groups", "describe"],
    ["groups", "delete"],
    ["groups", "reset-offsets"],
    ["bench", "produce"],
    ["bench", "consume"],
    ["bench", "end-to-end"],
    ["topics", "delete-records"],
    ["configs", "describe"],
    ["configs", "alter"],
    ["quotas", "describe"],
    ["quotas", "alter"],
    ["groups", "delete-offsets"],
]


@pytest.mark.parametrize(
    "command",
    [[], ["topics"], ["groups"], ["bench"], ["configs"], ["log"], ["log", "dump"], *COMMANDS],
    ids=" ".join,
)
def test_help_everywhere(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: strom" in capsys.readouterr().out


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_client_commands_share_bootstrap_server(command: list[str]) -> None:
    positional = {
        "topics create": ["t"],
        "topics alter": ["t"],
        "topics delete": ["t"],
        "produce": ["t"],
        "consume": ["t"],
        "groups describe": ["g"],
        "groups delete": ["g"],
        "groups reset-offsets": ["g", "--topic", "t", "--to-earliest"],
        "groups delete-offsets": ["g", "--topic", "t"],
        "configs describe": ["--topic", "t"],
        "configs alter": ["--broker", "0"],
    }.get(" ".join(command), [])
    arguments = build_parser().parse_args([*command, *positional])
    assert arguments.bootstrap_server == "localhost:9092"
    assert callable(arguments.run)


def test_topic_create_arguments() -> None:
    arguments = build_parser().parse_args(
        [
            *("topics", "create", "orders", "--partitions", "3", "--replication-factor", "1"),
            *("--config", "retention.ms=1000", "--config", "x=a=b", "--bootstrap-server", "h:1"),
        ]
    )
    assert (arguments.name, arguments.partitions, arguments.replication_factor) == ("orders", 3, 1)
    assert arguments.config == [("retention.ms", "1000"), ("x", "a=b")]
    assert arguments.bootstrap_server == "h:1"


def test_output_format_choice() -> None:
    assert build_parser().parse_args(["topics", "list", "--output", "json"]).output == "json"


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "create", "t", "--config", "novalue"],
        ["consume", "t", "-X", "fetch.max.wait"],
        ["topics", "list", "--output", "yaml"],
        ["consume", "t", "--from-beginning", "--offset", "3"],
        ["groups", "reset-offsets", "g", "--to-earliest"],
        ["groups", "reset-offsets", "g", "--topic", "t", "--all-topics", "--to-earliest"],
        ["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"],
        ["groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--execute", "--dry-run"],
        ["bench", "produce", "--client", "java"],
        ["produce", "t", "--acks", "2"],
        ["nonsense"],
    ],
)
def test_argparse_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["consume", "t", "--offset", "3"], "--offset N needs --partition"),
        (["consume", "t", "--offset", "middle"], "earliest, latest or a non-negative offset"),
        (["consume"], "name the topics to read, or give --include"),
        (["consume", "t", "--include", "a.*"], "not both"),
        (["consume", "--include", "(unclosed"], "not a regular expression"),
        (["consume", "t", "--until", "later"], "--until 'later'"),
        (["consume", "t", "--format", "%t %x"], "unknown token %x"),
        (["consume", "t", "--format", "yaml"], "unknown format 'yaml'"),
        (["consume", "t", "-X", "fetch.max.wait.msec=5"], "did you mean fetch.max.wait.ms"),
        (["produce", "t", "-X", "linger.ms=soon"], "integer"),
        (["produce", "t", "--input-format", "json", "--key-separator", ":"], "JSON line has its own"),
        (["produce", "t", "--encoding", "hex"], "--encoding applies to --input-format json"),
        (["produce", "t", "--timestamp", "never"], "ISO 8601"),
        (["consume", "t", "--group", "g", "--partition", "0"], "--group"),
        (["consume", "t", "--max-messages", "0"], "--max-messages"),
        (["consume", "t", "--from-timestamp", "yesterday"], "ISO 8601"),
        (["topics", "alter", "t"], "nothing to change"),
        (["configs", "alter", "--topic", "t"], "nothing to change"),
        (["configs", "alter", "--broker", "zero", "--delete-config", "a"], "--broker takes a broker id"),
        (["configs", "alter", "--topic", "t", "--add-config", "a=[1"], "'[' without ']'"),
        (["topics", "delete-records", "t"], "--before OFFSET|end"),
        (["topics", "delete-records", "t", "--before", "soon"], "--before takes an offset or 'end'"),
        (["groups", "describe"], "name the groups to describe"),
        (["groups", "reset-offsets", "g", "--all-topics", "--by-duration", "an hour"], "PnDTnHnMnS"),
        (["bench", "produce", "--processes", "0"], "--processes must be 1 to 64"),
        (["topics", "alter", "t", "--config", "a=1", "--delete-config", "a"], "both set and deleted"),
        (["topics", "create", "t", "--partitions", "0"], "--partitions"),
        (["produce", "t", "--partition", "-1"], "--partition"),
        (["bench", "produce", "--records", "0"], "--records"),
        (["bench", "end-to-end", "--record-size", "4"], "--record-size must be at least 12"),
        (["groups", "reset-offsets", "g", "--topic", "t", "--to-offset", "-5"], "--to-offset"),
        (["groups", "reset-offsets", "g", "--topic", "t", "--to-datetime", "soon"], "ISO 8601"),
        (["topics", "list", "--request-timeout-ms", "0"], "--request-timeout-ms"),
    ],
)
def test_semantic_usage_errors_exit_2_without_connecting(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The bootstrap server is unreachable: a usage error must be found before any connection.
    assert main([*argv, "--bootstrap-server", "127.0.0.1:1"]) == 2
    error = capsys.readouterr().err
    assert message in error
    assert error.startswith("usage: strom")


def test_parse_timestamp_ms() -> None:
    assert parse_timestamp_ms("1700000000000") == 1_700_000_000_000
    assert parse_timestamp_ms("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert parse_timestamp_ms("2023-11-14T23:13:20.5+01:00") == 1_700_000_000_500
    naive = datetime.datetime(2023, 11, 14, 22, 13, 20)
    assert parse_timestamp_ms("2023-11-14T22:13:20") == int(naive.astimezone().timestamp() * 1000)
    with pytest.raises(UsageError):
        parse_timestamp_ms("14/11/2023")


def test_split_line_and_read_records() -> None:
    assert split_line(b"k:v:w", b":") == (b"k", b"v:w")
    assert split_line(b"no separator", b":") == (None, b"no separator")
    assert split_line(b"k:v", None) == (None, b"k:v")
    stream = io.BytesIO(b"a=1\r\nb=2\n\n\xff=x\nlast")
    assert list(read_records(stream, b"=")) == [
        (b"a", b"1"),
        (b"b", b"2"),
        (None, b""),
        (b"\xff", b"x"),
        (None, b"last"),
    ]


def test_acks_setting_leaves_idempotence_to_the_client() -> None:
    """acks=all keeps the idempotent producer; 0 and 1 turn it off in the client by themselves."""
    from strom.client.config import ProducerConfig

    for acks, expected, idempotent in (("all", -1, True), ("-1", -1, True), ("1", 1, False), ("0", 0, False)):
        config = ProducerConfig.from_settings(acks_setting(acks))
        assert (config.acks, config.enable_idempotence) == (expected, idempotent)


def test_key_value_type_refuses_missing_equals() -> None:
    from strom.cli.common import parse_key_value

    assert parse_key_value(" a =b") == ("a", "b")
    with pytest.raises(argparse.ArgumentTypeError):
        parse_key_value("=b")


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    import strom

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"strom {strom.__version__}\n"
