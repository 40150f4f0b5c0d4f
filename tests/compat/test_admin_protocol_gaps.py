"""Admin features real clients use that strom answered differently from Kafka (issue 11, item 9):
dynamic broker configs, authorized operations, DescribeTopicPartitions, and offsets committed for
topics that do not exist, partition reassignments on a single node. Driven by confluent-kafka and kafka-python; the cluster-wide default
(BROKER resource "") over the raw protocol, since neither Python client can name it."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported untyped
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from strom.protocol.errors import ErrorCode
from strom.protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from strom.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from strom.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from strom.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from tests.compat.conftest import BrokerProcess, StartBroker
from tests.compat.support import (
    ADMIN_TIMEOUT_S,
    admin_client,
    confluent_produce,
    confluent_producer,
    create_topic,
    make_records,
    unique_topic,
)
from tests.compat.wire import WireClient

KAFKA_PYTHON_WARNING = "(read|open)_text is deprecated"
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=KAFKA_PYTHON_WARNING, category=DeprecationWarning)
    from kafka import KafkaConsumer
    from kafka.admin import ConfigResource as KafkaPythonConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.errors import (
        InvalidReplicationAssignmentError,
        NoError,
        NoReassignmentInProgressError,
        UnknownTopicOrPartitionError,
    )
    from kafka.structs import TopicPartition as KafkaPythonTopicPartition
    from kafka.structs import TopicPartitionReplica

pytestmark = [
    pytest.mark.compat,
    pytest.mark.filterwarnings(f"ignore:{KAFKA_PYTHON_WARNING}:DeprecationWarning"),
]

BROKER_RESOURCE = 4
SET = 0
SMALL_MESSAGE_MAX_BYTES = 2_000
LARGE_VALUE_BYTES = 10_000


@pytest.fixture
def admin(shared_broker: BrokerProcess) -> AdminClient:
    return admin_client(shared_broker.bootstrap)


@pytest.fixture
def kafka_python_admin(shared_broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=30_000)
    try:
        yield client
    finally:
        client.close()


def _alter_broker(admin: AdminClient, *entries: tuple[str, str | None]) -> None:
    changes = [
        ConfigEntry(
            name,
            value,
            incremental_operation=AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE,
        )
        for name, value in entries
    ]
    resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=changes)
    admin.incremental_alter_configs([resource])[resource].result(ADMIN_TIMEOUT_S)


def _broker_configs(admin: AdminClient) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ResourceType.BROKER, "0")
    configs: dict[str, ConfigEntry] = admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    return configs


def _produce_large(bootstrap: str, topic: str) -> KafkaError | None:
    """Produce one record bigger than SMALL_MESSAGE_MAX_BYTES; the delivery error, if any."""
    producer = confluent_producer(bootstrap, linger_ms=0, message_timeout_ms=10_000)
    errors: list[KafkaError | None] = []
    producer.produce(
        topic, b"x" * LARGE_VALUE_BYTES, on_delivery=lambda error, _message: errors.append(error)
    )
    assert producer.flush(ADMIN_TIMEOUT_S) == 0
    return errors[0]


def test_confluent_alters_a_dynamic_broker_config_that_applies_at_once_and_survives_a_restart(
    start_broker: StartBroker,
) -> None:
    broker = start_broker()
    topic = unique_topic("dynamic")
    create_topic(broker.bootstrap, topic, 1)
    admin = admin_client(broker.bootstrap)
    assert _produce_large(broker.bootstrap, topic) is None

    _alter_broker(admin, ("message.max.bytes", str(SMALL_MESSAGE_MAX_BYTES)))
    entry = _broker_configs(admin)["message.max.bytes"]
    assert (entry.value, entry.source, entry.is_read_only) == (
        str(SMALL_MESSAGE_MAX_BYTES),
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
        False,
    )
    resource = ConfigResource(ResourceType.TOPIC, topic)
    topic_entry = admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)["max.message.bytes"]
    assert (topic_entry.value, topic_entry.source) == (
        str(SMALL_MESSAGE_MAX_BYTES),
        ConfigSource.DYNAMIC_BROKER_CONFIG.value,
    )
    error = _produce_large(broker.bootstrap, topic)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE

    broker.restart()
    admin = admin_client(broker.bootstrap)
    assert _broker_configs(admin)["message.max.bytes"].value == str(SMALL_MESSAGE_MAX_BYTES)
    error = _produce_large(broker.bootstrap, topic)
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE

    _alter_broker(admin, ("message.max.bytes", None))
    assert _broker_configs(admin)["message.max.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert _produce_large(broker.bootstrap, topic) is None


def test_confluent_edits_cleanup_policy_as_a_list(shared_broker: BrokerProcess, admin: AdminClient) -> None:
    """confluent-kafka's own incremental_alter_configs test: APPEND keeps the list's order, and
    SUBTRACT may empty it (Kafka takes cleanup.policy="", neither retention nor compaction)."""
    topic = unique_topic("cleanup-list")
    create_topic(shared_broker.bootstrap, topic, 1)

    def edit(operation: AlterConfigOpType, value: str) -> str:
        entry = ConfigEntry("cleanup.policy", value, incremental_operation=operation)
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
        assert admin.incremental_alter_configs([resource])[resource].result(ADMIN_TIMEOUT_S) is None
        described = ConfigResource(ResourceType.TOPIC, topic)
        configs = admin.describe_configs([described])[described].result(ADMIN_TIMEOUT_S)
        policy: str = configs["cleanup.policy"].value
        return policy

    assert edit(AlterConfigOpType.APPEND, "compact") == "delete,compact"
    assert edit(AlterConfigOpType.SUBTRACT, "delete") == "compact"
    assert edit(AlterConfigOpType.SUBTRACT, "compact") == ""
    assert edit(AlterConfigOpType.SET, "compact,delete") == "compact,delete"


def test_confluent_sets_and_describes_a_group_config(admin: AdminClient) -> None:
    """confluent-kafka's own incremental_alter_configs test (its consumer-protocol run): a GROUP
    resource (KIP-848), for a group that need not exist; only what was set is not a default."""
    group = unique_topic("group-config")
    entry = ConfigEntry("consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)
    altered = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    assert admin.incremental_alter_configs([altered])[altered].result(ADMIN_TIMEOUT_S) is None
    described = ConfigResource(ResourceType.GROUP, group)
    configs = admin.describe_configs([described])[described].result(ADMIN_TIMEOUT_S)
    assert sorted(str(entry) for entry in configs.values() if not entry.is_default) == [
        'consumer.session.timeout.ms="50000"'
    ]
    assert configs["consumer.heartbeat.interval.ms"].is_default
    too_long = ConfigEntry(
        "consumer.session.timeout.ms", "600000", incremental_operation=AlterConfigOpType.SET
    )
    refused = ConfigResource(ResourceType.GROUP, group, incremental_configs=[too_long])
    with pytest.raises(KafkaException) as raised:
        admin.incremental_alter_configs([refused])[refused].result(ADMIN_TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_confluent_sets_a_kafka_dynamic_key_strom_does_not_use(admin: AdminClient) -> None:
    """librdkafka's own 0081_admin sets sasl.kerberos.min.time.before.relogin on a broker and expects
    no error, as Kafka answers: kept and shown, without effect."""
    _alter_broker(admin, ("sasl.kerberos.min.time.before.relogin", "58000"))
    try:
        assert _broker_configs(admin)["sasl.kerberos.min.time.before.relogin"].value == "58000"
    finally:
        _alter_broker(admin, ("sasl.kerberos.min.time.before.relogin", None))
    assert "sasl.kerberos.min.time.before.relogin" not in _broker_configs(admin)


def test_confluent_read_only_broker_config_is_refused(admin: AdminClient) -> None:
    with pytest.raises(KafkaException) as raised:
        _alter_broker(admin, ("num.partitions", "7"))
    assert raised.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert _broker_configs(admin)["num.partitions"].is_read_only


def test_cluster_wide_default_over_the_protocol(shared_broker: BrokerProcess, admin: AdminClient) -> None:
    topic = unique_topic("cluster-default")
    create_topic(shared_broker.bootstrap, topic, 1)
    alter = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=BROKER_RESOURCE,
                resource_name="",
                configs=[
                    IncrementalAlterConfigsRequest.AlterableConfig(
                        name="log.retention.bytes", config_operation=SET, value="123456789"
                    )
                ],
            )
        ]
    )
    describe = DescribeConfigsRequest(
        resources=[
            DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=BROKER_RESOURCE, resource_name="", configuration_keys=None
            )
        ]
    )
    with WireClient(shared_broker.port) as client:
        [altered] = client.round_trip(alter, IncrementalAlterConfigsResponse, 1).responses
        assert altered.error_code == ErrorCode.NONE
        [described] = client.round_trip(describe, DescribeConfigsResponse, 4).results
    assert [(c.name, c.value, c.config_source) for c in described.configs] == [
        ("log.retention.bytes", "123456789", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic)
    retention = admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)["retention.bytes"]
    assert (retention.value, retention.source) == (
        "123456789",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value,
    )


def test_kafka_python_reads_the_api_versions(
    shared_broker: BrokerProcess, kafka_python_admin: KafkaAdminClient
) -> None:
    """kafka-python's api_versions() maps every key to its ApiKey enum: strom's own API key is not
    listed to it (it is to strom's client, which names itself)."""
    versions = kafka_python_admin.api_versions()
    assert versions and all(int(key) < 1000 for key in versions)
    # kafka-python tells Kafka 4.0 by ListOffsets v10 (its own test_kafka_version_infer).
    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap)
    try:
        assert consumer.config["api_version"] == (4, 0)
    finally:
        consumer.close()


