"""``strom console`` and ``strom broker --console-*`` on the command line (no cluster needed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from strom.cli.main import build_parser, main


def test_console_options_parse() -> None:
    arguments = build_parser().parse_args(
        [
            "console",
            "--bootstrap-server",
            "k:9092",
            "--port",
            "0",
            "--host",
            "::1",
            "--console-read-only",
            "-X",
            "a=b",
        ]
    )
    assert (arguments.port, arguments.host, arguments.console_read_only) == (0, "::1", True)
    assert arguments.client_config == [("a", "b")]
    broker = build_parser().parse_args(["broker", "--console-port", "8080", "--console-read-only"])
    assert (broker.console_port, broker.console_read_only) == (8080, True)
    assert build_parser().parse_args(["broker"]).console_port is None  # off by default


@pytest.mark.parametrize("interval", ["0", "-5", "3600001"])
def test_a_bad_sample_interval_is_a_usage_error(interval: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["console", "--lag-sample-interval-ms", interval, "--bootstrap-server", "127.0.0.1:1"]) == 2
    assert "--lag-sample-interval-ms must be 1..3600000" in capsys.readouterr().err


def test_a_port_out_of_range_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["console", "--port", "70000"])
    assert exited.value.code == 2
    assert "out of range" in capsys.readouterr().err


def test_the_broker_refuses_a_console_without_a_plaintext_listener(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from strom.broker.config import BrokerConfig
    from strom.broker.run import run_broker

    class NeverStarted:
        async def start(self, bootstrap: Callable[[], str]) -> None:
            raise AssertionError("started")

        async def stop(self) -> None:
            raise AssertionError("stopped")

    config = BrokerConfig(
        host=None, port=None, data_dir=tmp_path, values={"listeners": "SASL_PLAINTEXT://127.0.0.1:0"}
    )
    assert run_broker(config, beside=NeverStarted()) == 1
    assert "--console-port needs a PLAINTEXT listener" in caplog.text
    assert not any(tmp_path.iterdir())  # refused before the broker touched its data directory


def test_console_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["console", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "usage: strom console" in out and "--console-read-only" in out and "docs/console.md" in out
