"""``strom consume --group`` stopped by SIGTERM (a supervisor, ``kill``) behaves as on Ctrl-C: it
leaves the group at once and prints its summary, so the group is Empty right away and its offsets
can be reset without waiting for the member's session to expire."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
import uuid

import pytest

from tests.compat.cli_support import run_strom, strom_executable
from tests.compat.conftest import BrokerProcess
from tests.compat.support import confluent_producer, create_topic, unique_topic

pytestmark = pytest.mark.compat

RECORDS = 5
PRINT_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def shared_broker_settings() -> dict[str, str]:
    # The session timeout is long on purpose: a member that did not leave would hold the group for it.
    return {"group.initial.rebalance.delay.ms": "0"}


def _lines_of(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line.rstrip("\n"))


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_group_consumer_leaves_the_group_and_prints_its_summary(
    shared_broker: BrokerProcess, stop_signal: signal.Signals
) -> None:
    topic = unique_topic("cli-signal")
    group = f"cli-signal-{uuid.uuid4().hex[:8]}"
    create_topic(shared_broker.bootstrap, topic, 2)
    producer = confluent_producer(shared_broker.bootstrap)
    for index in range(RECORDS):
        producer.produce(topic, value=b"v%d" % index)
    assert producer.flush(30) == 0
    bootstrap = ("--bootstrap-server", shared_broker.bootstrap)

    process = subprocess.Popen(
        [strom_executable(), "consume", topic, "--group", group, "--from-beginning", *bootstrap,
         "-X", "session.timeout.ms=45000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    try:
        printed: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_lines_of, args=(process.stdout, printed), daemon=True).start()
        seen: list[str] = []
        deadline = time.monotonic() + PRINT_TIMEOUT_S
        while len(seen) < RECORDS and time.monotonic() < deadline:
            try:
                seen.append(printed.get(timeout=0.5))
            except queue.Empty:
                assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert sorted(seen) == [f"v{index}" for index in range(RECORDS)]
        described = run_strom("groups", "describe", group, "--output", "json", *bootstrap)
        assert described.returncode == 0, described.stderr
        assert len(json.loads(described.stdout)[0]["members"]) == 1

        process.send_signal(stop_signal)
        process.wait(EXIT_TIMEOUT_S)
        stderr = process.stderr.read() if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
    assert process.returncode == 0, stderr
    assert stderr == f"consumed {RECORDS} records\n"

    # At once: no waiting for a session timeout.
    described = run_strom("groups", "describe", group, "--output", "json", *bootstrap)
    assert described.returncode == 0, described.stderr
    [state] = json.loads(described.stdout)
    assert (state["state"], state["members"]) == ("Empty", [])
    assert sum(row["committed_offset"] or 0 for row in state["offsets"]) == RECORDS  # what it printed
    reset = run_strom(
        "groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", *bootstrap
    )
    assert reset.returncode == 0, reset.stderr
    assert "offsets reset" in reset.stdout
