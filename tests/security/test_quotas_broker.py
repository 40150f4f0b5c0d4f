"""Client quotas against a real ``strom broker``: AlterClientQuotas / DescribeClientQuotas over the
wire (strom's admin client and CLI), throttling of a producer and of a fetching consumer, the
throttle time reported to clients, changes that apply at once and survive a restart.

The brokers here measure over 2 samples of 1 s (``quota.window.num=2``), so a throttle is at most
2 s and a client gets at most one second's worth of its quota before it is held to it: the tests
stay short. (confluent-kafka 2.16 and kafka-python 3.0 have no client-quota admin calls, so the
admin side is tested with strom's client, the CLI and the raw protocol.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from strom.client.admin import QuotaFilterComponent, QuotaMatch
from strom.client.errors import BrokerResponseError
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.compat.conftest import BrokerProcess
from tests.compat.wire import WireClient
from tests.security.quota_support import WIRE_CLIENT_ID, MetricsBroker, admin_for, create_topic, produce_raw

# kafka-python 3 loads its protocol schemas with importlib.resources' read_text/open_text, deprecated
# in 3.11, also lazily: its import and its use are let through (as in tests/compat).
KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka import KafkaProducer

pytestmark = pytest.mark.compat

SHORT_WINDOW = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
USER_DEFAULT = (("user", None),)


@pytest.fixture
def broker(tmp_path: Path) -> Any:
    process = MetricsBroker(tmp_path / "broker", SHORT_WINDOW)
    process.work_dir.mkdir(parents=True)
    try:
        process.start()
        yield process
    finally:
        process.close()


def scrape(broker: MetricsBroker) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10) as page:
        return str(page.read().decode())


def metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{key}="{value}"' in line for key, value in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} with {labels} in the metrics page")


def test_both_apis_are_advertised_at_every_version(broker: BrokerProcess) -> None:
    with WireClient(broker.port) as client:
        response = client.round_trip(ApiVersionsRequest(), ApiVersionsResponse, 3)
    versions = {key.api_key: (key.min_version, key.max_version) for key in response.api_keys}
    assert versions[48] == (0, 1)  # DescribeClientQuotas
    assert versions[49] == (0, 1)  # AlterClientQuotas


def test_alter_and_describe_with_filters_validation_and_errors(broker: BrokerProcess) -> None:
    alice_app = (("client-id", "app"), ("user", "alice"))
    with admin_for(broker) as admin:
        admin.alter_client_quotas(
            {
                alice_app: {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
                USER_DEFAULT: {"consumer_byte_rate": 2048.0},
                (("client-id", "app"),): {"producer_byte_rate": 4096.0},
            }
        )
        assert admin.describe_client_quotas() == {
            alice_app: {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
            USER_DEFAULT: {"consumer_byte_rate": 2048.0},
            (("client-id", "app"),): {"producer_byte_rate": 4096.0},
        }
        exact_alice = [QuotaFilterComponent("user", QuotaMatch.EXACT, "alice")]
        assert list(admin.describe_client_quotas(exact_alice)) == [alice_app]
        assert admin.describe_client_quotas(exact_alice, strict=True) == {}
        default_user = [QuotaFilterComponent("user", QuotaMatch.DEFAULT)]
        assert list(admin.describe_client_quotas(default_user, strict=True)) == [USER_DEFAULT]
        any_client = [QuotaFilterComponent("client-id", QuotaMatch.ANY)]
        assert sorted(admin.describe_client_quotas(any_client)) == sorted(
            [alice_app, (("client-id", "app"),)]
        )

        # validate_only changes nothing; removing the last key removes the entity.
        admin.alter_client_quotas({USER_DEFAULT: {"consumer_byte_rate": None}}, validate_only=True)
        assert USER_DEFAULT in admin.describe_client_quotas()
        admin.alter_client_quotas({USER_DEFAULT: {"consumer_byte_rate": None}})
        assert USER_DEFAULT not in admin.describe_client_quotas()

        for alteration, message in [
            ({USER_DEFAULT: {"bogus_rate": 1.0}}, "unknown quota key"),
            ({USER_DEFAULT: {"producer_byte_rate": -5.0}}, "positive"),
            ({USER_DEFAULT: {"producer_byte_rate": 1.5}}, "whole number"),
            ({USER_DEFAULT: {"controller_mutation_rate": 1.0}}, "not supported"),
            ({(("group", "g"),): {"producer_byte_rate": 1.0}}, "unknown entity type"),
        ]:
            with pytest.raises(BrokerResponseError, match=message) as raised:
                admin.alter_client_quotas(alteration)
            assert raised.value.code == ErrorCode.INVALID_REQUEST
        with pytest.raises(BrokerResponseError, match="exact match"):
            admin.describe_client_quotas([QuotaFilterComponent("user", QuotaMatch.EXACT, None)])

    # One bad entry of a request does not stop the good one beside it (raw protocol, v0).
    request = AlterClientQuotasRequest(
        entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[AlterClientQuotasRequest.EntityData(entity_type="user", entity_name="bob")],
                ops=[AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=100.0)],
            ),
            AlterClientQuotasRequest.EntryData(
                entity=[AlterClientQuotasRequest.EntityData(entity_type="ip", entity_name="10.0.0.1")],
                ops=[AlterClientQuotasRequest.OpData(key="connection_creation_rate", value=1.0)],
            ),
        ]
    )
    with WireClient(broker.port) as client:
        response = client.round_trip(request, AlterClientQuotasResponse, 0)
    assert [entry.error_code for entry in response.entries] == [0, ErrorCode.INVALID_REQUEST]
    with admin_for(broker) as admin:
        assert admin.describe_client_quotas()[(("user", "bob"),)] == {"producer_byte_rate": 100.0}


def test_a_producer_over_its_quota_is_throttled_at_once_and_after_a_restart(broker: MetricsBroker) -> None:
    topic = "quota-produce"
    create_topic(broker, topic)
    value = b"x" * 100_000
    with WireClient(broker.port) as client:
        response, _ = produce_raw(client, topic, value)
        assert response.throttle_time_ms == 0  # no quota yet
        with admin_for(broker) as admin:
            admin.alter_client_quotas({(("client-id", WIRE_CLIENT_ID),): {"producer_byte_rate": 50_000.0}})
        # 100 KB against 50 KB/s over a (floored) 1 s window: 1 s of throttle, answered at once...
        response, _ = produce_raw(client, topic, value)
        assert 500 <= response.throttle_time_ms <= 2000
        # ...and the connection is muted for it: the next request waits.
        _, waited_s = produce_raw(client, topic, b"small")
        assert waited_s >= response.throttle_time_ms / 1000 * 0.8
    page = scrape(broker)
    labels = {"quota_type": "producer_byte_rate", "client_id": WIRE_CLIENT_ID}
    assert metric(page, "strom_quota_throttled_total", **labels) >= 1
    assert metric(page, "strom_quota_bound", **labels) == 50_000
    assert metric(page, "strom_quota_charged_total", **labels) >= 100_000  # charged since the quota was set

    broker.restart()
    with admin_for(broker) as admin:
        assert admin.describe_client_quotas()[(("client-id", WIRE_CLIENT_ID),)] == {
            "producer_byte_rate": 50_000.0
        }
    with WireClient(broker.port) as client:
        produce_raw(client, topic, value)
        response, _ = produce_raw(client, topic, value)
        assert response.throttle_time_ms > 0
        with admin_for(broker) as admin:
            admin.alter_client_quotas({(("client-id", WIRE_CLIENT_ID),): {"producer_byte_rate": None}})
        time.sleep(response.throttle_time_ms / 1000)
        for _ in range(3):
            response, _ = produce_raw(client, topic, value)
            assert response.throttle_time_ms == 0


def test_a_fetching_consumer_is_held_to_its_consumer_byte_rate(broker: MetricsBroker) -> None:
    topic = "quota-fetch"
    create_topic(broker, topic)
    # Small batches, so that the consumer's small fetches (a fetch returns at least one whole batch)
    # are what spreads the reading over time.
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "client.id": "loader", "linger.ms": 5, "batch.size": 20_000}
    )
    for index in range(120):
        producer.produce(topic, value=bytes([index]) * 10_000)
    assert producer.flush(30) == 0
    producer.close()
    rate = 300_000
    with admin_for(broker) as admin:
        admin.alter_client_quotas({(("client-id", "slow-reader"),): {"consumer_byte_rate": float(rate)}})
    throttles: list[int] = []
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "broker.address.family": "v4",
            "group.id": "quota-test",
            "client.id": "slow-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.max.bytes": 100_000,
            "message.max.bytes": 100_000,
            "max.partition.fetch.bytes": 100_000,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    read_bytes = 0
    started = time.monotonic()
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = started + 60
        at_end = False
        while not at_end:
            assert time.monotonic() < deadline, f"only {read_bytes} bytes read in 60 s"
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    at_end = True
                else:
                    read_bytes += len(message.value())
    finally:
        consumer.close()
    elapsed_s = time.monotonic() - started
    assert read_bytes == 1_200_000
    # One second's worth comes at once, the rest at the quota (~3.7 s); well below unthrottled speed.
    assert elapsed_s >= (read_bytes - 2 * rate) / rate
    assert throttles and max(throttles) > 0
    page = scrape(broker)
    assert (
        metric(
            page,
            "strom_quota_throttle_time_ms_total",
            quota_type="consumer_byte_rate",
            client_id="slow-reader",
        )
        > 0
    )


def test_the_cli_sets_describes_and_deletes_quotas(broker: BrokerProcess) -> None:
    def strom(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "strom.cli.main",
                "quotas",
                *arguments,
                "--bootstrap-server",
                broker.bootstrap,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    done = strom(
        "alter",
        "--entity-type", "users", "--entity-name", "alice",
        "--entity-type", "clients", "--entity-default",
        "--add-config", "producer_byte_rate=1048576,request_percentage=50",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "set producer_byte_rate=1048576 on client-id=<default>, user=alice" in done.stdout
    done = strom(
        "alter", "--entity-type", "clients", "--entity-default", "--add-config", "consumer_byte_rate=2000"
    )
    assert done.returncode == 0, done.stderr

    described = strom("describe", "--output", "json")
    assert described.returncode == 0, described.stderr
    assert json.loads(described.stdout) == [
        {"entity": {"client-id": None}, "quotas": {"consumer_byte_rate": 2000.0}},
        {
            "entity": {"client-id": None, "user": "alice"},
            "quotas": {"producer_byte_rate": 1048576.0, "request_percentage": 50.0},
        },
    ]
    # Types without names: every entity of exactly those types, named or default.
    table = strom("describe", "--entity-type", "clients").stdout
    assert re.search(r"client-id=<default>\s+consumer_byte_rate\s+2000", table)
    assert "alice" not in table

    bad = strom(
        "alter", "--entity-type", "users", "--entity-name", "bob", "--add-config", "producer_byte_rate=-1"
    )
    assert bad.returncode != 0 and "positive" in bad.stderr
    unnamed = strom("alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1")
    assert unnamed.returncode != 0 and "--entity-name" in unnamed.stderr

    done = strom(
        "alter", "--entity-type", "clients", "--entity-default", "--delete-config", "consumer_byte_rate"
    )
    assert done.returncode == 0, done.stderr
    assert "consumer_byte_rate" not in strom("describe", "--output", "json").stdout


def test_request_percentage_throttles_any_request_and_mutes_the_connection(broker: BrokerProcess) -> None:
    # 0.01 % of a thread: 100 µs of handling per second; a few Metadata requests are more than that.
    with admin_for(broker) as admin:
        admin.alter_client_quotas({(("client-id", WIRE_CLIENT_ID),): {"request_percentage": 0.01}})
    with WireClient(broker.port) as client:
        throttle_ms = 0
        for _ in range(200):
            response = client.round_trip(MetadataRequest(topics=None), MetadataResponse, 4)
            throttle_ms = response.throttle_time_ms
            if throttle_ms:
                break
        assert 0 < throttle_ms <= 2000
        started = time.monotonic()
        client.round_trip(MetadataRequest(topics=None), MetadataResponse, 4)
        assert time.monotonic() - started >= throttle_ms / 1000 * 0.8


@pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning")
def test_kafka_python_reports_the_throttle_in_its_metrics(broker: BrokerProcess) -> None:
    topic = "quota-kafka-python"
    create_topic(broker, topic)
    with admin_for(broker) as admin:
        admin.alter_client_quotas({(("client-id", "kp-limited"),): {"producer_byte_rate": 50_000.0}})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="kp-limited", linger_ms=5)
    try:
        started = time.monotonic()
        for _ in range(20):
            producer.send(topic, b"v" * 10_000)
        producer.flush(60)
        elapsed_s = time.monotonic() - started
        throttle_max = producer.metrics()["producer-metrics"]["throttle-time-max"]
    finally:
        producer.close()
    # 200 KB against 50 KB/s with 50 KB of credit: held back ~3 s in all (2 s at most per request).
    assert throttle_max > 0
    assert elapsed_s >= 2.0
