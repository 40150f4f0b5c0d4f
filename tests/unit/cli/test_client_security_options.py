"""Client settings on the command line (``--command-config FILE`` and ``-X``) on every command that
talks to a broker, and ``strom users`` against the scripted SASL broker."""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strom.cli import common, pipeline
from strom.cli.common import check_client_config, client_settings, read_client_properties
from strom.cli.main import build_parser, main
from strom.cli.output import UsageError
from strom.client.config import AdminConfig
from tests.unit.client.sasl_broker import ScriptedBroker, running_in_thread


def _leaf_parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _leaf_parsers(child, (*path, name))
            return
    yield " ".join(path), parser


def test_every_command_that_connects_takes_command_config_and_x() -> None:
    connecting = [
        (name, parser)
        for name, parser in _leaf_parsers(build_parser())
        if any("--bootstrap-server" in action.option_strings for action in parser._actions)
    ]
    assert len(connecting) > 20
    for name, parser in connecting:
        options = {option for action in parser._actions for option in action.option_strings}
        assert {"--command-config", "-X"} <= options, name
    assert {"users add", "users list", "users remove", "pipeline archive"} <= {name for name, _ in connecting}


def test_properties_files_read_as_java_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# a comment\n"
        "! another\n"
        "\n"
        "security.protocol=SASL_SSL\n"
        "  sasl.mechanism : SCRAM-SHA-512\n"
        "sasl.username alice\n"
        "sasl.password=with=equals and spaces \n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="alice" password="with=equals and spaces";\n'
        "empty.value=\n"
    )
    assert read_client_properties(str(path)) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "with=equals and spaces",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="with=equals and spaces";',
        "empty.value": "",
    }


def test_a_missing_command_config_is_a_usage_error_before_connecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.properties"
    assert (
        main(["topics", "list", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(missing)]) == 2
    )
    error = capsys.readouterr().err
    assert f"--command-config: cannot read {missing}" in error


def test_an_incomplete_security_config_is_a_usage_error_before_connecting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n")
    assert main(["topics", "list", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(path)]) == 2
    assert (
        "--command-config: security.protocol=SASL_SSL with PLAIN needs sasl.username"
        in capsys.readouterr().err
    )


def _arguments(argv: list[str]) -> argparse.Namespace:
    arguments = build_parser().parse_args(argv)
    arguments.reachable_checked = True  # no broker in these tests
    return arguments


def test_x_wins_over_the_file_and_helper_clients_take_only_common_keys(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=file-user\n"
        "sasl.password=p\nlinger.ms=50\nrequest.timeout.ms=1\n"
    )
    arguments = _arguments(
        [
            "produce",
            "t",
            "--command-config",
            str(path),
            "-X",
            "sasl.username=x-user",
            "--request-timeout-ms",
            "3000",
        ]
    )
    everything = client_settings(arguments, passthrough=True)
    assert everything["sasl.username"] == "x-user"
    assert everything["linger.ms"] == "50"
    assert everything["request.timeout.ms"] == 3000, "the command's option wins over the file"
    common_only = client_settings(arguments)
    assert common_only["security.protocol"] == "SASL_PLAINTEXT" and common_only["sasl.username"] == "x-user"
    assert "linger.ms" not in common_only


