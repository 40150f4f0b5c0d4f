"""The broker's /metrics page, scraped over HTTP and parsed with prometheus_client's own parser."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.compat.conftest import BrokerProcess, free_port

pytestmark = pytest.mark.compat


class MetricsBroker(BrokerProcess):
    def __init__(self, work_dir: Path, settings: dict[str, str]) -> None:
        super().__init__(work_dir, settings)
        self.metrics_port = free_port()

    def command(self) -> list[str]:
        return [*super().command(), "--metrics-port", str(self.metrics_port)]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MetricsBroker]:
    process = MetricsBroker(tmp_path, {"group.initial.rebalance.delay.ms": "0"})
    process.start()
    try:
        yield process
    finally:
        process.stop()


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    matching = [v for found, v in samples.get(name, []) if all(found.get(k) == w for k, w in labels.items())]
    assert len(matching) == 1, (name, labels, samples.get(name))
    return matching[0]


def test_metrics_reflect_traffic_logs_and_groups(broker: MetricsBroker) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for index in range(500):
        producer.produce("metered", b"x" * 100, key=str(index).encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "metered-group",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe(["metered"])
    consumed = 0
    deadline = time.monotonic() + 30
    while consumed < 500 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            consumed += 1
    assert consumed == 500
    consumer.commit(asynchronous=False)

    samples = scrape(broker.metrics_port)
    assert value(samples, "strom_log_end_offset", topic="metered", partition="0") == 500
    assert value(samples, "strom_log_size_bytes", topic="metered", partition="0") > 500 * 100
    assert value(samples, "strom_groups", state="Stable") == 1
    assert value(samples, "strom_group_members") == 1
    assert value(samples, "strom_rebalances_total") >= 1
    assert value(samples, "strom_connections") >= 1
    assert value(samples, "strom_bytes_in_total") > 500 * 100
    assert value(samples, "strom_bytes_out_total") > 500 * 100
    produce_requests = sum(v for labels, v in samples["strom_requests_total"] if labels["api"] == "Produce")
    assert produce_requests >= 1
    assert value(samples, "strom_request_latency_seconds_count", api="Fetch") >= 1
    assert value(samples, "strom_request_latency_seconds_bucket", api="JoinGroup", le="+Inf") >= 1
    consumer.close()

    after_close = scrape(broker.metrics_port)
    assert value(after_close, "strom_groups", state="Empty") == 1
    assert value(after_close, "strom_group_members") == 0


def test_other_paths_are_not_found(broker: MetricsBroker) -> None:
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/other", timeout=10)
    assert raised.value.code == 404
    raised.value.close()
