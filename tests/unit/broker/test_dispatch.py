"""The broker's handlers end to end through dispatch (no sockets): what clients are told."""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.broker.registry import HANDLERS
from strom.broker.server import CloseConnection
from strom.protocol.api import STROM_CLIENT_SOFTWARE_NAME
from strom.protocol.errors import ErrorCode
from strom.protocol.group_history import STROM_GROUP_HISTORY_API_KEY
from strom.protocol.headers import decode_response_header, encode_request
from strom.protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest
from strom.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from strom.protocol.messages.create_partitions import CreatePartitionsRequest
from strom.protocol.messages.create_topics import CreateTopicsRequest
from strom.protocol.messages.delete_records import DeleteRecordsRequest
from strom.protocol.messages.delete_topics import DeleteTopicsRequest
from strom.protocol.messages.describe_configs import DescribeConfigsRequest
from strom.protocol.messages.elect_leaders import ElectLeadersRequest
from strom.protocol.messages.fetch import FetchRequest
from strom.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from strom.protocol.messages.init_producer_id import InitProducerIdRequest
from strom.protocol.messages.list_offsets import ListOffsetsRequest
from strom.protocol.messages.metadata import MetadataRequest
from strom.protocol.messages.produce import ProduceRequest
from strom.protocol.records import build_batch, iter_records
from strom.protocol.records.batch import Record
from tests.unit.broker.conftest import InProcessBroker


def create_topic(broker: InProcessBroker, name: str, partitions: int = 1, **configs: str) -> None:
    request = CreateTopicsRequest(
        topics=[
            CreateTopicsRequest.CreatableTopic(
                name=name,
                num_partitions=partitions,
                replication_factor=1,
                configs=[
                    CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()
                ],
            )
        ],
        timeout_ms=1000,
    )
    response = broker.call(request, 7)
    assert response.topics[0].error_code == ErrorCode.NONE, response


def batch(values: list[bytes], timestamp: int = 1_000, **kwargs: int) -> bytes:
    records = [
        Record(offset_delta=i, timestamp_delta=i, key=b"k%d" % i, value=v) for i, v in enumerate(values)
    ]
    return build_batch(records, base_timestamp=timestamp, **kwargs)


def produce(
    broker: InProcessBroker, topic: str, records: bytes, partition: int = 0, version: int = 9, acks: int = -1
):
    request = ProduceRequest(
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=records)],
            )
        ],
    )
    if acks == 0:
        frame = encode_request(0, version, 1, "tests", request.encode(version))
        assert broker.raw(frame) is None
        return None
    return broker.call(request, version).responses[0].partition_responses[0]


def fetch(broker: InProcessBroker, topic: str, offset: int, version: int = 12, **kwargs: int):
    request = FetchRequest(
        max_wait_ms=kwargs.pop("max_wait_ms", 0),
        min_bytes=kwargs.pop("min_bytes", 1),
        session_id=kwargs.pop("session_id", 0),
        session_epoch=kwargs.pop("session_epoch", -1),
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )
    return broker.call(request, version)


def test_api_versions_lists_exactly_the_registered_handlers(broker: InProcessBroker) -> None:
    """To strom's own client every handler; to any other client Kafka's APIs only (kafka-python's
    KafkaAdminClient.api_versions() fails on a key Kafka does not have)."""
    strom = ApiVersionsRequest(client_software_name=STROM_CLIENT_SOFTWARE_NAME, client_software_version="1")
    response = broker.call(strom, 3)
    assert response.error_code == ErrorCode.NONE
    advertised = {api.api_key: (api.min_version, api.max_version) for api in response.api_keys}
    assert advertised == {key: (h.min_version, h.max_version) for key, h in HANDLERS.items()}
    assert advertised[0] == (3, 11) and advertised[1] == (4, 17) and advertised[3] == (0, 12)
    assert STROM_GROUP_HISTORY_API_KEY in advertised
    kafka_only = {key: versions for key, versions in advertised.items() if key != STROM_GROUP_HISTORY_API_KEY}
    for request, version in (
        (ApiVersionsRequest(client_software_name="apache-kafka-java", client_software_version="4.0.0"), 3),
        (ApiVersionsRequest(), 0),
        (ApiVersionsRequest(), 2),
        (strom, 2),  # no client_software_name before v3
    ):
        response = broker.call(request, version)
        assert {api.api_key: (api.min_version, api.max_version) for api in response.api_keys} == kafka_only


