"""`strom pipeline` keeps PySpark's accumulator server from printing a traceback when the JVM
closes its connection at shutdown (socketserver's handle_error prints it on stderr)."""

from __future__ import annotations

import socketserver
from types import SimpleNamespace

import pytest

from strom.cli.pipeline import quiet_accumulator_server


class _Server(socketserver.BaseServer):
    def __init__(self) -> None:  # no socket: only handle_error is exercised
        pass


def test_an_accumulator_connection_closed_at_shutdown_prints_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = _Server()
    quiet_accumulator_server(SimpleNamespace(_accumulatorServer=server))
    try:
        raise EOFError  # what PySpark's handler raises when the JVM's side closes
    except EOFError:
        server.handle_error(None, ("127.0.0.1", 51926))
    assert capsys.readouterr().err == ""


def test_unquieted_the_server_prints_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    server = _Server()
    try:
        raise EOFError
    except EOFError:
        server.handle_error(None, ("127.0.0.1", 51926))
    assert "Traceback" in capsys.readouterr().err


def test_a_context_without_an_accumulator_server_is_left_alone() -> None:
    quiet_accumulator_server(SimpleNamespace())
