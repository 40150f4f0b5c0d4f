"""The broker's /metrics page, scraped over HTTP from a real ``strom broker`` and parsed with
prometheus_client's own parser while confluent-kafka produces, consumes and commits: the counters
move as the traffic says (bytes in = the bytes appended, messages in = records produced, lag =
log end minus committed, an error provoked is counted under its code), and every metric the shipped
Grafana dashboard queries is one the broker exports."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.compat.conftest import BrokerProcess, free_port
from tests.compat.support import (
    admin_client,
    confluent_consumer,
    confluent_producer,
    create_topic,
    unique_topic,
)

pytestmark = pytest.mark.compat

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
RECORD_VALUE_BYTES = 100
# A v2 record of a 100-byte value and a short key is at most ~30 bytes more, and each batch adds
# a 61-byte header; a bound well above that still catches double counting.
OVERHEAD_PER_RECORD_BYTES_MAX = 40

Samples = dict[str, list[tuple[dict[str, str], float]]]


class MetricsBroker(BrokerProcess):
    def __init__(self, work_dir: Path, settings: dict[str, str]) -> None:
        super().__init__(work_dir, settings)
        self.metrics_port = free_port()

    def command(self) -> list[str]:
        return [*super().command(), "--metrics-port", str(self.metrics_port)]

    def scrape(self) -> Samples:
        return scrape(self.metrics_port)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[MetricsBroker]:
    process = MetricsBroker(tmp_path, {"group.initial.rebalance.delay.ms": "0"})
    process.start()
    try:
        yield process
    finally:
        process.stop()


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def matching(samples: Samples, name: str, **labels: str) -> list[float]:
    return [v for found, v in samples.get(name, []) if all(found.get(k) == w for k, w in labels.items())]


def value(samples: Samples, name: str, **labels: str) -> float:
    found = matching(samples, name, **labels)
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(matching(samples, name, **labels))


def produce(bootstrap: str, topic: str, count: int, **settings: object) -> list[KafkaError | None]:
    """Produce ``count`` keyed 100-byte records; the delivery error of each (None when delivered)."""
    producer = confluent_producer(bootstrap, **settings)
    outcomes: list[KafkaError | None] = []
    for index in range(count):
        producer.produce(
            topic,
            b"v" * RECORD_VALUE_BYTES,
            key=f"key-{index}".encode(),
            on_delivery=lambda error, _message: outcomes.append(error),
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    return outcomes


def consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> None:
    """A group member reads ``count`` records of ``topic`` and commits where it is, synchronously."""
    consumer = confluent_consumer(
        bootstrap, group_id=group, enable_partition_eof=False, session_timeout_ms=6000
    )
    consumer.subscribe([topic])
    read = 0
    deadline = time.monotonic() + 30
    while read < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            consumer.store_offsets(message)
            read += 1
    assert read == count
    consumer.commit(asynchronous=False)
    consumer.close()


def test_topic_traffic_counters_and_group_lag(broker: MetricsBroker) -> None:
    topic = unique_topic("metered")
    create_topic(broker.bootstrap, topic, partitions=3)
    produced = 3000
    assert produce(broker.bootstrap, topic, produced) == [None] * produced
    consume_and_commit(broker.bootstrap, topic, "metered-group", produced)
    more = 500
    assert produce(broker.bootstrap, topic, more) == [None] * more

    samples = broker.scrape()
    records = produced + more
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == records
    bytes_in = value(samples, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    # Every appended byte is in the log (a fresh topic, nothing deleted): the sum is exact.
    assert bytes_in == total(samples, "kafka_log_log_size", topic=topic)
    payload = records * RECORD_VALUE_BYTES
    assert payload < bytes_in <= payload + records * OVERHEAD_PER_RECORD_BYTES_MAX
    produce_requests = value(
        samples, "kafka_server_brokertopicmetrics_totalproducerequests_total", topic=topic
    )
    assert produce_requests >= 3  # at least one per partition
    assert value(samples, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=topic) == 0
    # One answer per partition produced to, all NONE (there was no other topic).
    assert value(samples, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") == (
        produce_requests
    )
    # The consumer read everything produced before its commit, whole batches at least once.
    assert value(samples, "kafka_server_brokertopicmetrics_messagesout_total", topic=topic) >= produced
    assert value(samples, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) >= produced * 100
    assert value(samples, "kafka_server_brokertopicmetrics_failedfetchrequests_total", topic=topic) == 0

    # Lag per partition is exactly the log end offset minus the committed offset.
    lags = 0.0
    for partition in ("0", "1", "2"):
        end = value(samples, "kafka_log_log_logendoffset", topic=topic, partition=partition)
        committed = value(
            samples,
            "kafka_consumergroup_current_offset",
            consumergroup="metered-group",
            topic=topic,
            partition=partition,
        )
        lag = value(
            samples,
            "kafka_consumergroup_lag",
            consumergroup="metered-group",
            topic=topic,
            partition=partition,
        )
        assert lag == end - committed
        lags += lag
    assert lags == more
    assert total(samples, "kafka_consumergroup_current_offset", consumergroup="metered-group") == produced
    assert value(samples, "kafka_consumergroup_members", consumergroup="metered-group") == 0
    assert value(samples, "strom_groups", state="Empty") == 1


def test_errors_are_counted_by_api_and_code(broker: MetricsBroker) -> None:
    small = unique_topic("small")
    create_topic(broker.bootstrap, small, config={"max.message.bytes": "1000"})
    producer = confluent_producer(broker.bootstrap, acks=1)
    outcomes: list[KafkaError | None] = []
    producer.produce(small, b"x" * 5000, on_delivery=lambda error, _message: outcomes.append(error))
    assert producer.flush(30) == 0
    assert outcomes and outcomes[0] is not None and outcomes[0].code() == KafkaError.MSG_SIZE_TOO_LARGE

    # CreateTopics for a topic that exists: TOPIC_ALREADY_EXISTS.
    with pytest.raises(Exception, match="already exists"):
        create_topic(broker.bootstrap, small)

    # A fetch past the end: OFFSET_OUT_OF_RANGE, then the consumer resets to earliest and reads.
    assert produce(broker.bootstrap, small, 5) == [None] * 5
    consumer = confluent_consumer(broker.bootstrap)
    consumer.assign([TopicPartition(small, 0, 1000)])
    deadline = time.monotonic() + 30
    read = 0
    while read < 5 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            read += 1
    consumer.close()
    assert read == 5

    samples = broker.scrape()
    assert (
        value(
            samples, "kafka_network_requestmetrics_errors_total", request="Produce", error="MESSAGE_TOO_LARGE"
        )
        == 1
    )
    assert value(samples, "kafka_server_brokertopicmetrics_failedproducerequests_total", topic=small) == 1
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic=small) == 5
    assert (
        value(
            samples,
            "kafka_network_requestmetrics_errors_total",
            request="CreateTopics",
            error="TOPIC_ALREADY_EXISTS",
        )
        == 1
    )
    assert (
        value(samples, "kafka_network_requestmetrics_errors_total", request="CreateTopics", error="NONE") == 1
    )
    out_of_range = value(
        samples,
        "kafka_network_requestmetrics_errors_total",
        request="FetchConsumer",
        error="OFFSET_OUT_OF_RANGE",
    )
    assert out_of_range >= 1
    assert (
        value(samples, "kafka_server_brokertopicmetrics_failedfetchrequests_total", topic=small)
        == out_of_range
    )
    # Errors of no other kind were made up.
    errors = {
        (labels["request"], labels["error"])
        for labels, count in samples["kafka_network_requestmetrics_errors_total"]
        if labels["error"] != "NONE" and count
    }
    assert errors <= {
        ("Produce", "MESSAGE_TOO_LARGE"),
        ("CreateTopics", "TOPIC_ALREADY_EXISTS"),
        ("FetchConsumer", "OFFSET_OUT_OF_RANGE"),
        # librdkafka asks Metadata for the topic before it exists in some of these steps.
        ("Metadata", "UNKNOWN_TOPIC_OR_PARTITION"),
        ("Metadata", "LEADER_NOT_AVAILABLE"),
    }, errors


def test_request_time_split_flushes_and_constant_gauges(broker: MetricsBroker) -> None:
    topic = unique_topic("flushed")
    create_topic(broker.bootstrap, topic, config={"flush.messages": "1"})
    assert produce(broker.bootstrap, topic, 20, linger_ms=0, batch_num_messages=1) == [None] * 20
    # A consumer at the end of an empty partition long-polls: its fetches wait (remote time).
    idle = unique_topic("idle")
    create_topic(broker.bootstrap, idle)
    consumer = confluent_consumer(broker.bootstrap, fetch_wait_max_ms=200)
    consumer.assign([TopicPartition(idle, 0, 0)])
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        consumer.poll(0.2)
    consumer.close()

    samples = broker.scrape()
    assert value(samples, "kafka_log_logflushstats_logflushrateandtimems_count") >= 1
    assert value(samples, "kafka_log_logflushstats_logflushrateandtimems_bucket", le="+Inf") >= 1
    for request in ("Produce", "FetchConsumer", "Metadata", "ApiVersions"):
        count = value(samples, "kafka_network_requestmetrics_totaltimems_count", request=request)
        assert count >= 1
        assert total(samples, "kafka_network_requestmetrics_requests_total", request=request) >= count
        parts = sum(
            value(samples, f"kafka_network_requestmetrics_{name}_sum", request=request)
            for name in (
                "requestqueuetimems",
                "localtimems",
                "remotetimems",
                "responsequeuetimems",
                "responsesendtimems",
            )
        )
        whole = value(samples, "kafka_network_requestmetrics_totaltimems_sum", request=request)
        assert abs(parts - whole) < 0.01 * count + 1e-3, (request, parts, whole)
        for name in ("requestqueuetimems", "localtimems", "responsequeuetimems", "responsesendtimems"):
            assert value(samples, f"kafka_network_requestmetrics_{name}_count", request=request) == count
            assert value(samples, f"kafka_network_requestmetrics_{name}_sum", request=request) >= 0
    # The long polls waited ~200 ms each, and that is remote time, not local.
    fetches = value(samples, "kafka_network_requestmetrics_totaltimems_count", request="FetchConsumer")
    remote_ms = value(samples, "kafka_network_requestmetrics_remotetimems_sum", request="FetchConsumer")
    assert remote_ms > 100
    assert value(samples, "kafka_network_requestmetrics_localtimems_sum", request="FetchConsumer") < remote_ms
    assert value(samples, "kafka_network_requestmetrics_remotetimems_sum", request="Produce") == 0
    assert fetches >= 2

    # One node: it is the controller and leads every partition, none lags or is offline.
    metadata = admin_client(broker.bootstrap).list_topics(timeout=10)
    partitions = sum(len(found.partitions) for found in metadata.topics.values())
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(samples, "kafka_server_replicamanager_partitioncount") == partitions
    assert value(samples, "kafka_server_replicamanager_leadercount") == partitions
    # Internal topics are summarised: one log size series, no per-partition offsets.
    assert matching(samples, "kafka_log_log_size", topic="__consumer_offsets") == [
        value(samples, "kafka_log_log_size", topic="__consumer_offsets", partition="(all)")
    ]
    assert not matching(samples, "kafka_log_log_logendoffset", topic="__consumer_offsets")

    assert value(samples, "process_cpu_seconds_total") > 0
    assert value(samples, "process_resident_memory_bytes") > 10 * 1024 * 1024
    assert 0 < value(samples, "process_open_fds") <= value(samples, "process_max_fds")
    assert value(samples, "process_start_time_seconds") <= time.time()


# The PromQL functions the dashboard uses (everything else outside labels and groupings is a metric).
_PROMQL_FUNCTIONS = frozenset({"sum", "rate", "deriv", "histogram_quantile"})


def dashboard_metric_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    expressions: list[str] = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expressions.append(target["expr"])
    for variable in dashboard["templating"]["list"]:
        expressions.append(variable["definition"])
    names: set[str] = set()
    for expression in expressions:
        assert expression.count("(") == expression.count(")"), expression
        assert expression.count("{") == expression.count("}"), expression
        without_strings = re.sub(r'"[^"]*"|\[[^\]]*\]', "", expression)
        without_strings = re.sub(r"label_values\(([^,]*),[^)]*\)", r"\1", without_strings)
        without_labels = re.sub(r"\{[^}]*\}|\b(?:by|without)\s*\([^)]*\)", "", without_strings)
        for word in re.findall(r"[a-zA-Z_][a-zA-Z0-9_]*", without_labels):
            if word not in _PROMQL_FUNCTIONS:
                names.add(word)
    return names


def test_the_dashboard_queries_metrics_the_broker_exports(broker: MetricsBroker) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    assert all("gridPos" in panel for panel in dashboard["panels"])
    # Traffic that makes every family have samples: produce, a group that consumes and commits.
    topic = unique_topic("dashboard")
    create_topic(broker.bootstrap, topic, config={"flush.messages": "1"})
    assert produce(broker.bootstrap, topic, 10) == [None] * 10
    consume_and_commit(broker.bootstrap, topic, "dashboard-group", 10)
    samples = broker.scrape()

    names = dashboard_metric_names()
    assert len(names) >= 25, names  # the extraction found the queries
    missing = sorted(name for name in names if name not in samples)
    assert not missing, f"the dashboard queries metrics the broker does not export: {missing}"


def test_other_paths_are_not_found(broker: MetricsBroker) -> None:
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/other", timeout=10)
    assert raised.value.code == 404
    raised.value.close()