def test_api_versions_too_new_gets_v0_answer_with_the_table(broker: InProcessBroker) -> None:
    frame = encode_request(18, 9, 77, "tests", b"")
    response = broker.raw(frame)
    assert response is not None
    header, offset = decode_response_header(response, 18, 0)
    assert header.correlation_id == 77
    body = ApiVersionsResponse.decode(memoryview(response)[offset:], 0)
    assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert any(api.api_key == 0 for api in body.api_keys)
    assert all(api.api_key != STROM_GROUP_HISTORY_API_KEY for api in body.api_keys)


def test_unsupported_version_of_other_api_answers_or_closes(broker: InProcessBroker) -> None:
    # Produce v2 is in the specification but not implemented: the response schema exists, and
    # ProduceResponse has no top-level error code, so the connection is closed.
    with pytest.raises(CloseConnection):
        broker.raw(encode_request(0, 2, 1, "tests", b""))
    # An API key nobody defines: closed.
    with pytest.raises(CloseConnection):
        broker.raw(encode_request(999, 0, 1, "tests", b""))


def test_malformed_body_closes_the_connection(broker: InProcessBroker) -> None:
    with pytest.raises(CloseConnection):
        broker.raw(encode_request(3, 9, 1, "tests", b"\xff\xff\xff"))


def test_metadata_auto_creates_and_reports_ids(broker: InProcessBroker) -> None:
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="orders")])
    response = broker.call(request, 12)
    topic = response.topics[0]
    assert topic.error_code == ErrorCode.NONE and topic.name == "orders"
    assert topic.topic_id.int != 0 and len(topic.partitions) == 1
    assert response.brokers[0].port == 0 and response.cluster_id
    everything = broker.call(MetadataRequest(topics=None), 12)
    assert [t.name for t in everything.topics] == ["orders"]
    v0_everything = broker.call(MetadataRequest(topics=[]), 0)
    assert [t.name for t in v0_everything.topics] == ["orders"]


def test_metadata_without_auto_create_and_bad_names(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path, {"auto.create.topics.enable": "false"})
    try:
        response = broker.call(
            MetadataRequest(
                topics=[
                    MetadataRequest.MetadataRequestTopic(name="missing"),
                    MetadataRequest.MetadataRequestTopic(name="bad name!"),
                ]
            ),
            9,
        )
        errors = [t.error_code for t in response.topics]
        assert errors == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION]
    finally:
        broker.close()


