"""Settings every test directory shares."""

from __future__ import annotations

import signal

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # A shell starts a background job (`make test &`, `nohup … &`) with SIGINT ignored, and a
    # process that ignores a signal hands that on to every program it starts: the brokers, `strom
    # cluster up` and `strom consume` the tests stop with SIGINT (Ctrl-C) would not hear it. With a
    # handler here the programs the tests start get SIGINT's default action again (exec resets a
    # handled signal, never an ignored one), whatever started the test run.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