def test_kafka_python_elects_leaders_on_a_single_node(
    shared_broker: BrokerProcess, kafka_python_admin: KafkaAdminClient
) -> None:
    """kafka-python's own test_elect_leaders: on one broker every partition answers 84
    (ELECTION_NOT_NEEDED), which its elect_leaders() does not raise."""
    topic = unique_topic("elect")
    create_topic(shared_broker.bootstrap, topic, 2)
    response = kafka_python_admin.elect_leaders(0, {topic: [0, 1]})
    [(name, partitions, *_rest)] = [tuple(result) for result in response.replica_election_results]
    assert name == topic
    assert sorted((partition[0], partition[1]) for partition in partitions) == [(0, 84), (1, 84)]


def test_kafka_python_moves_a_replica_to_its_own_log_dir(
    shared_broker: BrokerProcess, kafka_python_admin: KafkaAdminClient
) -> None:
    """kafka-python's own test_alter_replica_log_dirs: a move to the current log dir is a no-op
    answered NoError."""
    topic = unique_topic("log-dir")
    create_topic(shared_broker.bootstrap, topic, 1)
    [described] = kafka_python_admin.describe_log_dirs()
    replica = TopicPartitionReplica(topic, 0, described["broker"])
    result = kafka_python_admin.alter_replica_log_dirs({replica: described["log_dirs"][0]["log_dir"]})
    assert result[replica] is NoError