def test_produce_then_fetch_returns_the_batch_bytes(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    first = produce(broker, "t", batch([b"a", b"b", b"c"]))
    assert first.error_code == ErrorCode.NONE and first.base_offset == 0
    second = produce(broker, "t", batch([b"d"]))
    assert second.base_offset == 3
    response = fetch(broker, "t", 1)
    partition = response.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.NONE and partition.high_watermark == 4
    values = [(r.offset, r.value) for r in iter_records(bytes(partition.records))]
    assert values == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    past_end = fetch(broker, "t", 4).responses[0].partitions[0]
    assert past_end.error_code == ErrorCode.NONE and len(past_end.records) == 0
    out_of_range = fetch(broker, "t", 99).responses[0].partitions[0]
    assert out_of_range.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and out_of_range.high_watermark == 4


def test_fetch_by_topic_id_from_v13(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    produce(broker, "t", batch([b"x"]))
    topic_id = (
        broker.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")]), 12)
        .topics[0]
        .topic_id
    )
    request = FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        topics=[
            FetchRequest.FetchTopic(
                topic_id=topic_id,
                partitions=[
                    FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )
    response = broker.call(request, 13)
    assert response.responses[0].topic_id == topic_id
    assert [r.value for r in iter_records(bytes(response.responses[0].partitions[0].records))] == [b"x"]


def test_fetch_sessions_are_sessionless(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    full = fetch(broker, "t", 0, session_id=0, session_epoch=0)
    assert full.error_code == ErrorCode.NONE and full.session_id == 0
    unknown = fetch(broker, "t", 0, session_id=1234, session_epoch=3)
    assert unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_produce_errors(broker: InProcessBroker) -> None:
    create_topic(broker, "t", **{"max.message.bytes": "200"})
    assert produce(broker, "missing-topic", batch([b"a"])).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(broker, "t", batch([b"a"]), partition=5).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    corrupt = bytearray(batch([b"a"]))
    corrupt[-1] ^= 0xFF
    assert produce(broker, "t", bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE
    too_large = produce(broker, "t", batch([b"x" * 500]))
    assert too_large.error_code == ErrorCode.MESSAGE_TOO_LARGE and too_large.error_message
    assert produce(broker, "t", batch([b"a"]), acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    # Nothing refused was appended.
    assert produce(broker, "t", batch([b"ok"])).base_offset == 0


def test_produce_acks_zero_gets_no_response_but_appends(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    produce(broker, "t", batch([b"a"]), acks=0)
    assert produce(broker, "t", batch([b"b"])).base_offset == 1


def test_compacted_topic_refuses_null_keys(broker: InProcessBroker) -> None:
    create_topic(broker, "c", **{"cleanup.policy": "compact"})
    keyless = build_batch([Record(offset_delta=0, timestamp_delta=0, key=None, value=b"v")], base_timestamp=1)
    assert produce(broker, "c", keyless).error_code == ErrorCode.INVALID_RECORD


def test_idempotent_retry_gets_the_original_offset(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    init = broker.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1000), 4)
    assert init.error_code == ErrorCode.NONE and init.producer_id >= 0
    pid, epoch = init.producer_id, init.producer_epoch
    first = batch([b"a", b"b"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
    assert produce(broker, "t", first).base_offset == 0
    retry = produce(broker, "t", first)
    assert retry.error_code == ErrorCode.NONE and retry.base_offset == 0
    gap = batch([b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=5)
    assert produce(broker, "t", gap).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    following = batch([b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=2)
    assert produce(broker, "t", following).base_offset == 2
    bumped = broker.call(
        InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=1000, producer_id=pid, producer_epoch=epoch
        ),
        4,
    )
    assert (bumped.producer_id, bumped.producer_epoch) == (pid, epoch + 1)


def test_producer_ids_are_not_reused_after_restart(tmp_path: Path) -> None:
    first = InProcessBroker(tmp_path)
    ids = [
        first.call(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1), 1).producer_id
        for _ in range(3)
    ]
    first.close()
    second = InProcessBroker(tmp_path)
    try:
        again = second.call(
            InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=1), 1
        ).producer_id
        assert again not in ids and again > max(ids)
    finally:
        second.close()


def test_list_offsets(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    produce(broker, "t", batch([b"a", b"b", b"c"], timestamp=1000))  # timestamps 1000, 1001, 1002
    produce(broker, "t", batch([b"d"], timestamp=5000))

    def lookup(timestamp: int, version: int = 7) -> tuple[int, int]:
        request = ListOffsetsRequest(
            replica_id=-1,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(
                    name="t",
                    partitions=[
                        ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp)
                    ],
                )
            ],
        )
        partition = broker.call(request, version).topics[0].partitions[0]
        assert partition.error_code == ErrorCode.NONE
        return partition.offset, partition.timestamp

    assert lookup(-2)[0] == 0
    assert lookup(-1)[0] == 4
    assert lookup(1001) == (1, 1001)
    assert lookup(1003) == (3, 5000)
    assert lookup(9999) == (-1, -1)
    assert lookup(-3) == (3, 5000)
    # v8+: earliest local is the log start (nothing is tiered); v9+: latest tiered is no offset.
    for version in (8, 9, 10):
        assert lookup(-4, version)[0] == 0
        assert lookup(-1, version)[0] == 4
    assert lookup(-5, 9) == (-1, -1)
    assert lookup(-5, 10) == (-1, -1)


@pytest.mark.parametrize("version", [1, 4, 5, 7])
def test_created_topics_answer_a_null_error_message(broker: InProcessBroker, version: int) -> None:
    """As Kafka: a topic created (or one that would be, validate_only) has ErrorMessage null, not
    an empty string (aiokafka's own admin test asserts ``is None``); a refused one says why."""
    for validate_only in (True, False):
        created = broker.call(
            CreateTopicsRequest(
                topics=[CreateTopicsRequest.CreatableTopic(name="n", num_partitions=1, replication_factor=1)],
                validate_only=validate_only,
            ),
            version,
        )
        assert created.topics[0].error_code == ErrorCode.NONE
        assert created.topics[0].error_message is None
    again = broker.call(
        CreateTopicsRequest(
            topics=[CreateTopicsRequest.CreatableTopic(name="n", num_partitions=1, replication_factor=1)]
        ),
        version,
    )
    assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert again.topics[0].error_message


def test_topics_lifecycle_and_errors(broker: InProcessBroker) -> None:
    create_topic(broker, "t", partitions=2)
    again = broker.call(
        CreateTopicsRequest(
            topics=[CreateTopicsRequest.CreatableTopic(name="t", num_partitions=1, replication_factor=1)]
        ),
        5,
    )
    assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    bad = broker.call(
        CreateTopicsRequest(
            topics=[
                CreateTopicsRequest.CreatableTopic(name="bad name!", num_partitions=1, replication_factor=1),
                CreateTopicsRequest.CreatableTopic(name="rf3", num_partitions=1, replication_factor=3),
                CreateTopicsRequest.CreatableTopic(name="zero", num_partitions=0, replication_factor=1),
                CreateTopicsRequest.CreatableTopic(
                    name="badconf",
                    num_partitions=1,
                    replication_factor=1,
                    configs=[CreateTopicsRequest.CreatableTopicConfig(name="retention.ms", value="soon")],
                ),
            ]
        ),
        5,
    )
    assert [t.error_code for t in bad.topics] == [
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.INVALID_REPLICATION_FACTOR,
        ErrorCode.INVALID_PARTITIONS,
        ErrorCode.INVALID_CONFIG,
    ]
    grown = broker.call(
        CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(name="t", count=4)]), 1
    )
    assert grown.results[0].error_code == ErrorCode.NONE
    shrink = broker.call(
        CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(name="t", count=2)]), 1
    )
    assert shrink.results[0].error_code == ErrorCode.INVALID_PARTITIONS
    metadata = broker.call(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")]), 9)
    assert len(metadata.topics[0].partitions) == 4
    deleted = broker.call(DeleteTopicsRequest(topic_names=["t", "nope"], timeout_ms=1000), 4)
    assert [r.error_code for r in deleted.responses] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]


def test_configs_describe_and_incremental_alter(broker: InProcessBroker) -> None:
    create_topic(broker, "t", **{"retention.ms": "1000"})

    def describe() -> dict[str, tuple[str | None, int]]:
        request = DescribeConfigsRequest(
            resources=[
                DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=2, resource_name="t", configuration_keys=None
                )
            ]
        )
        result = broker.call(request, 4).results[0]
        assert result.error_code == ErrorCode.NONE
        return {c.name: (c.value, c.config_source) for c in result.configs}

    def alter(*changes: tuple[str, int, str | None]) -> int:
        request = IncrementalAlterConfigsRequest(
            resources=[
                IncrementalAlterConfigsRequest.AlterConfigsResource(
                    resource_type=2,
                    resource_name="t",
                    configs=[
                        IncrementalAlterConfigsRequest.AlterableConfig(
                            name=name, config_operation=operation, value=value
                        )
                        for name, operation, value in changes
                    ],
                )
            ]
        )
        return int(broker.call(request, 1).responses[0].error_code)

    configs = describe()
    assert configs["retention.ms"] == ("1000", 1)
    assert configs["cleanup.policy"][1] == 5
    assert alter(("retention.ms", 1, None), ("cleanup.policy", 2, "compact")) == ErrorCode.NONE
    configs = describe()
    assert configs["retention.ms"][1] == 5
    assert configs["cleanup.policy"] == ("delete,compact", 1)  # appended after, as Kafka keeps it
    # SUBTRACT down to the empty list: Kafka takes it (neither retention nor compaction).
    assert alter(("cleanup.policy", 3, "delete")) == ErrorCode.NONE
    assert describe()["cleanup.policy"] == ("compact", 1)
    assert alter(("cleanup.policy", 3, "compact")) == ErrorCode.NONE
    assert describe()["cleanup.policy"] == ("", 1)
    assert alter(("cleanup.policy", 0, "compact, delete")) == ErrorCode.NONE
    assert describe()["cleanup.policy"] == ("compact,delete", 1)
    assert alter(("no.such.key", 0, "1")) == ErrorCode.INVALID_CONFIG


def test_delete_records_moves_the_start(broker: InProcessBroker) -> None:
    create_topic(broker, "t")
    produce(broker, "t", batch([b"a", b"b", b"c"]))
    request = DeleteRecordsRequest(
        topics=[
            DeleteRecordsRequest.DeleteRecordsTopic(
                name="t",
                partitions=[DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=2)],
            )
        ],
        timeout_ms=1000,
    )
    result = broker.call(request, 2).topics[0].partitions[0]
    assert result.error_code == ErrorCode.NONE and result.low_watermark == 2
    assert fetch(broker, "t", 0).responses[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_describe_log_dirs_reports_partition_sizes(broker: InProcessBroker) -> None:
    from strom.protocol.messages.describe_log_dirs import DescribeLogDirsRequest

    create_topic(broker, "sized", partitions=2)
    produce(broker, "sized", batch([b"x" * 100] * 10), partition=1)
    everything = broker.call(DescribeLogDirsRequest(topics=None), 4)
    [result] = everything.results
    assert result.error_code == ErrorCode.NONE and result.total_bytes > 0 and result.usable_bytes > 0
    sizes = {(t.name, p.partition_index): p.partition_size for t in result.topics for p in t.partitions}
    assert sizes[("sized", 0)] == 0 and sizes[("sized", 1)] > 1000
    one = broker.call(
        DescribeLogDirsRequest(
            topics=[DescribeLogDirsRequest.DescribableLogDirTopic(topic="sized", partitions=[1])]
        ),
        1,
    )
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in one.results[0].topics] == [
        ("sized", [1])
    ]


def test_a_single_node_answers_elect_leaders_election_not_needed(broker: InProcessBroker) -> None:
    """As Kafka on one broker (kafka-python's own test_elect_leaders): the one replica leads."""
    create_topic(broker, "t", partitions=2)
    request = ElectLeadersRequest(
        election_type=0,
        topic_partitions=[
            ElectLeadersRequest.TopicPartitions(topic="t", partitions=[0, 1, 7]),
            ElectLeadersRequest.TopicPartitions(topic="nope", partitions=[0]),
        ],
        timeout_ms=1000,
    )
    response = broker.call(request, 2)
    assert response.error_code == ErrorCode.NONE
    answers = {
        (result.topic, partition.partition_id): partition.error_code
        for result in response.replica_election_results
        for partition in result.partition_result
    }
    assert answers == {
        ("t", 0): ErrorCode.ELECTION_NOT_NEEDED,
        ("t", 1): ErrorCode.ELECTION_NOT_NEEDED,
        ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    every = broker.call(ElectLeadersRequest(election_type=1, topic_partitions=None, timeout_ms=1000), 2)
    assert (every.error_code, every.replica_election_results) == (ErrorCode.NONE, [])


def test_alter_replica_log_dirs_to_the_one_directory_is_done_already(broker: InProcessBroker) -> None:
    """One log directory per broker: a move to it is done (kafka-python's own
    test_alter_replica_log_dirs), to any other is LOG_DIR_NOT_FOUND."""
    create_topic(broker, "t", partitions=2)

    def move(path: str, partitions: list[int], topic: str = "t") -> dict[int, int]:
        request = AlterReplicaLogDirsRequest(
            dirs=[
                AlterReplicaLogDirsRequest.AlterReplicaLogDir(
                    path=path,
                    topics=[
                        AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name=topic, partitions=partitions)
                    ],
                )
            ]
        )
        [result] = broker.call(request, 2).results
        assert result.topic_name == topic
        return {partition.partition_index: partition.error_code for partition in result.partitions}

    data_dir = str(broker.config.data_dir.resolve())
    assert move(data_dir, [0, 1]) == {0: ErrorCode.NONE, 1: ErrorCode.NONE}
    assert move(data_dir + "/", [5]) == {5: ErrorCode.REPLICA_NOT_AVAILABLE}
    assert move(data_dir, [0], topic="nope") == {0: ErrorCode.REPLICA_NOT_AVAILABLE}
    assert move("/elsewhere", [0]) == {0: ErrorCode.LOG_DIR_NOT_FOUND}
    # Hostile paths are text that names no directory (found by the broker fuzzer: a NUL byte).
    assert move(data_dir + "\x00", [0]) == {0: ErrorCode.LOG_DIR_NOT_FOUND}
    assert move("../" * 10_000, [0]) == {0: ErrorCode.LOG_DIR_NOT_FOUND}
    assert move(data_dir + "/../" + broker.config.data_dir.resolve().name, [0]) == {0: ErrorCode.NONE}