def test_check_client_config_names_where_the_bad_key_came_from(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("sasl.usernam=alice\n")
    with pytest.raises(UsageError, match=r"--command-config: unknown AdminConfig key 'sasl\.usernam'"):
        check_client_config(_arguments(["topics", "list", "--command-config", str(path)]), AdminConfig)


def test_the_pipeline_gives_the_security_settings_to_sparks_clients(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("security.protocol=SSL\nssl.endpoint.identification.algorithm=none\n")
    arguments = _arguments(
        ["pipeline", "archive", "--topics", "t", "--output", "out", "--command-config", str(path)]
    )
    options = pipeline._source_options(arguments)
    assert options["kafka.security.protocol"] == "SSL"
    assert options["kafka.ssl.endpoint.identification.algorithm"] == "none"


# -- strom users -----------------------------------------------------------------------------------


@pytest.fixture
def broker() -> Iterator[ScriptedBroker]:
    with running_in_thread(ScriptedBroker(passwords={"admin": "admin-secret"})) as running:
        yield running


@pytest.fixture
def admin_config(tmp_path: Path) -> Path:
    path = tmp_path / "admin.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=admin\nsasl.password=admin-secret\n"
    )
    return path


def strom(broker: ScriptedBroker, config: Path, *argv: str) -> int:
    return main([*argv, "--bootstrap-server", broker.address, "--command-config", str(config)])


def test_users_add_list_remove_then_log_in(
    broker: ScriptedBroker, admin_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    password_file = tmp_path / "dave.password"
    password_file.write_text("dave-secret\n")
    assert strom(broker, admin_config, "users", "add", "dave", "--password-file", str(password_file)) == 0
    assert "set SCRAM-SHA-512 credentials of user 'dave' (4096 iterations)" in capsys.readouterr().out
    assert (
        strom(
            broker,
            admin_config,
            "users",
            "add",
            "dave",
            "--mechanism",
            "scram-sha-256",
            "--iterations",
            "8192",
            "--password",
            "dave-secret",
        )
        == 0
    )
    capsys.readouterr()

    assert strom(broker, admin_config, "users", "list", "--output", "json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert {"user": "dave", "credentials": [
        {"mechanism": "SCRAM-SHA-256", "iterations": 8192},
        {"mechanism": "SCRAM-SHA-512", "iterations": 4096},
    ]} in listed  # fmt: skip
    assert strom(broker, admin_config, "users", "list", "dave") == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["USER", "MECHANISM", "ITERATIONS"]
    assert [line.split() for line in table[1:]] == [
        ["dave", "SCRAM-SHA-256", "8192"],
        ["dave", "SCRAM-SHA-512", "4096"],
    ]

    dave = tmp_path / "dave.properties"
    dave.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=dave\nsasl.password=dave-secret\n"
    )
    assert strom(broker, dave, "topics", "list") == 0

    assert strom(broker, admin_config, "users", "remove", "dave", "--mechanism", "SCRAM-SHA-512") == 0
    assert "removed SCRAM-SHA-512 credentials of user 'dave'" in capsys.readouterr().out
    assert strom(broker, dave, "topics", "list") == 1
    assert "authentication of 'dave' with SCRAM-SHA-512 failed" in capsys.readouterr().err
    assert strom(broker, admin_config, "users", "remove", "dave") == 0  # every credential left
    assert "removed SCRAM-SHA-256 credentials" in capsys.readouterr().out
    assert strom(broker, admin_config, "users", "list", "dave") == 0
    assert "user 'dave' has no SCRAM credentials" in capsys.readouterr().out


def test_a_wrong_password_is_one_clear_line_at_once(
    broker: ScriptedBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "wrong.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\nsasl.password=nope\n"
    )
    assert strom(broker, config, "users", "list") == 1
    error = capsys.readouterr().err
    assert error.startswith("strom: error: authentication of 'admin' with PLAIN failed:"), error
    assert error.count("\n") == 1


def test_the_password_comes_from_stdin_or_is_refused_without_a_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from strom.cli.users import read_password

    arguments = argparse.Namespace(password=None, password_file="-", name="erin")
    monkeypatch.setattr("sys.stdin", io.StringIO("from-stdin\nignored\n"))
    assert read_password(arguments) == "from-stdin"
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(UsageError, match="must not be empty"):
        read_password(arguments)
    with pytest.raises(UsageError, match="no terminal to prompt"):
        read_password(argparse.Namespace(password=None, password_file=None, name="erin"))


def test_prompted_passwords_must_match(monkeypatch: pytest.MonkeyPatch) -> None:
    from strom.cli import users

    answers = iter(["one", "two"])
    monkeypatch.setattr("sys.stdin", _Terminal())
    monkeypatch.setattr(users.getpass, "getpass", lambda prompt: next(answers))
    with pytest.raises(UsageError, match="the two passwords differ"):
        users.read_password(argparse.Namespace(password=None, password_file=None, name="erin"))


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["users", "add", "erin", "--iterations", "100", "--password", "x"],
            "--iterations must be 4096..16384",
        ),
        (["users", "add", "erin", "--mechanism", "PLAIN", "--password", "x"], "is not a SCRAM mechanism"),
        (["users", "add", "erin", "--password", ""], "the password must not be empty"),
    ],
)
def test_users_usage_errors_exit_2_without_connecting(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_connection(*args: Any) -> None:
        raise AssertionError("connected")

    monkeypatch.setattr(common, "check_reachable", no_connection)
    try:
        code = main([*argv, "--bootstrap-server", "127.0.0.1:1"])
    except SystemExit as exit_info:  # argparse's own usage errors
        code = int(exit_info.code or 0)
    assert code == 2
    assert message in capsys.readouterr().err


def test_librdkafkas_sasl_mechanisms_is_a_known_client_setting_everywhere() -> None:
    from strom.client.config import ConsumerConfig
    from strom.spark.options import client_setting_names, option_warnings

    assert "sasl.mechanisms" in client_setting_names(ConsumerConfig)
    options = {"kafka.sasl.mechanisms": "PLAIN", "kafka.security.protocol": "SASL_SSL"}
    assert option_warnings(options, side="read", client_keys=client_setting_names(ConsumerConfig)) == []