def test_kafka_python_reassigns_on_a_single_node(
    shared_broker: BrokerProcess, kafka_python_admin: KafkaAdminClient
) -> None:
    """kafka-python's own test_alter_partition_reassignments and test_list_partition_reassignments:
    on one broker a partition's replica is on it already (a "move" there is accepted), any other
    broker is not registered, no reassignment is ever in progress."""
    topic = unique_topic("reassign")
    create_topic(shared_broker.bootstrap, topic, 1)
    tp = KafkaPythonTopicPartition(topic, 0)
    brokers = [broker.node_id for broker in kafka_python_admin._manager.cluster.brokers()]
    assert kafka_python_admin.alter_partition_reassignments({tp: brokers}) == {tp: None}
    refused = kafka_python_admin.alter_partition_reassignments(
        {tp: [*brokers, 7], KafkaPythonTopicPartition(topic, 3): brokers}
    )
    assert refused[tp] is InvalidReplicationAssignmentError
    assert refused[KafkaPythonTopicPartition(topic, 3)] is UnknownTopicOrPartitionError
    assert kafka_python_admin.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
    assert kafka_python_admin.list_partition_reassignments() == {}
    assert kafka_python_admin.list_partition_reassignments([tp]) == {}


def test_kafka_python_alters_a_broker_config(kafka_python_admin: KafkaAdminClient) -> None:
    """kafka-python checks the key against the broker's dynamic (not read-only) keys first."""
    resource = KafkaPythonConfigResource(
        ConfigResourceType.BROKER, "0", configs={"log.retention.ms": "7200000"}
    )
    assert kafka_python_admin.alter_configs([resource]) == {"broker": {"0": "OK"}}
    described = kafka_python_admin.describe_configs(
        [KafkaPythonConfigResource(ConfigResourceType.BROKER, "0")]
    )
    entry = described["broker"]["0"]["log.retention.ms"]
    assert entry["value"] == "7200000" and entry["config_source"] == "DYNAMIC_BROKER_CONFIG"
    with pytest.raises(ValueError, match="Unrecognized configs"):
        kafka_python_admin.alter_configs(
            [KafkaPythonConfigResource(ConfigResourceType.BROKER, "0", configs={"num.partitions": "2"})]
        )


