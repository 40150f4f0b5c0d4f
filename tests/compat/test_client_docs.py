"""docs/client.md says what the client does: every Python example in it runs, in order, against a
fresh real broker, and prints what its comments say (``print(...)  # expected``, where ``...``
stands for anything). Also the Producer's idempotence default against a real broker: acks=1
without asking for idempotence produces (the Java client's rule), asking for both is refused."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from strom.client.errors import ConfigError
from strom.client.producer import Producer
from tests.compat.conftest import StartBroker
from tests.compat.support import confluent_read_all, create_topic, unique_topic

pytestmark = pytest.mark.compat

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"
EXAMPLE_TIMEOUT_S = 120.0


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def expected_lines(example: str) -> list[re.Pattern[str]]:
    """``print(...)  # text``: the line printed, ``...`` matching anything."""
    patterns = []
    for line in example.splitlines():
        match = re.match(r"\s*print\(.*\)\s+# (.+)$", line)
        if match:
            patterns.append(re.compile(".*".join(re.escape(part) for part in match.group(1).split("..."))))
    return patterns


def test_every_example_runs_and_prints_what_it_says(start_broker: StartBroker, tmp_path: Path) -> None:
    broker = start_broker({"group.initial.rebalance.delay.ms": "0"})
    found = examples()
    assert len(found) >= 7
    for index, example in enumerate(found):
        script = tmp_path / f"example{index}.py"
        script.write_text(example.replace("localhost:9092", broker.bootstrap))
        ran = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=EXAMPLE_TIMEOUT_S,
            check=False,
        )
        assert ran.returncode == 0, f"example {index}:\n{example}\n{ran.stderr}"
        printed = iter(ran.stdout.splitlines())
        for pattern in expected_lines(example):
            # Each expected line appears, in order (other prints may come between).
            assert any(pattern.fullmatch(line) for line in printed), (
                f"example {index}: no line like {pattern.pattern!r} in:\n{ran.stdout}"
            )


def test_acks_1_without_idempotence_asked_for_produces(start_broker: StartBroker) -> None:
    broker = start_broker()
    topic = unique_topic("acks-one")
    create_topic(broker.bootstrap, topic, 1)
    with Producer({"bootstrap.servers": broker.bootstrap, "acks": 1}) as producer:
        assert producer.config.enable_idempotence is False
        metadata = producer.send(topic, b"once").result(timeout=30)
    assert metadata.offset == 0
    assert [record.value for record in confluent_read_all(broker.bootstrap, topic, 1)] == [b"once"]
    with pytest.raises(ConfigError, match=r"enable\.idempotence=true requires acks=all, not acks=1"):
        Producer({"bootstrap.servers": broker.bootstrap, "acks": "1", "enable.idempotence": "true"})
