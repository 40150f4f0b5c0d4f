"""The two ways to run the console, over HTTP without a browser: ``strom broker --console-port``
(the console beside the broker, reading it through its own listener) and ``strom console
--console-read-only`` against that broker."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.cli.dev_cluster import wait_until
from strom.client.admin import Admin, NewTopic
from tests.compat.conftest import BrokerProcess, free_port
from tests.console.browser import ConsoleProcess

pytestmark = pytest.mark.compat


def fetch(url: str, data: bytes | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, data=data, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@pytest.fixture(scope="module")
def broker_with_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp("console-broker"), arguments=["--console-port", str(port)])
    broker.work_dir.mkdir(exist_ok=True)
    try:
        broker.start()
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([NewTopic("beside-the-broker", 2, 1)])
        yield broker, f"http://127.0.0.1:{port}/"
    finally:
        broker.close()


def test_the_broker_serves_its_own_console(broker_with_console: tuple[BrokerProcess, str]) -> None:
    broker, url = broker_with_console
    wait_until(lambda: fetch(url)[0] == 200, "the broker's console to answer", 60)
    status, page = fetch(url)
    assert "id=controller>0</dd>" in page
    status, page = fetch(url + "topics")
    assert status == 200 and 'data-name="beside-the-broker"' in page
    assert "method=post" not in page  # the list links to the form; the form itself is elsewhere
    status, page = fetch(url + "topics/new")
    assert status == 200 and "name=csrf" in page
    refused, _ = fetch(url + "topics", data=b"name=x&partitions=1")
    assert refused == 403
    assert "console on http://127.0.0.1:" in broker.log_text()


def test_the_broker_stops_its_console_with_it(tmp_path: Path) -> None:
    port = free_port()
    broker = BrokerProcess(tmp_path, arguments=["--console-port", str(port)])
    try:
        broker.start()
        wait_until(lambda: fetch(f"http://127.0.0.1:{port}/groups")[0] == 200, "the console", 60)
        assert broker.stop() == 0
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
    finally:
        broker.close()


def test_strom_console_read_only(broker_with_console: tuple[BrokerProcess, str], tmp_path: Path) -> None:
    broker, _ = broker_with_console
    console = ConsoleProcess(broker.bootstrap, tmp_path / "console.log", "--console-read-only")
    try:
        status, page = fetch(console.url + "topic?name=beside-the-broker")
        assert status == 200 and "read-only" in page
        assert "<form method=post" not in page and "name=csrf" not in page
        assert fetch(console.url + "topics/new")[0] == 403
        assert (
            fetch(console.url + "topic/delete", data=b"name=beside-the-broker&confirm=beside-the-broker")[0]
            == 403
        )
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            assert "beside-the-broker" in admin.list_topics()
    finally:
        assert console.stop() == 0


def test_cluster_up_serves_the_console_from_broker_1(tmp_path: Path) -> None:
    import re
    import signal
    import subprocess
    import sys
    import time

    command = [sys.executable, "-m", "strom.cli.main", "cluster", "up", "--brokers", "1"]
    command += ["--data-dir", str(tmp_path / "cluster-data"), "--base-port", "0", "--zookeeper-port", "0"]
    with (
        (tmp_path / "up.err").open("w") as errors,
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True) as up,
    ):
        try:
            assert up.stdout is not None
            printed: list[str] = []
            deadline = time.monotonic() + 120
            while not printed or printed[-1] != "Ctrl-C stops them all.":
                line = up.stdout.readline()
                assert line, f"cluster up exited: {printed} {(tmp_path / 'up.err').read_text()}"
                printed.append(line.rstrip("\n"))
                assert time.monotonic() < deadline, printed
            found = re.search(
                r"^console +(http://127\.0\.0\.1:\d+/) +\(served by broker 1\)$", "\n".join(printed), re.M
            )
            assert found, printed
            url = found.group(1)
            wait_until(lambda: fetch(url)[0] == 200, "the console of broker 1", 60)
            status, page = fetch(url)
            assert status == 200 and "id=controller>1</dd>" in page
        finally:
            up.send_signal(signal.SIGINT)
            assert up.wait(120) == 130