def test_confluent_sees_authorized_operations(shared_broker: BrokerProcess, admin: AdminClient) -> None:
    topic = unique_topic("operations")
    create_topic(shared_broker.bootstrap, topic, 1)
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)
    assert set(described[topic].result(ADMIN_TIMEOUT_S).authorized_operations) == {
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }
    cluster = admin.describe_cluster(include_authorized_operations=True).result(ADMIN_TIMEOUT_S)
    assert AclOperation.IDEMPOTENT_WRITE in cluster.authorized_operations
    assert AclOperation.CLUSTER_ACTION in cluster.authorized_operations
    group = unique_topic("operations-group")
    commit = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])
    admin.alter_consumer_group_offsets([commit])[group].result(ADMIN_TIMEOUT_S)
    groups = admin.describe_consumer_groups([group], include_authorized_operations=True)
    assert set(groups[group].result(ADMIN_TIMEOUT_S).authorized_operations) == {
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
    }


def test_kafka_python_describe_topic_partitions_pages(
    shared_broker: BrokerProcess, kafka_python_admin: KafkaAdminClient
) -> None:
    topic = unique_topic("paged")
    create_topic(shared_broker.bootstrap, topic, 5)
    seen: list[int] = []
    cursor = None
    for _ in range(5):
        page = kafka_python_admin.describe_topic_partitions(
            [topic], response_partition_limit=2, cursor=cursor
        )
        [described] = page["topics"]
        assert described["error_code"] == 0 and described["name"] == topic
        seen += [partition["partition_index"] for partition in described["partitions"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [0, 1, 2, 3, 4]


def test_confluent_group_offsets_for_a_missing_topic_are_refused_per_partition(
    shared_broker: BrokerProcess, admin: AdminClient
) -> None:
    topic = unique_topic("committed")
    create_topic(shared_broker.bootstrap, topic, 1)
    confluent_produce(confluent_producer(shared_broker.bootstrap), topic, make_records(3))
    group = unique_topic("offsets-group")
    missing = unique_topic("missing")
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(missing, 0, 1), TopicPartition(topic, 0, 2)]
    )
    result = admin.alter_consumer_group_offsets([request])[group].result(ADMIN_TIMEOUT_S)
    errors = {(tp.topic, tp.partition): tp.error for tp in result.topic_partitions}
    assert errors[(topic, 0)] is None
    missing_error = errors[(missing, 0)]
    assert missing_error is not None and missing_error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_offset_commit_v2_with_the_largest_retention_is_answered(shared_broker: BrokerProcess) -> None:
    """It used to overflow the stored record's int64 and close the connection with a traceback."""
    topic = unique_topic("retained")
    create_topic(shared_broker.bootstrap, topic, 1)
    request = OffsetCommitRequest(
        group_id=unique_topic("retention-group"),
        generation_id_or_member_epoch=-1,
        member_id="",
        retention_time_ms=2**63 - 1,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)
                ],
            )
        ],
    )
    with WireClient(shared_broker.port) as client:
        found = client.round_trip(FindCoordinatorRequest(key=request.group_id), FindCoordinatorResponse, 1)
        assert found.error_code == ErrorCode.NONE
        response = client.round_trip(request, OffsetCommitResponse, 2)
    assert [p.error_code for t in response.topics for p in t.partitions] == [ErrorCode.NONE]
    assert "Traceback" not in shared_broker.log_text()
