"""The metrics, driven through the in-process broker: what is counted per request and per
partition, how the page stays bounded, and that it parses as Prometheus text."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.base import limits
from strom.broker.metrics import (
    ConnectionTimes,
    RequestMetrics,
    add_remote_wait,
    bind_connection_times,
    error_counts,
    records_in,
)
from strom.protocol.errors import ErrorCode
from strom.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from strom.protocol.messages.delete_topics import DeleteTopicsRequest
from strom.protocol.messages.fetch import FetchResponse
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest
from strom.protocol.messages.heartbeat import HeartbeatResponse
from strom.protocol.messages.offset_commit import OffsetCommitRequest
from strom.protocol.messages.produce import ProduceResponse
from tests.unit.broker.conftest import InProcessBroker
from tests.unit.broker.test_dispatch import batch, create_topic, fetch, produce

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(broker: InProcessBroker) -> Samples:
    page = broker.server.metrics.render(broker.server.state)
    samples: Samples = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    found = [v for got, v in samples.get(name, []) if all(got.get(k) == w for k, w in labels.items())]
    assert len(found) == 1, (name, labels, samples.get(name))
    return found[0]


def commit(broker: InProcessBroker, group: str, topic: str, offsets: dict[int, int]) -> None:
    broker.call(FindCoordinatorRequest(key=group), 1)  # creates __consumer_offsets
    request = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=p, committed_offset=o)
                    for p, o in offsets.items()
                ],
            )
        ],
    )
    response = broker.call(request, 2)
    assert all(p.error_code == ErrorCode.NONE for t in response.topics for p in t.partitions), response


def test_records_are_counted_from_batch_headers() -> None:
    data = batch([b"a", b"b", b"c"]) + batch([b"d"]) + batch([b"e", b"f"])
    assert records_in(data) == 6
    assert records_in(memoryview(data)) == 6
    assert records_in(b"") == 0
    assert records_in(None) == 0
    # A truncated last batch (a fetch cut at its limit) still counts the header it has.
    assert records_in(data[:-5]) == 6
    # Data that is not a batch (acks=0 answers nothing, so it is counted unchecked) ends the count.
    first = batch([b"a", b"b", b"c"])
    garbage = bytearray(first + batch([b"d"]))
    garbage[len(first) + 8 : len(first) + 12] = (-64891).to_bytes(4, "big", signed=True)
    assert records_in(garbage) == 3
    assert records_in(data[:30]) == 0
    # Nothing validated an acks=0 produce: a length that cannot be a batch's ends the count.
    broken = bytearray(data)
    broken[8:12] = (-64891).to_bytes(4, "big", signed=True)
    assert records_in(broken) == 0
    broken = bytearray(data)
    second = len(batch([b"a", b"b", b"c"]))
    broken[second + 8 : second + 12] = (3).to_bytes(4, "big")
    assert records_in(broken) == 3


def test_error_codes_are_found_where_the_version_has_them() -> None:
    produce_response = ProduceResponse(
        responses=[
            ProduceResponse.TopicProduceResponse(
                name="t",
                partition_responses=[
                    ProduceResponse.PartitionProduceResponse(index=0, error_code=ErrorCode.NONE),
                    ProduceResponse.PartitionProduceResponse(index=1, error_code=ErrorCode.MESSAGE_TOO_LARGE),
                    ProduceResponse.PartitionProduceResponse(index=2, error_code=ErrorCode.NONE),
                ],
            )
        ]
    )
    assert error_counts(produce_response, 9) == {ErrorCode.NONE: 2, ErrorCode.MESSAGE_TOO_LARGE: 1}
    fetch_response = FetchResponse(
        error_code=ErrorCode.NONE,
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic="t", partitions=[FetchResponse.PartitionData(error_code=ErrorCode.OFFSET_OUT_OF_RANGE)]
            )
        ],
    )
    # Fetch has a top-level error code from v7 only.
    assert error_counts(fetch_response, 6) == {ErrorCode.OFFSET_OUT_OF_RANGE: 1}
    assert error_counts(fetch_response, 7) == {ErrorCode.NONE: 1, ErrorCode.OFFSET_OUT_OF_RANGE: 1}
    assert error_counts(HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS), 4) == {
        ErrorCode.REBALANCE_IN_PROGRESS: 1
    }


def test_request_times_add_up_and_remote_waits_go_to_their_connection() -> None:
    metrics = RequestMetrics("Fetch", 17)
    metrics.observe(received=10.0, started=10.001, ended=10.5, remote=0.45, sending=10.502, sent=10.503)
    assert metrics.queue_s == pytest.approx(0.001)
    assert metrics.local_s == pytest.approx(0.049)
    assert metrics.remote_s == pytest.approx(0.45)
    assert metrics.response_queue_s == pytest.approx(0.002)
    assert metrics.send_s == pytest.approx(0.001)
    assert metrics.total.count == 1
    assert metrics.total.total_s == pytest.approx(0.503)
    assert metrics.total.bucket_counts[REQUEST_BUCKET_OF_503_MS] == 1

    import contextvars

    def in_a_connection() -> ConnectionTimes:
        times = ConnectionTimes()
        bind_connection_times(times)
        add_remote_wait(0.25)
        add_remote_wait(0.5)
        return times

    assert contextvars.copy_context().run(in_a_connection).remote_s == pytest.approx(0.75)
    add_remote_wait(1.0)  # no connection bound here: nothing to count to, and no error


# 0.503 s is in the 1000 ms bucket (after 500 ms).
REQUEST_BUCKET_OF_503_MS = 10


def test_produce_and_fetch_count_bytes_messages_and_errors_per_topic(broker: InProcessBroker) -> None:
    create_topic(broker, "counted", partitions=2)
    first, second = batch([b"x" * 10] * 4), batch([b"y" * 10] * 3)
    assert produce(broker, "counted", first).error_code == ErrorCode.NONE
    assert produce(broker, "counted", second, partition=1).error_code == ErrorCode.NONE
    assert produce(broker, "counted", second, partition=7).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(broker, "nowhere", first).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    produce(broker, "counted", first, acks=0)
    assert fetch(broker, "counted", 0).responses[0].partitions[0].error_code == ErrorCode.NONE
    assert fetch(broker, "counted", 99).responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE

    samples = scrape(broker)
    topic = {"topic": "counted"}
    assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", **topic) == 4 + 3 + 4
    assert value(samples, "kafka_server_brokertopicmetrics_bytesin_total", **topic) == 2 * len(first) + len(
        second
    )
    assert value(samples, "kafka_server_brokertopicmetrics_totalproducerequests_total", **topic) == 4
    assert value(samples, "kafka_server_brokertopicmetrics_failedproducerequests_total", **topic) == 1
    assert value(samples, "kafka_server_brokertopicmetrics_messagesout_total", **topic) == 8
    assert value(samples, "kafka_server_brokertopicmetrics_bytesout_total", **topic) == 2 * len(first)
    assert value(samples, "kafka_server_brokertopicmetrics_totalfetchrequests_total", **topic) == 2
    assert value(samples, "kafka_server_brokertopicmetrics_failedfetchrequests_total", **topic) == 1
    # A name no topic has gets no series (a client could send any number of them) but its error counts.
    assert not [
        labels
        for labels, _ in samples["kafka_server_brokertopicmetrics_bytesin_total"]
        if labels["topic"] == "nowhere"
    ]
    errors = "kafka_network_requestmetrics_errors_total"
    assert value(samples, errors, request="Produce", error="NONE") == 3
    assert value(samples, errors, request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == 2
    assert value(samples, errors, request="FetchConsumer", error="OFFSET_OUT_OF_RANGE") == 1
    assert value(samples, errors, request="CreateTopics", error="NONE") == 1
    assert value(samples, "kafka_network_requestmetrics_requests_total", request="Produce", version="9") == 5
    assert (
        value(samples, "kafka_network_requestmetrics_requests_total", request="FetchConsumer", version="12")
        == 2
    )


def test_deleted_topics_leave_the_page(broker: InProcessBroker) -> None:
    create_topic(broker, "doomed")
    produce(broker, "doomed", batch([b"v"]))
    assert value(scrape(broker), "kafka_server_brokertopicmetrics_messagesin_total", topic="doomed") == 1
    response = broker.call(DeleteTopicsRequest(topic_names=["doomed"], timeout_ms=1000), 4)
    assert response.responses[0].error_code == ErrorCode.NONE
    samples = scrape(broker)
    assert not [
        v
        for labels, v in samples.get("kafka_server_brokertopicmetrics_messagesin_total", [])
        if labels["topic"] == "doomed"
    ]
    assert not [v for labels, v in samples.get("kafka_log_log_size", []) if labels["topic"] == "doomed"]


def test_group_offsets_and_lag_per_partition(broker: InProcessBroker) -> None:
    create_topic(broker, "lagging", partitions=2)
    produce(broker, "lagging", batch([b"v"] * 5))
    produce(broker, "lagging", batch([b"v"] * 3), partition=1)
    commit(broker, "readers", "lagging", {0: 2, 1: 3})
    samples = scrape(broker)
    labels = {"consumergroup": "readers", "topic": "lagging"}
    assert value(samples, "kafka_consumergroup_current_offset", partition="0", **labels) == 2
    assert value(samples, "kafka_consumergroup_lag", partition="0", **labels) == 3
    assert value(samples, "kafka_consumergroup_lag", partition="1", **labels) == 0
    assert value(samples, "kafka_consumergroup_members", consumergroup="readers") == 0


def test_a_consumer_protocol_group_counts_its_members(broker: InProcessBroker) -> None:
    create_topic(broker, "shared", partitions=2)
    broker.call(FindCoordinatorRequest(key="modern"), 1)  # creates __consumer_offsets
    for _ in range(2):
        joined = broker.call(
            ConsumerGroupHeartbeatRequest(
                group_id="modern",
                member_id=str(uuid.uuid4()),
                member_epoch=0,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=["shared"],
                topic_partitions=[],
            ),
            1,
        )
        assert joined.error_code == ErrorCode.NONE, joined
    assert value(scrape(broker), "kafka_consumergroup_members", consumergroup="modern") == 2


def test_the_page_stays_bounded(broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "metrics_topics_max", 2)
    monkeypatch.setattr(limits, "metrics_partitions_max", 3)
    monkeypatch.setattr(limits, "metrics_group_partitions_max", 2)
    for name, partitions in (("a", 2), ("b", 2), ("c", 1)):
        create_topic(broker, name, partitions=partitions)
        produce(broker, name, batch([b"v"] * 2))
    commit(broker, "g1", "a", {0: 1, 1: 0})
    commit(broker, "g2", "c", {0: 1})
    samples = scrape(broker)

    in_topics = {
        labels["topic"]: v for labels, v in samples["kafka_server_brokertopicmetrics_messagesin_total"]
    }
    assert in_topics == {"a": 2, "b": 2, "(other)": 2}  # the third topic counted with the rest
    # Whole topics in name order: b does not fit in what a left, and then neither does c (which would).
    sizes = {(labels["topic"], labels["partition"]) for labels, _ in samples["kafka_log_log_size"]}
    assert sizes == {("a", "0"), ("a", "1"), ("b", "(all)"), ("c", "(all)"), ("__consumer_offsets", "(all)")}
    ends = {(labels["topic"], labels["partition"]) for labels, _ in samples["kafka_log_log_logendoffset"]}
    assert ends == {("a", "0"), ("a", "1")}
    lags = {
        (labels["consumergroup"], labels["partition"]): v for labels, v in samples["kafka_consumergroup_lag"]
    }
    assert lags == {("g1", "0"): 1, ("g1", "1"): 0, ("g2", "(all)"): 1}
    assert [labels["consumergroup"] for labels, _ in samples["kafka_consumergroup_current_offset"]] == [
        "g1",
        "g1",
    ]


def test_the_flush_of_a_log_is_timed(broker: InProcessBroker) -> None:
    create_topic(broker, "durable", **{"flush.messages": "1"})
    produce(broker, "durable", batch([b"v"]))
    samples = scrape(broker)
    assert value(samples, "kafka_log_logflushstats_logflushrateandtimems_count") >= 1


def test_the_page_parses_and_names_each_family_once(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path / "data")
    try:
        create_topic(broker, "t")
        page = broker.server.metrics.render(broker.server.state)
    finally:
        broker.close()
    declared = [line.split()[2] for line in page.splitlines() if line.startswith("# TYPE ")]
    assert len(declared) == len(set(declared))
    assert {family.name for family in text_string_to_metric_families(page)} >= {
        "kafka_network_requestmetrics_requests",
        "kafka_server_replicamanager_underreplicatedpartitions",
        "kafka_controller_kafkacontroller_activecontrollercount",
        "process_cpu_seconds",
        "process_open_fds",
    }
