"""Helpers of the quota tests: a broker with its /metrics page, raw produces, admin shortcuts."""

from __future__ import annotations

import time

from strom.client.admin import Admin, NewTopic
from strom.protocol.messages.produce import ProduceRequest, ProduceResponse
from strom.protocol.records.batch import Record, build_batch
from tests.compat.conftest import BrokerProcess, free_port
from tests.compat.wire import CLIENT_ID as WIRE_CLIENT_ID
from tests.compat.wire import WireClient

__all__ = ["WIRE_CLIENT_ID", "MetricsBroker", "admin_for", "create_topic", "produce_raw"]


class MetricsBroker(BrokerProcess):
    """A broker that also serves /metrics."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.metrics_port = free_port()

    def command(self) -> list[str]:
        return [*super().command(), "--metrics-port", str(self.metrics_port)]


def admin_for(broker: BrokerProcess) -> Admin:
    return Admin({"bootstrap.servers": broker.bootstrap, "client.id": "quota-admin"})


def create_topic(broker: BrokerProcess, topic: str, partitions: int = 1) -> None:
    with admin_for(broker) as admin:
        admin.create_topics([NewTopic(topic, partitions, 1)])


def produce_raw(
    client: WireClient, topic: str, value: bytes, version: int = 9
) -> tuple[ProduceResponse, float]:
    """One Produce of one record; the response and how long the round trip took (s)."""
    records = build_batch([Record(offset_delta=0, timestamp_delta=0, key=b"k", value=value)])
    request = ProduceRequest(
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)]
            )
        ],
    )
    started = time.monotonic()
    response = client.round_trip(request, ProduceResponse, version)
    assert response.responses[0].partition_responses[0].error_code == 0
    return response, time.monotonic() - started
